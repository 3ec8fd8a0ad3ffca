// A short simulation through the real coordinator, codec and island runtime: the loss goes down,
// the run folder is written, and the report has the fields `atoll simulate --json` promises.

import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runSimulate, simulateOptionsFromCli } from '../instruments/simulate/index.ts';
import { ProgressBars } from '../instruments/simulate/progress.ts';
import { loadCorpus } from '../server/run/corpus.ts';
import { runRow } from '../instruments/simulate/row.ts';
import { byteEntropies, warmStartOffPlateau } from '../instruments/simulate/warm-start.ts';
import { codecFor, island } from '../instruments/simulate/scenarios.ts';

describe('atoll simulate', () => {
  it('parses CLI flags', () => {
    const o = simulateOptionsFromCli({
      preset: 'diloco',
      islands: '3',
      tokens: '5000',
      mode: 'sync',
      codec: 'sparse',
      json: true,
      quick: true,
      evalBatches: 64,
    });
    expect(o.ok && o.value).toMatchObject({
      preset: 'diloco',
      islands: 3,
      tokens: 5000,
      mode: 'sync',
      codec: 'sparse',
      json: true,
      quick: true,
      evalBatches: 64,
    });
    expect(simulateOptionsFromCli({ preset: 'tiny' }).ok && simulateOptionsFromCli({ preset: 'tiny' })).toMatchObject({
      value: { preset: 'compare', model: 'tiny' },
    });
    expect(simulateOptionsFromCli({ rows: 'ddp, async-sparse-dropout30' })).toMatchObject({
      ok: true,
      value: { rows: ['ddp', 'async-sparse-dropout30'] },
    });
    // --cold: no warm start, every row from initParams(model, seed) (test/fleet.test.ts: the same θ0 as the live run's v0)
    expect(simulateOptionsFromCli({ cold: true, fromFleet: 'r.json' })).toMatchObject({
      ok: true,
      value: { warmStartTokens: 0, fromFleet: 'r.json' },
    });
    const bad = simulateOptionsFromCli({ codec: 'int3' });
    expect(bad.ok ? '' : bad.error.code).toBe('E_BAD_REQUEST');
  });

  it('draws a progress bar per row (a line per tenth when not on a terminal)', () => {
    let out = '';
    const bars = new ProgressBars({ write: (x: string) => (out += x) }, ['ddp', 'async-sparse']);
    for (let k = 0; k <= 20; k++) bars.update(1, k / 20);
    bars.update(0, 0.5);
    const lines = out.trim().split('\n');
    expect(lines.filter((l) => l.includes('async-sparse'))).toHaveLength(11);
    expect(lines.at(-2)).toMatch(/async-sparse \[#{30}\] 100%/);
    expect(lines.at(-1)).toMatch(/ddp +\[#{15}\.{15}\] {2}50%/);
  });

  it('a smoke run: DiLoCo eval loss goes down; report and run folder are complete', async () => {
    const out = mkdtempSync(join(tmpdir(), 'atoll-sim-'));
    const report = await runSimulate({ preset: 'smoke', compare: 'ddp', workers: 0, out, print: false, log: () => {} });
    expect(report.runs.map((r) => r.name)).toEqual(['ddp', 'sync-int4']);
    const diloco = report.runs[1];
    const curve = readFileSync(join(out, 'curves.csv'), 'utf8')
      .trim()
      .split('\n')
      .slice(1)
      .map((l) => l.split(','))
      .filter((c) => c[0] === 'sync-int4')
      .map((c) => Number(c[4]));
    expect(curve.length).toBeGreaterThanOrEqual(2);
    expect(curve.at(-1)!).toBeLessThan(curve[0] - 1); // from ~5.5 (uniform over 256 bytes) down
    expect(diloco.evalLoss).toBeLessThan(4.5);
    expect(diloco.commReductionVsDdp).toBeGreaterThan(1);
    expect(diloco.goodput).toBeGreaterThan(0.5);
    for (const f of ['report.json', 'curves.csv', 'plot.svg', 'report.html'])
      expect(existsSync(join(out, f))).toBe(true);
    const json = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8'));
    for (const k of [
      'name',
      'evalLoss',
      'evalLossSd',
      'tokens',
      'bytesUpPerIsland',
      'bytesDownPerIsland',
      'commReductionVsDdp',
      'goodput',
      'rejected',
    ])
      expect(json.runs[1]).toHaveProperty(k);
    expect(json.runs[1].seedLosses).toHaveLength(1);
    // every row carries its eval curve, the plot's points: [{tokens, evalLoss}], ending at its final loss
    const csv = readFileSync(join(out, 'curves.csv'), 'utf8').trim().split('\n').slice(1);
    for (const row of json.runs as Array<{ name: string; evalLoss: number; evalCurve: unknown[] }>) {
      const points = csv.filter((l) => l.startsWith(`${row.name},`)).map((l) => l.split(','));
      expect(row.evalCurve.length).toBeGreaterThanOrEqual(2);
      expect(row.evalCurve).toEqual(
        points.map((c) => ({ tokens: Number(c[1]), evalLoss: expect.closeTo(Number(c[4]), 4) })),
      );
      expect(Object.keys(row.evalCurve[0] as object).sort()).toEqual(['evalLoss', 'tokens']);
      expect((row.evalCurve.at(-1) as { evalLoss: number }).evalLoss).toBeCloseTo(row.evalLoss, 4);
    }
    expect(readFileSync(join(out, 'plot.svg'), 'utf8')).toContain('<polyline');
  });

  it("--model takes a scaling rung's shape: the rows train that model (its parameter count), in worker threads too", async () => {
    expect(simulateOptionsFromCli({ model: 'L3-C64' })).toMatchObject({ ok: true, value: { model: 'L3-C64' } });
    const bad = simulateOptionsFromCli({ model: 'L9-C999' });
    expect(bad.ok ? '' : bad.error.message).toMatch(/--model must be one of tiny\|small\|base\|L2-C48\|L3-C64\|L4-C76/);
    const report = await runSimulate({
      preset: 'smoke',
      model: 'L2-C48',
      rows: ['sync-int4'],
      workers: 1,
      out: mkdtempSync(join(tmpdir(), 'atoll-sim-')),
      print: false,
      log: () => {},
    });
    expect(report.config).toMatchObject({ model: 'L2-C48', params: 70_464 });
    expect(report.runs[0].evalLoss).toBeLessThan(4.5); // from ~5.5 (uniform over 256 bytes)
  });

  it('--rows keeps the named rows of the preset; an unknown name is an error before anything runs', async () => {
    const out = mkdtempSync(join(tmpdir(), 'atoll-sim-'));
    await expect(
      runSimulate({ preset: 'smoke', rows: ['sync-int4', 'nope'], out, print: false, log: () => {} }),
    ).rejects.toThrow(/unknown row nope: the preset has ddp, single, sync-int4/);
    expect(existsSync(join(out, 'report.json'))).toBe(false);
  });

  it('stops a row that never reaches its budget (every delta rejected) and reports it as stalled', async () => {
    // a norm bound of half the round's median rejects every delta, so θ never gains a token
    const res = await runRow(
      {
        name: 'all-rejected',
        kind: 'diloco',
        mode: 'sync',
        islands: [island('a'), island('b')],
        codec: codecFor('int8'),
        coordinator: {
          innerSteps: 2,
          minInnerSteps: 1,
          maxInnerSteps: 2,
          quorum: 1,
          normBound: { factor: 0.5, window: 8, minHistory: 1 },
        },
        lr: { maxLr: 3e-3, minLr: 3e-4, warmupTokens: 0 },
        tokens: 1024,
        baseTokensPerSec: 2000,
      },
      { common: { model: 'tiny', seqLen: 16, seed: 1, evals: 1, evalBatches: 1, evalBatchSize: 2 } },
    );
    expect(res.tokens).toBe(0);
    expect(res.tokensComputed).toBeGreaterThan(5 * 1024);
    expect(res.notes.some((n) => n.startsWith('stalled'))).toBe(true);
  });

  it('the warm start leaves the byte-unigram plateau: its tokens double (up to 4×) while the held-out loss sits above it', async () => {
    const h = byteEntropies(new TextEncoder().encode('abababab'));
    expect(h.unigram).toBeCloseTo(Math.log(2), 12);
    expect(h.bigram).toBe(0); // each byte fixes the next
    const ds = loadCorpus();
    const { unigram, bigram } = byteEntropies(ds.train);
    expect(unigram - bigram).toBeGreaterThan(0.5);
    // 512 tokens cannot leave the plateau: 1024, then 2048 (4×) are tried
    const w = await warmStartOffPlateau(
      { model: 'tiny', seqLen: 32, seed: 1, evals: 1, evalBatches: 4, evalBatchSize: 8 },
      ds,
      512,
    );
    expect(w.tokens).toBe(2048);
    expect(w.evalLoss).toBeGreaterThan(unigram - (unigram - bigram) / 4);
  });
});
