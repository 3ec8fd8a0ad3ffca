// `atoll simulate` writes its scalars as a served run does (docs/metrics.md): a smoke run's folder holds
// metrics/<row>/ for each row of its report, with a scalars.jsonl the dashboard's overlay reads and a TensorBoard
// event file read back by the tests' own reader (test/helpers/tfevents.ts). Their eval points are the report's
// evalCurve; the DiLoCo row has a row per version with the served run's tags (its update norms the report's
// outerSteps), DDP a row per step with `atoll train`'s.

import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseScalarsJsonl } from '../client/dashboard/overlay.ts';
import { runSimulate } from '../instruments/simulate/index.ts';
import { rowMetricsDir } from '../instruments/simulate/metrics.ts';
import type { SimReport } from '../instruments/simulate/types.ts';
import { readEventFile } from './helpers/tfevents.ts';

const out = mkdtempSync(join(tmpdir(), 'atoll-sim-metrics-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

type Line = Record<string, number>;
const lines = (dir: string): Line[] =>
  readFileSync(join(dir, 'scalars.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line);
/** A curve with consecutive points at the same tokens merged (the last kept), as a reader merging steps sees it. */
const merged = (c: Array<{ tokens: number; evalLoss: number }>) =>
  c.filter((p, i) => c[i + 1]?.tokens !== p.tokens).map((p) => [p.tokens, p.evalLoss]);

describe('atoll simulate: metrics/<row>/, as a served run writes them', () => {
  let report: SimReport;
  /** report.json as written (the evalCurves compared below are the file's). */
  let written: SimReport;

  it('a smoke run writes a metrics folder per row of its report', async () => {
    const t0 = performance.now();
    report = await runSimulate({ preset: 'smoke', compare: 'ddp', workers: 0, out, print: false, log: () => {} });
    expect(performance.now() - t0).toBeLessThan(60_000);
    written = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as SimReport;
    expect(readdirSync(join(out, 'metrics')).sort()).toEqual(report.runs.map((r) => r.name).sort());
    for (const r of written.runs) {
      const files = readdirSync(rowMetricsDir(out, r.name));
      expect(files, r.name).toContain('scalars.jsonl');
      expect(
        files.filter((f) => f.startsWith('events.out.tfevents.')),
        r.name,
      ).toHaveLength(1);
      expect(r).not.toHaveProperty('scalars'); // the rows are the folder's, not the report's
    }
  });

  it('scalars.jsonl: the eval points are the report’s evalCurve; the overlay reads it', () => {
    for (const r of written.runs) {
      const dir = rowMetricsDir(out, r.name);
      const evals = lines(dir).filter((l) => 'eval/loss' in l);
      expect(
        evals.map((l) => [l['tokens/total'], l['eval/loss']]),
        r.name,
      ).toEqual(r.evalCurve.map((p) => [p.tokens, p.evalLoss]));
      const run = parseScalarsJsonl(readFileSync(join(dir, 'scalars.jsonl'), 'utf8'), r.name);
      const drawn = run.rows.filter((x) => 'eval/loss' in x.scalars);
      expect(drawn.map((x) => [x.scalars['tokens/total'], x.scalars['eval/loss']])).toEqual(merged(r.evalCurve));
      expect(run.changes).toBe(0);
    }
  });

  it('the DiLoCo row: a row per version with the served run’s tags; DDP: a row per step with train’s', () => {
    const diloco = report.runs.find((r) => r.kind === 'diloco')!;
    const updates = lines(rowMetricsDir(out, diloco.name)).filter((l) => 'update/norm' in l);
    expect(updates.map((l) => l.step)).toEqual(diloco.outerSteps!.map((s) => s.version));
    for (const [i, l] of updates.entries()) {
      expect(Math.abs(l['update/norm'] / diloco.outerSteps![i].updateNorm - 1)).toBeLessThan(1e-4); // 5 digits
      expect(l['tokens/total']).toBe(diloco.outerSteps![i].totalTokens);
      for (const t of ['train/loss', 'lr/inner', 'lr/outer', 'tokens/update', 'islands/contributors'])
        expect(l, `${t} at v${l.step}`).toHaveProperty([t]);
      expect(l).not.toHaveProperty(['islands/online']); // not measured in a simulation
    }
    const ddp = report.runs.find((r) => r.kind === 'ddp')!;
    const steps = lines(rowMetricsDir(out, 'ddp')).filter((l) => 'train/loss' in l);
    expect(steps.map((l) => l.step)).toEqual(Array.from({ length: ddp.versions }, (_, s) => s + 1));
    expect(Object.keys(steps[0]).sort()).toEqual(['lr/inner', 'step', 'time', 'tokens/total', 'train/loss']);
    expect(steps.at(-1)!['tokens/total']).toBe(ddp.tokens);
  });

  it('the TensorBoard file: framed records (masked CRCs), a version event, the eval curve by step', () => {
    for (const r of written.runs) {
      const dir = rowMetricsDir(out, r.name);
      const file = readdirSync(dir).find((f) => f.startsWith('events.out.tfevents.'))!;
      const events = readEventFile(readFileSync(join(dir, file)));
      expect(events[0].fileVersion).toBe('brain.Event:2');
      const evals = events.filter((e) => 'eval/loss' in e.scalars);
      const jsonl = lines(dir).filter((l) => 'eval/loss' in l);
      expect(evals.map((e) => e.step)).toEqual(jsonl.map((l) => l.step));
      for (const [i, e] of evals.entries()) {
        expect(e.scalars['eval/loss']).toBeCloseTo(r.evalCurve[i].evalLoss, 5); // float32 in the file
        expect(e.scalars['tokens/total']).toBe(r.evalCurve[i].tokens);
      }
    }
  });

  it('names a row’s folder safely, with a folder per seed where the row ran several', () => {
    expect(rowMetricsDir('/o', 'a b/c')).toBe(join('/o', 'metrics', 'a_b_c'));
    expect(rowMetricsDir('/o', 'ddp', 2)).toBe(join('/o', 'metrics', 'ddp', 's2'));
  });
});
