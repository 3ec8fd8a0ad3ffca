// A simulated run's scalars, written as a served run writes its own (docs/metrics.md): under the run folder,
// metrics/<row>/ holds scalars.jsonl and a TensorBoard event file (server/run/scalars.ts ScalarLog, the
// served run's writer). A row run over several seeds has a folder per seed, metrics/<row>/s<seed>/.
//
//   DiLoCo rows: a row per version (the served run's tags that a simulation measures) and its evals
//   DDP, single: a row per step (`atoll train`'s tags: train/loss, lr/inner, tokens/total) and its evals
//
// `time` is the run's start (wall clock) plus the row's virtual time, so a time axis reads virtual time.

import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { HistoryPoint } from '../../core/api.ts';
import type { CoordinatorConfig, VersionStats } from '../../core/coord/index.ts';
import { lrAt } from '../../server/run/history.ts';
import { ScalarLog, pointScalars } from '../../server/run/scalars.ts';
import type { CurvePoint, ScalarRow, SimRunResult } from './types.ts';

export type { ScalarRow } from './types.ts';

/** Tags of a served run that a simulation does not measure (no live sockets, no wall-clock rate). */
const NOT_SIMULATED = ['tokens/per_sec', 'islands/online', 'bytes/out_total'];

/** A DiLoCo row's outer steps as a served run's rows, by the same tags (pointScalars). */
export function versionRows(history: readonly VersionStats[], c: CoordinatorConfig): ScalarRow[] {
  let bytesIn = 0;
  return history.map((s) => {
    bytesIn += s.bytesIn;
    const point = {
      ...s,
      trainLoss: Number.isFinite(s.trainLoss) ? s.trainLoss : null,
      evalLoss: null,
      tokensPerSec: 0,
      islandsOnline: 0,
      bytesInTotal: bytesIn,
      bytesOutTotal: 0,
      ...lrAt(c, s.totalTokens),
    } as unknown as HistoryPoint;
    const scalars = pointScalars(point);
    for (const t of NOT_SIMULATED) scalars[t] = null;
    return { step: s.version, timeMs: s.time, scalars };
  });
}

/** The eval curve's points as rows at their version (or step), with the tokens in θ there. */
export function evalRows(curve: readonly CurvePoint[]): ScalarRow[] {
  return curve.map((p) => ({
    step: p.version ?? 0,
    timeMs: p.timeMs,
    scalars: { 'eval/loss': p.evalLoss, 'tokens/total': p.tokens },
  }));
}

/** A row's folder under metrics/: its name (made safe for a path), and s<seed> below it when it ran several seeds. */
export function rowMetricsDir(outDir: string, row: string, seed?: number): string {
  const dir = join(outDir, 'metrics', row.replace(/[^A-Za-z0-9_.-]/g, '_'));
  return seed === undefined ? dir : join(dir, `s${seed}`);
}

/** Empties a run folder's metrics/ (a run written again into the same folder keeps no older event files). */
export function clearMetrics(outDir: string): void {
  rmSync(join(outDir, 'metrics'), { recursive: true, force: true });
}

/**
 * Writes `rows` to the metrics folder `dir`, in step order (a step's update row before its eval): afresh, or
 * (`fresh` false) after the rows already there, in an event file of its own.
 */
export function writeScalarRows(dir: string, rows: readonly ScalarRow[], startMs: number, fresh = true): void {
  const log = new ScalarLog(dir, { fresh });
  const sorted = rows.map((r, i) => ({ r, i })).sort((a, b) => a.r.step - b.r.step || a.i - b.i);
  for (const { r } of sorted) log.write(r.step, startMs + r.timeMs, r.scalars);
}

/** One run of a report's row: its name, its seed where the row ran several, and its result. */
export interface MetricsRun {
  row: string;
  seed?: number;
  result: SimRunResult;
}

/**
 * Writes each run's rows to its folder under `outDir`/metrics/ (emptied first), and takes them off the results
 * (the reports carry the eval curves, not these rows). `startMs`: the run's start, ms since the epoch.
 */
export function writeRunMetrics(outDir: string, runs: readonly MetricsRun[], startMs: number): void {
  clearMetrics(outDir);
  for (const { row, seed, result } of runs) {
    if (result.scalars) writeScalarRows(rowMetricsDir(outDir, row, seed), result.scalars, startMs);
    delete result.scalars;
  }
}
