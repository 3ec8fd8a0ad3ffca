// The scaling ladder at CI size (two rungs, a fraction of a token per parameter), any island count
// a user types (the 32-island fleet that once got a negative batch), and `--engine webgpu` on
// SwiftShader: the same virtual schedule as the CPU engine, the engine only computes.

import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { numParams } from '../core/model/config.ts';
import { runSimulate, simulateOptionsFromCli } from '../instruments/simulate/index.ts';
import {
  LADDER_OUTER,
  RUNGS,
  pickRungs,
  rungRows,
  runScaling,
  scalingOptionsFromCli,
} from '../instruments/simulate/scaling-v1.ts';
import { fitPowerLaw } from '../instruments/simulate/scaling-report.ts';
import { runRow } from '../instruments/simulate/row.ts';
import { type RowDefaults, codecFor, diloco, heterogeneous, island } from '../instruments/simulate/scenarios.ts';
import type { SimRow } from '../instruments/simulate/types.ts';

const quiet = { print: false, log: () => {} };

describe('atoll simulate --preset scaling-v1', () => {
  it("the ladder spans ≥ 8× tiny in 4 CPU rungs; H grows with the budget; 8 and 32 islands match DDP's global batch", () => {
    const rungs = pickRungs(undefined);
    expect(rungs).toHaveLength(4);
    expect(rungs[0].name).toBe('tiny');
    expect(numParams(rungs[3].config) / numParams(rungs[0].config)).toBeGreaterThanOrEqual(8);
    const plans = rungs.map((r) =>
      rungRows(r, { tokensPerParam: 2, outerRounds: 8, lrSweep: [3e-3, 6e-3, 1.2e-2], seed: 1 }),
    );
    for (let k = 1; k < plans.length; k++) expect(plans[k].innerSteps).toBeGreaterThan(plans[k - 1].innerSteps);
    const p = plans[3];
    expect(p.tokens).toBe(Math.round(2 * p.params));
    const batch = (name: string) => p.rows.find((r) => r.name === name)!.islands.reduce((a, s) => a + s.batchSize, 0);
    expect([batch('ddp-lr0.003'), batch('islands-8'), batch('islands-32')]).toEqual([32, 32, 32]);
    expect(new Set(p.rows.find((r) => r.name === 'islands-32')!.islands.map((s) => s.speed))).toEqual(
      new Set([1, 2, 4]),
    );
    // the islands' outer step is the ladder's (momentum 0.4), not the compare preset's 0.8
    for (const n of [8, 32])
      expect(p.rows.find((r) => r.name === `islands-${n}`)!.coordinator.outer).toEqual({
        kind: 'nesterov',
        lr: 1,
        momentum: 0.4,
        dnPeriod: 0,
      });
    expect(scalingOptionsFromCli({ rungs: 'tiny,nope' })).toMatchObject({
      ok: false,
      error: { code: 'E_BAD_REQUEST' },
    });
    expect(scalingOptionsFromCli({ rungs: '9' })).toMatchObject({ ok: false });
    expect(
      scalingOptionsFromCli({
        rungs: 'tiny,L4-C76',
        tokensPerParam: '0.5',
        outerRounds: '12',
        engine: 'webgpu',
        json: true,
      }),
    ).toMatchObject({
      ok: true,
      value: { rungs: ['tiny', 'L4-C76'], tokensPerParam: 0.5, outerRounds: 12, engine: 'webgpu', json: true },
    });
    expect(scalingOptionsFromCli({ engine: 'cuda' })).toMatchObject({
      ok: false,
      error: { message: '--engine must be cpu|webgpu' },
    });
    expect(simulateOptionsFromCli({ engine: 'webgpu' })).toMatchObject({ ok: true, value: { engine: 'webgpu' } });
    expect(RUNGS.at(-1)!.name).toBe('base-T32');
  });

  it('fits a power law exactly on power-law points', () => {
    const f = fitPowerLaw([1e9, 1e10, 1e11].map((c) => [c, 7 * c ** -0.05] as [number, number]));
    expect(f.a).toBeCloseTo(7, 6);
    expect(f.b).toBeCloseTo(0.05, 9);
  });

  it("two rungs in seconds: every rung and row reported with the compare rows' fields; every row learns", async () => {
    const out = mkdtempSync(join(tmpdir(), 'atoll-scaling-'));
    const r = await runScaling({
      rungs: 2,
      tokensPerParam: 0.06,
      warmStartTokens: 0,
      evals: 1,
      evalBatches: 1,
      workers: 0,
      out,
      ...quiet,
    });
    expect(r.rungs.map((g) => g.name)).toEqual(['tiny', 'L2-C48']);
    for (const g of r.rungs) {
      expect(g.params).toBe(numParams(g.config));
      expect(g.rows.map((x) => x.name)).toEqual([
        'ddp',
        'ddp-lr0.003',
        'ddp-lr0.006',
        'ddp-lr0.012',
        'ddp-lr0.024',
        'single',
        'islands-8',
        'islands-32',
      ]);
      expect(g.ddpSweep.map((s) => s.lr)).toEqual([3e-3, 6e-3, 1.2e-2, 2.4e-2]);
      expect(g.rows[0].evalLoss).toBe(Math.min(...g.ddpSweep.map((s) => s.evalLoss)));
      for (const row of g.rows) {
        for (const k of [
          'name',
          'evalLoss',
          'commReductionVsDdp',
          'bytesUpPerIsland',
          'bytesDownPerIsland',
          'tokens',
          'goodput',
          'flops',
        ])
          expect(row).toHaveProperty(k);
        expect(row.evalLoss).toBeLessThan(Math.log(256) - 0.3); // from uniform over 256 bytes, down
        expect(row.flops).toBeGreaterThan(0);
      }
      for (const n of [8, 32])
        expect(g.rows.find((x) => x.name === `islands-${n}`)!.commReductionVsDdp).toBeGreaterThan(10);
    }
    expect(r.config.outer).toEqual(LADDER_OUTER);
    expect(r.fits.map((f) => f.row)).toEqual(['ddp', 'single', 'islands-8', 'islands-32']);
    expect(['narrows', 'holds', 'widens']).toContain(r.verdict.word);
    expect(r.verdict.sentence).toContain(r.verdict.word);
    const json = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8'));
    expect(json.rungs[1].rows[6]).toMatchObject({ name: 'islands-8', kind: 'diloco' });
    expect(readFileSync(join(out, 'rows.jsonl'), 'utf8').trim().split('\n')).toHaveLength(14);
    expect(readFileSync(join(out, 'plot.svg'), 'utf8')).toContain('<circle');
    expect(existsSync(join(out, 'report.html'))).toBe(true);
  }, 600_000); // ~8 s of CPU; the wall-clock limit is for a shared, loaded machine
});

