// Inner learning-rate schedule: linear warmup, then cosine decay to a floor.
// Positions are in any unit (steps for `atoll train`, run tokens for islands: see
// core/protocol.ts InnerLrPlan); `unit` is how far one step advances the position.

export interface LrSchedule {
  maxLr: number;
  minLr: number;
  /** Linear warmup over [0, warmup). */
  warmup: number;
  /** The cosine reaches minLr here; ≤ 0 means open-ended (maxLr after warmup). */
  total: number;
}

/** The learning rate of the step that starts at `pos` (and advances it by `unit`). */
export function learningRate(s: LrSchedule, pos: number, unit = 1): number {
  if (s.warmup > 0 && pos < s.warmup) return s.maxLr * Math.max(0.01, (pos + unit) / (s.warmup + unit));
  if (s.total <= 0) return s.maxLr;
  const span = Math.max(1, s.total - s.warmup);
  const p = Math.min(1, Math.max(0, (pos - s.warmup) / span));
  return s.minLr + 0.5 * (s.maxLr - s.minLr) * (1 + Math.cos(Math.PI * p));
}
