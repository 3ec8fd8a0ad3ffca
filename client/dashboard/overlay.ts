// Another run's curves beside this one's: a metrics JSONL a run wrote (<run folder>/metrics/scalars.jsonl of
// `atoll serve`, <out>.metrics/scalars.jsonl of `atoll train`; server/run/scalars.ts writes both), read in the
// page. Pure (no DOM): unit-tested in test/dashboard-overlay.test.ts against files the real writer wrote.
//
//   {"step":12,"time":1764754000000,"train/loss":4.1,"tokens/total":24576,...}   a row of scalars
//   {"step":12,"time":1764754000000,"event":"config","patch":{...}}             a config change (counted)

import type { XAxis } from './url.ts';

/** One step (a version of a served run, a step of `atoll train`): its scalars by tag, merged over its rows. */
export interface OverlayRow {
  step: number;
  /** ms since the epoch, of the step's first row. */
  time: number;
  scalars: Record<string, number>;
}

export interface OverlayRun {
  /** The file's name, as the legend shows it. */
  name: string;
  rows: OverlayRow[];
  /** Config change lines in the file. */
  changes: number;
}

/** The tags the overlay draws, the keys of the JSONL rows. */
export const OVERLAY_TAGS = ['train/loss', 'eval/loss', 'lr/inner', 'lr/outer', 'update/norm'] as const;
export type OverlayTag = (typeof OVERLAY_TAGS)[number];

/** At most this many bytes are read (a 100k-version run's file is about 40 MB). */
export const OVERLAY_MAX_BYTES = 64 * 1024 * 1024;

/**
 * Parses a metrics JSONL. A step's rows are merged (an eval loss lands on its version after the update's row;
 * a resumed run rewrites the steps past its checkpoint: the last value written wins). Throws, naming the line,
 * on a line that is not such a row.
 */
export function parseScalarsJsonl(text: string, name: string): OverlayRun {
  const bySteps = new Map<number, OverlayRow>();
  let changes = 0;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    let o: unknown;
    try {
      o = JSON.parse(line);
    } catch {
      throw new Error(`${name} line ${i + 1} is not JSON: a metrics file is one JSON object a line (scalars.jsonl)`);
    }
    const r = o as Record<string, unknown>;
    if (typeof o !== 'object' || o === null || typeof r.step !== 'number' || typeof r.time !== 'number')
      throw new Error(`${name} line ${i + 1} has no numeric "step" and "time": not a scalars.jsonl row`);
    if (r.event !== undefined) {
      if (r.event === 'config') changes++;
      continue;
    }
    let row = bySteps.get(r.step);
    if (!row) bySteps.set(r.step, (row = { step: r.step, time: r.time, scalars: {} }));
    for (const [k, v] of Object.entries(r))
      if (k !== 'step' && k !== 'time' && typeof v === 'number' && Number.isFinite(v)) row.scalars[k] = v;
  }
  const rows = [...bySteps.values()].sort((a, b) => a.step - b.step);
  if (!rows.some((row) => OVERLAY_TAGS.some((t) => t in row.scalars)))
    throw new Error(`${name} holds no ${OVERLAY_TAGS.join(', ')}: nothing to draw`);
  return { name, rows, changes };
}

/**
 * The columns [x, ...one per tag] of a run on this chart's x axis: tokens in θ (`tokens/total`; rows without it
 * are left out), or time shifted so the other run starts when this one did (`startMs`: this run's first point).
 */
export function overlayColumns(
  run: OverlayRun,
  x: XAxis,
  tags: readonly OverlayTag[],
  startMs: number | null,
): Array<Array<number | null>> {
  const t0 = run.rows[0]?.time ?? 0;
  const pts: Array<{ x: number; row: OverlayRow }> = [];
  for (const row of run.rows) {
    const v = x === 'time' ? (row.time - t0 + (startMs ?? t0)) / 1000 : row.scalars['tokens/total'];
    if (typeof v === 'number' && Number.isFinite(v)) pts.push({ x: v, row });
  }
  pts.sort((a, b) => a.x - b.x);
  // one row per x (uPlot's columns want a strictly increasing x): merged, the later step's values winning
  const uniq: typeof pts = [];
  for (const p of pts) {
    const last = uniq[uniq.length - 1];
    if (last && last.x === p.x) last.row = { ...p.row, scalars: { ...last.row.scalars, ...p.row.scalars } };
    else uniq.push({ ...p });
  }
  return [uniq.map((p) => p.x), ...tags.map((t) => uniq.map((p) => p.row.scalars[t] ?? null))];
}