describe('any island count runs or is refused', () => {
  it('heterogeneous fleets: every batch ≥ 1, the total n × B, for counts a user may type', () => {
    for (const n of [1, 2, 3, 5, 7, 8, 16, 24, 32, 33, 64, 100, 256])
      for (const b of [1, 2, 4, 8]) {
        const bs = heterogeneous(n, b).map((s) => s.batchSize);
        expect(
          bs.every((x) => Number.isInteger(x) && x >= 1),
          `${n}×${b}: ${bs}`,
        ).toBe(true);
        expect(bs.reduce((a, x) => a + x, 0)).toBe(n * b);
      }
    expect(heterogeneous(8, 4).map((s) => s.batchSize)).toEqual([2, 2, 4, 4, 4, 6, 6, 4]); // the documented compare fleet
  });

  it('refuses 0 and more than 256 islands with a clear message', () => {
    expect(simulateOptionsFromCli({ islands: '0' })).toMatchObject({
      ok: false,
      error: { code: 'E_BAD_REQUEST', message: expect.stringMatching(/--islands must be 1\.\.256/) },
    });
    expect(simulateOptionsFromCli({ islands: '1000' })).toMatchObject({
      ok: false,
      error: { message: expect.stringMatching(/got 1000/) },
    });
  });

  it('32 async sparse islands run (was E_BAD_CONFIG: a negative targetRoundMs)', async () => {
    const out = mkdtempSync(join(tmpdir(), 'atoll-sim32-'));
    const r = await runSimulate({
      preset: 'diloco',
      mode: 'async',
      codec: 'sparse',
      islands: 32,
      tokens: 2048,
      compare: 'none',
      warmStartTokens: 0,
      evalBatches: 2,
      quick: true,
      workers: 0,
      out,
      ...quiet,
    });
    expect(r.runs[0]).toMatchObject({ name: 'async-sparse', islands: 32 });
    expect(r.runs[0].tokens).toBeGreaterThanOrEqual(2048);
    expect(r.runs[0].evalLoss).toBeLessThan(Math.log(256));
  });

  it('32 heterogeneous islands with joins and leaves: the joiners contribute, the leavers stop, θ learns', async () => {
    const d: RowDefaults = {
      islands: 32,
      seeds: [1],
      batchSize: 1,
      tokens: 6144,
      innerSteps: 4,
      baseTokensPerSec: 2000,
      seqLen: 16,
      lr: { maxLr: 3e-3, minLr: 3e-4, warmupTokens: 0 },
    };
    // a fleet round: the fastest islands' 4 steps of 16 tokens at 4 × 2000 tokens/s = 8 ms
    const fleet = heterogeneous(32, 1).map((s, i) =>
      i < 4 ? { ...s, joinAtMs: 40 } : i >= 28 ? { ...s, leaveAtMs: 40 } : s,
    );
    const res = await runRow(diloco('async-sparse-churn-32', d, 'async', 'sparse', fleet), {
      common: { model: 'tiny', seqLen: 16, seed: 1, evals: 1, evalBatches: 2, evalBatchSize: 4 },
    });
    expect(res.tokens).toBeGreaterThanOrEqual(6144);
    expect(res.virtualTimeMs).toBeGreaterThan(40);
    const late = res.perIsland.slice(0, 4),
      gone = res.perIsland.slice(28),
      stay = res.perIsland.slice(4, 28);
    expect(late.every((p) => p.accepted > 0)).toBe(true);
    expect(Math.max(...gone.map((p) => p.tokensComputed))).toBeLessThan(
      Math.min(...stay.filter((p) => p.speed === 4).map((p) => p.tokensComputed)),
    );
    expect(res.evalLoss).toBeLessThan(res.curve[0].evalLoss - 0.2);
  });
});

