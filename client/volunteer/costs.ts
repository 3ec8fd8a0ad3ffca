// What contributing costs, in figures a person can judge: the download once, then upload and
// download per round and per hour at this device's measured speed (a shard run's training data comes
// by range each round, not once). Pure: no DOM.

import { roundStepsCap } from '../../core/coord/config.ts';
import { formatBytes, formatCount } from '../ui/format.ts';
import { RANGE_CACHE_CAP_BYTES } from './range-cache.ts';
import type { RunInfo } from './run-info.ts';

export interface CostEstimate {
  /** Bytes down per round: one update (the server's measured mean once it sent any, else the codec's bound). */
  downPerRound: number;
  /**
   * A shard run: bytes of one round's training range (2 a token, steps × batch × (seqLen + 1) tokens; null
   * until the steps are known). A corpus run: null (its text comes once).
   */
  dataPerRound: number | null;
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
  const shardRun = run.data?.shards != null; // parseRunInfo does not require `data`
  const rangeBytes = (steps: number) => (shardRun ? 2 * steps * run.batch * (run.seqLen + 1) : null);
  const fixed = run.innerSteps != null ? rangeBytes(run.innerSteps) : null;
  const none: CostEstimate = {
    downPerRound,
    dataPerRound: fixed,
    roundSec: null,
    roundsPerHour: null,
    upPerHour: null,
    downPerHour: null,
  };
  if (tokensPerSecAtCap == null || !(tokensPerSecAtCap > 0)) return none;
  const stepSec = (run.batch * run.seqLen) / tokensPerSecAtCap;
  let steps: number;
  if (run.targetRoundMs > 0) {
    const cap = roundStepsCap(run.config.coordinator);
    steps = Math.min(
      cap,
      Math.max(run.config.coordinator.minInnerSteps, Math.round(run.targetRoundMs / 1000 / stepSec)),
    );
  } else if (run.innerSteps != null) {
    steps = run.innerSteps;
  } else {
    return none;
  }
  const roundSec = steps * stepSec;
  const roundsPerHour = 3600 / roundSec;
  // a shard run's range is new data each round (a cached one costs nothing: this is the most)
  const dataPerRound = rangeBytes(steps);
  return {
    downPerRound,
    dataPerRound,
    roundSec,
    roundsPerHour,
    upPerHour: run.bytesPerRound.up * roundsPerHour,
    downPerHour: (downPerRound + (dataPerRound ?? 0)) * roundsPerHour,
  };
}

/** Bytes per hour measured so far (null until a round's worth of time has passed). */
export function measuredPerHour(bytes: number, sinceMs: number, nowMs: number, minMs: number): number | null {
  const ms = nowMs - sinceMs;
  return ms >= minMs && ms > 0 ? (bytes * 3_600_000) / ms : null;
}

/**
 * The model once, then an update per round; a corpus run's text once, a shard run's data by range
 * each round (kept in this browser up to the cap, so a range trained again is not fetched again).
 */
export function costDownText(r: RunInfo, update: number, range: number | null, measured: boolean): string {
  const model = `the ${formatCount(r.params)}-parameter model`;
  const once =
    r.data.shards != null
      ? `${formatBytes(r.modelBytes)} once (${model})`
      : `${formatBytes(r.modelBytes + r.data.trainBytes)} once (${model} and ${formatBytes(r.data.trainBytes)} ` +
        `of training text)`;
  const perRound =
    `${measured ? 'about ' : 'up to '}${formatBytes(update)} per round` +
    ` (${r.config.coordinator.downlink.encoding} update${measured ? ", the last updates' mean" : ''})`;
  if (r.data.shards == null) return `${once}, then ${perRound}`;
  const tokens = `${formatCount(r.batch * (r.seqLen + 1))} tokens a step`;
  return (
    `${once}, then ${perRound}, and the round's training data by range: 2 bytes a token, ` +
    `${range != null ? `${formatBytes(range)} a round (${tokens})` : tokens}, ` +
    `cached in this browser up to ${formatBytes(RANGE_CACHE_CAP_BYTES)}`
  );
}
