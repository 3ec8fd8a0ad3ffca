// What contributing costs, in figures a person can judge: the download once, then upload and
// download per round and per hour at this device's measured speed. Pure: no DOM.

import type { RunInfo } from './run-info.ts';

export interface CostEstimate {
  /** Bytes down per round: one update (the server's measured mean once it sent any, else the codec's bound). */
  downPerRound: number;
  /** Seconds one round's training takes on this device at its usage cap (null: speed unknown). */
  roundSec: number | null;
  roundsPerHour: number | null;
  upPerHour: number | null;
  downPerHour: number | null;
}

/**
 * A round aims at the run's target round time, unless this device is too slow for even the fewest
 * steps (or too fast for the most); without a target, rounds are a fixed number of steps. Each round
 * uploads one Δ and downloads one update (DyLU sizes every island's round to the same time, so one
 * merge window, one version, per round); `bytesPerUpdate` is the server's measured update size.
 */
export function estimateCosts(
  run: RunInfo,
  tokensPerSecAtCap: number | null,
  bytesPerUpdate: number | null = null,
): CostEstimate {
  const downPerRound = bytesPerUpdate ?? run.bytesPerRound.down;
  const none: CostEstimate = { downPerRound, roundSec: null, roundsPerHour: null, upPerHour: null, downPerHour: null };
  if (tokensPerSecAtCap == null || !(tokensPerSecAtCap > 0)) return none;
  const stepSec = (run.batch * run.seqLen) / tokensPerSecAtCap;
  let roundSec: number;
  if (run.targetRoundMs > 0) {
    const { minInnerSteps, maxInnerSteps } = run.config.coordinator;
    const steps = Math.min(maxInnerSteps, Math.max(minInnerSteps, Math.round(run.targetRoundMs / 1000 / stepSec)));
    roundSec = steps * stepSec;
  } else if (run.innerSteps != null) {
    roundSec = run.innerSteps * stepSec;
  } else {
    return none;
  }
  const roundsPerHour = 3600 / roundSec;
  return {
    downPerRound,
    roundSec,
    roundsPerHour,
    upPerHour: run.bytesPerRound.up * roundsPerHour,
    downPerHour: downPerRound * roundsPerHour,
  };
}

/** Bytes per hour measured so far (null until a round's worth of time has passed). */
export function measuredPerHour(bytes: number, sinceMs: number, nowMs: number, minMs: number): number | null {
  const ms = nowMs - sinceMs;
  return ms >= minMs && ms > 0 ? (bytes * 3_600_000) / ms : null;
}