describe('atoll simulate --engine webgpu', () => {
  it('a DiLoCo row on WebGPU (SwiftShader here): the same virtual schedule and eval loss as on the CPU engine', async () => {
    const row: SimRow = {
      name: 'sync-int8',
      kind: 'diloco',
      mode: 'sync',
      islands: [island('a', { batchSize: 2 }), island('b', { batchSize: 2, speed: 2 })],
      codec: codecFor('int8'),
      coordinator: { innerSteps: 4, minInnerSteps: 1, maxInnerSteps: 8, quorum: 1 },
      lr: { maxLr: 3e-3, minLr: 3e-4, warmupTokens: 0 },
      tokens: 512,
      baseTokensPerSec: 2000,
    };
    const common = { model: 'tiny' as const, seqLen: 16, seed: 1, evals: 1, evalBatches: 1, evalBatchSize: 2 };
    const cpu = await runRow(row, { common });
    const gpu = await runRow(row, { common: { ...common, engine: 'webgpu' } });
    expect(gpu.tokens).toBe(cpu.tokens);
    expect(gpu.versions).toBe(cpu.versions);
    // virtual time is the schedule's, not the device's: equal but for the few bytes the deltas' codes differ by
    expect(Math.abs(gpu.virtualTimeMs - cpu.virtualTimeMs)).toBeLessThan(1);
    expect(gpu.curve.map((p) => p.timeMs.toFixed(0))).toEqual(cpu.curve.map((p) => p.timeMs.toFixed(0)));
    expect(Math.abs(gpu.evalLoss - cpu.evalLoss)).toBeLessThan(2e-3);
    expect(gpu.evalLoss).toBeLessThan(gpu.curve[0].evalLoss - 0.1); // it learned
  });
});
