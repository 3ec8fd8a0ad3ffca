// Dynamic Local Updates (DyLU, Async Local-SGD): inner steps per island from its measured speed,
// so islands of very different speeds return at about the same time.

export interface DyluInput {
  /** The island's measured (or declared) throughput, tokens/s; undefined when unknown. */
  tokensPerSec: number | undefined;
  /** The fastest active island's inner steps per second (ratio rule): steps, not tokens, so islands of different batch sizes return together. */
  fastestStepsPerSec: number | undefined;
  batchSize: number;
  seqLen: number;
  /** H: steps of the fastest island (ratio rule), or of an island of unknown speed. */
  innerSteps: number;
  minInnerSteps: number;
  maxInnerSteps: number;
  /** > 0: time rule, steps = targetRoundMs · tokens/s / (B·T). 0: ratio rule, H · (steps/s) / (steps/s)_max. */
  targetRoundMs: number;
  /** Time left in the round (time rule, a late joiner of a sync round); defaults to targetRoundMs. */
  remainingMs?: number;
}

/** Inner steps for one island, clamped to [minInnerSteps, maxInnerSteps]. */
export function dyluInnerSteps(x: DyluInput): number {
  let steps = x.innerSteps;
  const v = x.tokensPerSec;
  if (v !== undefined && v > 0) {
    if (x.targetRoundMs > 0) {
      const ms = x.remainingMs ?? x.targetRoundMs;
      steps = Math.round((ms / 1000) * v / (x.batchSize * x.seqLen));
    } else if (x.fastestStepsPerSec !== undefined && x.fastestStepsPerSec > 0) {
      const sps = v / (x.batchSize * x.seqLen);
      steps = Math.round((x.innerSteps * sps) / Math.max(sps, x.fastestStepsPerSec));
    }
  }
  return Math.min(x.maxInnerSteps, Math.max(x.minInnerSteps, steps));
}

/**
 * Aligned rounds (async, CoordinatorConfig.alignRounds): the steps that end this island's round on the
 * run's next tick. Ticks fall every period of the clock: the target round time, or (ratio rule) H steps
 * of the fastest island rounded to a power of two seconds, so that when the fastest island changes
 * (fast islands join slow ones) the new grid's ticks still include the old one's and rounds sized
 * before end with the rounds sized after. The tick is the first one at least half a period away that
 * minInnerSteps at this island's speed can reach, less its overhead (the time its rounds take past
 * their compute). Islands of any speed then have their Δs ready together, so a mixing group fills
 * instead of pairing whoever happens to be ready. Unknown speed: DyLU's steps.
 */
export function alignedInnerSteps(x: DyluInput & { nowMs: number; overheadMs?: number }): number {
  const v = x.tokensPerSec;
  const periodMs = x.targetRoundMs > 0 ? x.targetRoundMs
    : x.fastestStepsPerSec && x.fastestStepsPerSec > 0 ? 1000 * 2 ** Math.round(Math.log2(x.innerSteps / x.fastestStepsPerSec)) : 0;
  if (v === undefined || v <= 0 || !(periodMs > 0)) return dyluInnerSteps(x);
  const stepsPerMs = v / (x.batchSize * x.seqLen) / 1000;
  const overhead = x.overheadMs ?? 0;
  const earliest = x.nowMs + overhead + Math.max(periodMs / 2, x.minInnerSteps / stepsPerMs);
  const tick = Math.ceil(earliest / periodMs) * periodMs;
  const steps = Math.round((tick - x.nowMs - overhead) * stepsPerMs);
  return Math.min(x.maxInnerSteps, Math.max(x.minInnerSteps, steps));
}
