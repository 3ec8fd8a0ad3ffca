// Revert replay on the coordinator's state (server/run/delta-archive.ts drives it): a coordinator
// restored from a checkpoint takes each recorded outer step again with exactly the deltas kept, and
// the live one adopts what that rebuilt as a new version.

import { closeRound } from './close.ts';
import { hashParams } from './hash.ts';
import type { CoordState } from './state.ts';
import type { PendingDelta } from './types.ts';

/**
 * Takes one recorded outer step again, with exactly `kept` (decoded deltas as they were held): what
 * closing a round with them does, its events dropped. Never on the live state.
 */
export function replayStep(s: CoordState, kept: Omit<PendingDelta, 'weight' | 'arrivedAt'>[], now: number): void {
  if (s.outerStep.offload) throw new Error('coordinator: a replay takes its steps here (no offload)');
  s.round.pending = kept.map((k) => ({ ...k, weight: 0, arrivedAt: now }));
  closeRound(s, now);
  s.events.length = 0;
}

/**
 * θ, the outer optimizer's and the downlink's state and the norm history of `rebuilt` replace
 * those of `live`, as a new version; `tokensRemoved` leave the token count. No update message leads
 * to it: replicas fetch θ. With an offload, the host imports the new state before the next step.
 */
export function adoptRebuilt(live: CoordState, rebuilt: CoordState, tokensRemoved: number): void {
  const { outer, residual } = rebuilt.outerStep.state();
  live.outerStep.adopt(rebuilt.outerStep.theta, outer, residual);
  live.norms.restore(rebuilt.norms.scores.slice(), rebuilt.norms.steps.slice());
  live.version += 1;
  live.hash = hashParams(live.outerStep.theta);
  const totals = live.ledger.totals;
  totals.tokensApplied = Math.max(0, totals.tokensApplied - tokensRemoved);
  totals.version = live.version;
}
