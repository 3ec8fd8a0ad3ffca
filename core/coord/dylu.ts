// Dynamic Local Updates (DyLU, Async Local-SGD): inner steps per island from its measured speed,
// so islands of very different speeds return at about the same time.

export interface DyluInput {
  /** The island's measured (or declared) throughput, tokens/s; undefined when unknown. */
  tokensPerSec: number | undefined;
  /**
   * The fastest active island's inner steps per second (ratio rule): steps,
   * not tokens, so islands of different batch sizes return together.
   */
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
      steps = Math.round(((ms / 1000) * v) / (x.batchSize * x.seqLen));
    } else if (x.fastestStepsPerSec !== undefined && x.fastestStepsPerSec > 0) {
      const sps = v / (x.batchSize * x.seqLen);
      steps = Math.round((x.innerSteps * sps) / Math.max(sps, x.fastestStepsPerSec));
    }
  }
  return Math.min(x.maxInnerSteps, Math.max(x.minInnerSteps, steps));
}
