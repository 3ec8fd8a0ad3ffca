// A run's scalars out, for the trackers researchers use: <folder>/metrics/scalars.jsonl (one JSON object
// a line) and <folder>/metrics/events.out.tfevents.* (TensorBoard: core/tfevents.ts), written as the run
// goes, one row per version (served runs) or step (`atoll train`). The same rows serve the API's CSV.
//
//   {"step":12,"time":1764754000000,"train/loss":4.1,"lr/outer":0.7,...}     a row of scalars
//   {"step":12,"time":1764754000000,"event":"config","patch":{"outer":{"lr":0.5}}}   a config change
//
// A config change is also written to TensorBoard as scalars `config/<path>` (each number it sets) at its
// version, so the change shows as a point on the chart of its knob.

import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { HistoryPoint } from '../../core/api.ts';
import { FILE_VERSION, encodeEvent, eventFileName, tfRecord } from '../../core/tfevents.ts';

/** tag → value; null: not measured at this step (left out of the files). */
export type Scalars = Record<string, number | null>;

/** The scalars of a served run's history point, by tag (the JSONL keys, the CSV columns, TensorBoard's tags). */
export function pointScalars(p: HistoryPoint): Scalars {
  const h = p.stalenessHist;
  let n = 0;
  let sum = 0;
  let max = 0;
  h.forEach((count, tau) => {
    n += count;
    sum += count * tau;
    if (count > 0) max = tau;
  });
  return {
    'eval/loss': p.evalLoss,
    'train/loss': p.trainLoss,
    'lr/inner': p.innerLr ?? null,
    'lr/outer': p.outerLr ?? null,
    'update/norm': p.updateNorm,
    'tokens/update': p.tokens,
    'tokens/total': p.totalTokens,
    'tokens/per_sec': p.tokensPerSec,
    'bytes/in_total': p.bytesInTotal,
    'bytes/out_total': p.bytesOutTotal,
    'islands/online': p.islandsOnline,
    'islands/contributors': p.contributors,
    'staleness/mean': n > 0 ? sum / n : null,
    'staleness/max': n > 0 ? max : null,
  };
}

/** The numbers a config patch sets, as `config/<path>` tags ({"outer":{"lr":0.5}} → config/outer.lr = 0.5). */
export function patchScalars(patch: unknown, at = 'config/'): Record<string, number> {
  const out: Record<string, number> = {};
  if (typeof patch !== 'object' || patch === null) return out;
  for (const [k, v] of Object.entries(patch)) {
    if (typeof v === 'number' && Number.isFinite(v)) out[`${at}${k}`] = v;
    else if (typeof v === 'boolean') out[`${at}${k}`] = v ? 1 : 0;
    else if (typeof v === 'object') Object.assign(out, patchScalars(v, `${at}${k}.`));
  }
  return out;
}

/** Rows as CSV: step, time, then one column per tag (the first row's tags, in order); empty: not measured. */
export function scalarsCsv(rows: Array<{ step: number; time: number; scalars: Scalars }>): string {
  const tags = rows.length ? Object.keys(rows[0].scalars) : [];
  const lines = [['step', 'time', ...tags].join(',')];
  for (const r of rows)
    lines.push([r.step, r.time, ...tags.map((t) => (r.scalars[t] == null ? '' : String(r.scalars[t])))].join(','));
  return lines.join('\n') + '\n';
}

export interface ScalarLogOptions {
  /** Start the JSONL afresh (a new run) instead of appending (a resumed one). Default false. */
  fresh?: boolean;
  /** The host part of the event file's name. Default os.hostname(). */
  host?: string;
}

/** A run folder's metrics folder. */
export const metricsDir = (runDir: string) => join(runDir, 'metrics');

/** The writer of a metrics folder: JSONL and one TensorBoard event file per process. */
export class ScalarLog {
  readonly dir: string;
  readonly jsonlPath: string;
  readonly eventsPath: string;
  private failed = false;

  constructor(dir: string, o: ScalarLogOptions = {}) {
    this.dir = dir;
    mkdirSync(this.dir, { recursive: true });
    this.jsonlPath = join(this.dir, 'scalars.jsonl');
    if (o.fresh) writeFileSync(this.jsonlPath, '');
    const now = Date.now() / 1000;
    // a second process in the same second (a quick restart) gets its own file, as TensorBoard expects
    this.eventsPath = join(this.dir, `${eventFileName(now, o.host ?? hostname())}.${process.pid}`);
    writeFileSync(this.eventsPath, tfRecord(encodeEvent({ wallTime: now, step: 0, fileVersion: FILE_VERSION })));
  }

  /** A row of scalars at `step` (nulls are left out). */
  write(step: number, timeMs: number, scalars: Scalars): void {
    const measured: Record<string, number> = {};
    for (const [k, v] of Object.entries(scalars)) if (v != null && Number.isFinite(v)) measured[k] = v;
    if (Object.keys(measured).length === 0) return;
    this.append({ step, time: timeMs, ...measured }, { wallTime: timeMs / 1000, step, scalars: measured });
  }

  /** A config change at `step` (a version): an event line, and its numbers as config/<path> scalars. */
  change(step: number, timeMs: number, patch: unknown): void {
    const scalars = patchScalars(patch);
    this.append({ step, time: timeMs, event: 'config', patch }, { wallTime: timeMs / 1000, step, scalars });
  }

  private append(line: object, event: Parameters<typeof encodeEvent>[0]): void {
    if (this.failed) return;
    try {
      appendFileSync(this.jsonlPath, JSON.stringify(line) + '\n');
      appendFileSync(this.eventsPath, tfRecord(encodeEvent(event)));
    } catch (e) {
      // the metrics are for people: a full disk must not stop the run (the event log stays the truth)
      this.failed = true;
      process.stderr.write(`metrics: writing ${this.dir} failed, no more scalars: ${(e as Error).message}\n`);
    }
  }
}
