// Inner learning-rate schedule: linear warmup, then cosine decay to a floor.

export interface LrSchedule {
  maxLr: number;
  minLr: number;
  warmupSteps: number;
  totalSteps: number; // steps over which the cosine runs; past it, minLr
}

export function learningRate(s: LrSchedule, step: number): number {
  if (step < s.warmupSteps) return (s.maxLr * (step + 1)) / s.warmupSteps;
  if (step >= s.totalSteps) return s.minLr;
  const progress = (step - s.warmupSteps) / Math.max(1, s.totalSteps - s.warmupSteps);
  return s.minLr + 0.5 * (s.maxLr - s.minLr) * (1 + Math.cos(Math.PI * progress));
}
