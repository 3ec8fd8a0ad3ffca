// The outer momentum's anneal: the factor η(now)/η(last step) ≤ 1 of the inner learning-rate schedule
// that an outer step multiplies the momentum's decay by (OuterOptimizer.propose, outer.ts header).
// η is the run's schedule (warm-up, cosine to minLr at the budget) at the tokens in θ; "now" is this
// step's, "last step" the tokens in θ when the last update was taken (its VersionStats). Never above 1:
// a warm-up does not grow the momentum. Derived from what the server counted, never from a claim.

import { learningRate } from '../model/schedule.ts';
import type { CoordinatorConfig } from './config.ts';
import type { VersionStats } from './types.ts';

export function momentumAnneal(cfg: CoordinatorConfig, tokensNow: number, last: VersionStats | undefined): number {
  if (!last || cfg.totalTokens <= 0) return 1;
  const { maxLr, minLr, warmupTokens } = cfg.innerLr;
  const schedule = { maxLr, minLr, warmup: warmupTokens, total: cfg.totalTokens };
  const then = learningRate(schedule, last.totalTokens - last.tokens);
  const now = learningRate(schedule, tokensNow);
  return then > 0 && now < then ? now / then : 1;
}
