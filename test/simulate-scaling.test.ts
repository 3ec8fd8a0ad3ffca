// The scaling study's protocol (H = 30, D = 20 N, the batch rule, each arm one change from the one
// before), its search on synthetic losses (grids widened until interior, the outer lr swept once and
// held, seeds at the two smallest rungs, 32 islands where the batch allows), and `--quick` end to end:
// a ladder stopped after a few runs resumes from rows.jsonl without running them again.

import { appendFileSync, existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { mergeConfig, DEFAULT_COORDINATOR_CONFIG } from '../core/coord/index.ts';
import { outerStepOf } from '../core/coord/rounds.ts';
import { allocBatch, sampleBatch } from '../core/data/dataset.ts';
import { getPreset, numParams } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { loadCorpus } from '../server/run/corpus.ts';
import { RUNGS, pickRungs } from '../instruments/simulate/rungs.ts';
import { rowEngines } from '../instruments/simulate/row-shared.ts';
import { gridSearch, planRung } from '../instruments/simulate/scaling-plan.ts';
import {
  ADAM,
  ARMS,
  PROTOCOL,
  QUICK_PROTOCOL,
  type RowSpec,
  buildRow,
  rowKey,
  rungPlan,
} from '../instruments/simulate/scaling-protocol.ts';
import { runScaling, scalingOptionsFromCli } from '../instruments/simulate/scaling.ts';

describe('the scaling protocol', () => {
  const plans = pickRungs(undefined).map((s) => rungPlan(s, PROTOCOL));

  it('4 CPU rungs over ≥ 8× parameters; D ≥ 20 N and ≥ 100 rounds of M = 8 at H 30; batch ∝ N^0.45 in powers of 2', () => {
    expect(plans.map((p) => p.spec.name)).toEqual(['tiny', 'L2-C48', 'L3-C64', 'L4-C76']);
    expect(plans[3].params / plans[0].params).toBeGreaterThanOrEqual(8);
    expect(plans.map((p) => p.batch)).toEqual([8, 8, 16, 16]);
    expect(rungPlan(RUNGS.find((r) => r.name === 'L6-C104')!, PROTOCOL).batch).toBe(32);
    for (const p of plans) {
      expect(p.tokens).toBe(Math.max(Math.round(20 * p.params), 100 * p.batch * 32 * 30));
      expect(p.tokens / p.params).toBeGreaterThanOrEqual(20);
      expect(p.rounds).toBeGreaterThanOrEqual(100);
    }
    expect(plans[1].tokens).toBe(20 * plans[1].params); // only tiny is raised to 100 rounds
  });

  it('each arm is one change from the one before; every island row has H = 30; SparseLoCo as published', () => {
    const p = plans[2];
    const at = (arm: RowSpec['arm']) =>
      buildRow(p, { rung: p.spec.name, arm, lrK: 5, batch: p.batch, outerLr: 0.7, seed: 1 }, 4096);
    const m8 = at('m8');
    for (const arm of ARMS.filter((a) => a !== 'ddp' && !a.startsWith('m32'))) {
      const r = at(arm);
      expect(r.coordinator.innerSteps).toBe(30);
      expect(r.islands.reduce((a, s) => a + s.batchSize, 0)).toBe(p.batch);
      expect(r.tokens).toBe(p.tokens - 4096); // the warm start inside D
    }
    expect(m8).toMatchObject({
      mode: 'sync',
      codec: { encoding: 'f32' },
      coordinator: { downlink: { encoding: 'f32' } },
    });
    expect(m8.coordinator.outer).toEqual({ kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 });
    expect(m8.lr).toEqual({
      maxLr: 0.005657,
      minLr: 0.005657 * 0.05,
      warmupTokens: Math.round((p.tokens - 4096) / 16),
    });
    expect(at('m8-sparse')).toMatchObject({ mode: 'sync', codec: { encoding: 'sparse', strided: true } });
    expect(at('m8-sparse-async')).toMatchObject({ mode: 'async', codec: { encoding: 'sparse' } });
    expect(new Set(at('m8-sparse-async').islands.map((s) => s.speed))).toEqual(new Set([1]));
    expect(new Set(at('production').islands.map((s) => s.speed))).toEqual(new Set([1, 2, 4]));
    expect(at('sparseloco').codec).toEqual({
      encoding: 'sparse',
      blockSize: 4096,
      deflate: false,
      topkFraction: 64 / 4096,
      strided: false,
      valueBits: 2,
      feedbackDecay: 0.95,
    });
    expect(at('sparseloco').coordinator.outer).toMatchObject({ kind: 'sgd', lr: 1, momentum: 0 });
    expect(() => at('m32')).toThrow(/does not split over 32/); // batch 16: no 32-island rows at L3-C64
    const ddp = buildRow(p, { rung: p.spec.name, arm: 'ddp', lrK: 5, batch: 4, outerLr: 0, seed: 1 }, 0);
    expect(ddp.islands.map((s) => s.batchSize)).toEqual([1, 1, 1, 1]);
  });

  it("M = 1: a one-island round takes the outer step (period 1), not serve's plain step (period 0)", () => {
    const p = plans[0];
    const row = buildRow(p, { rung: 'tiny', arm: 'm1', lrK: 5, batch: 8, outerLr: 0.4, seed: 1 }, 0);
    expect(row.islands).toHaveLength(1);
    const kept = [{ weight: 1, staleness: 0, tokens: 1 }] as never;
    const one = [{ id: 'a', status: 'online' }] as never;
    const cfg = mergeConfig(DEFAULT_COORDINATOR_CONFIG, { ...row.coordinator, mode: 'sync' });
    expect(outerStepOf(cfg, kept, one).period).toBe(1);
    expect(outerStepOf(mergeConfig(DEFAULT_COORDINATOR_CONFIG, { mode: 'sync' }), kept, one).period).toBe(0);
  });

  it("AdamW β2 0.99 reaches the rows' engines (two steps differ from β2 0.95's)", async () => {
    const config = getPreset('tiny');
    const common = { model: 'tiny' as const, seqLen: 16, seed: 1, evals: 1, evalBatches: 1, evalBatchSize: 2 };
    const ds = loadCorpus('sotu');
    const trained = async (adam?: { beta1: number; beta2: number }) => {
      const m = await rowEngines({ ...common, adam }, 2);
      const e = await m.make({ config, maxBatch: 2, maxT: 16 });
      await e.setParams(initParams(config, 1));
      for (let s = 0; s < 3; s++)
        await e.step(sampleBatch(ds.train, 2, 16, 1, 7, s, allocBatch(2, 16)), { lr: 1e-2, gradClip: 1 });
      const p = await e.getParams();
      await m.dispose();
      return p;
    };
    const [a, b, c] = [await trained(ADAM), await trained({ beta1: 0.9, beta2: 0.95 }), await trained()];
    expect(a).not.toEqual(b);
    expect(c).toEqual(b); // the engines' default is 0.95
  });
});

describe('the search, on synthetic losses', () => {
  it('widens a grid until its best is interior, or says it stopped at the limit', () => {
    const solve = (start: number[], lo: number, hi: number, f: (x: number) => number) => {
      const done = new Map<number, number>();
      for (;;) {
        const g = gridSearch(start, lo, hi, (x) => done.get(x));
        if (!('missing' in g)) return { ...g, ran: [...done.keys()].sort((a, b) => a - b) };
        for (const x of g.missing) done.set(x, f(x));
      }
    };
    expect(solve([3, 4, 5, 6], -1, 10, (x) => (x - 8) ** 2)).toEqual({
      best: 8,
      edge: false,
      ran: [3, 4, 5, 6, 7, 8, 9],
    });
    expect(solve([3, 4, 5, 6], -1, 10, (x) => (x === 5 ? NaN : (x - 1) ** 2))).toMatchObject({ best: 1, edge: false });
    expect(solve([3, 4], 2, 5, (x) => -x)).toEqual({ best: 5, edge: true, ran: [3, 4, 5] });
  });

  it('outer lr swept at the first rung and held; seeds at the two smallest; 32 islands where the batch allows', () => {
    const specs = ['tiny', 'L2-C48', 'L3-C64', 'L6-C104'].map((n) => RUNGS.find((r) => r.name === n)!);
    const plans = specs.map((s) => rungPlan(s, PROTOCOL));
    // lr optimum at index 6 for DDP, 5 for M = 8; outer lr 0.7 best for both; batch optimum the rule's
    const loss = (s: RowSpec) =>
      3 +
      0.01 * (s.lrK - (s.arm === 'ddp' ? 6 : 5)) ** 2 +
      Math.abs(s.outerLr - 0.7) +
      0.001 * s.seed +
      (s.arm === 'ddp' ? 0.01 * Math.abs(Math.log2(s.batch / plans.find((p) => p.spec.name === s.rung)!.batch)) : 0.02);
    const res = new Map<string, { evalLoss: number }>();
    for (let guard = 0; guard < 50; guard++) {
      const want = plans.flatMap((_, k) => planRung(k, plans, PROTOCOL, 1, res).want);
      if (!want.length) break;
      for (const s of want) res.set(rowKey(s), { evalLoss: loss(s) });
    }
    const st = plans.map((_, k) => planRung(k, plans, PROTOCOL, 1, res));
    expect(st.every((s) => s.done)).toBe(true);
    for (const s of st)
      expect(s.choice).toMatchObject({ ddpLrK: 6, m1OuterLr: 0.7, m8OuterLr: 0.7, m8LrK: 5, edges: [] });
    expect(st.map((s) => s.choice.ddpBatch)).toEqual(plans.map((p) => p.batch));
    const keys = [...res.keys()];
    const olr = (rung: string) =>
      new Set(keys.filter((k) => k.startsWith(`${rung}/m`)).map((k) => k.match(/olr([\d.]+)/)?.[1]));
    expect(olr('tiny')).toEqual(new Set(['0.4', '0.7', '1']));
    expect(olr('L3-C64')).toEqual(new Set(['0.7']));
    const seeds = (rung: string, arm: string) =>
      keys
        .filter((k) => k.startsWith(`${rung}/${arm}-`) && st[0].choice.arms && k.includes('lr'))
        .map((k) => k.split('/s')[1]);
    expect(new Set(seeds('L2-C48', 'm1'))).toEqual(new Set(['1', '2', '3']));
    expect(new Set(seeds('L3-C64', 'm1'))).toEqual(new Set(['1']));
    expect(Object.keys(st[2].choice.arms)).not.toContain('m32');
    expect(Object.keys(st[3].choice.arms)).toEqual(expect.arrayContaining(['m32', 'm32-production', 'sparseloco']));
  });
});

describe('atoll simulate --preset scaling --quick', () => {
  it('parses its flags', () => {
    expect(scalingOptionsFromCli({ quick: true, rungs: 'tiny,L6-C104', cold: true, data: 'moby-dick' })).toMatchObject({
      ok: true,
      value: { quick: true, rungs: ['tiny', 'L6-C104'], warmStartTokens: 0, data: 'moby-dick' },
    });
    expect(scalingOptionsFromCli({ rungs: 'tiny,nope' })).toMatchObject({
      ok: false,
      error: { code: 'E_BAD_REQUEST' },
    });
  });

  it('the smoke: rows per rung, H 30, tokens; stopped after 9 runs it resumes and runs only the rest', async () => {
    const out = mkdtempSync(join(tmpdir(), 'atoll-scaling-'));
    const keys = (lines: string[]) => lines.flatMap((l) => l.match(/^run \d+: (\S+)$/)?.slice(1) ?? []);
    const log1: string[] = [];
    const first = await runScaling({ quick: true, out, maxRuns: 9, print: false, log: (l) => log1.push(l) });
    expect(first.complete).toBe(false);
    expect(first.config.ranRuns).toBe(9);
    appendFileSync(join(out, 'rows.jsonl'), '{"key":"tiny/torn'); // a stop mid-write
    const log2: string[] = [];
    const r = await runScaling({ quick: true, out, print: false, log: (l) => log2.push(l) });
    expect(r.complete).toBe(true);
    expect(r.config.resumedRuns).toBe(9);
    expect(keys(log2).filter((k) => keys(log1).includes(k))).toEqual([]);
    const lines = readFileSync(join(out, 'rows.jsonl'), 'utf8').trim().split('\n').slice(1);
    expect(new Set(lines.map((l) => JSON.parse(l).key)).size).toBe(lines.length);
    expect(lines.length).toBe(9 + r.config.ranRuns);
    expect(r.rungs.map((g) => g.name)).toEqual(['tiny', 'L2-C48']);
    for (const g of r.rungs) {
      const plan = rungPlan(RUNGS.find((x) => x.name === g.name)!, QUICK_PROTOCOL);
      expect(g.tokens).toBe(Math.max(Math.round((20 / 64) * numParams(plan.spec.config)), 2 * g.batch * 32 * 30));
      expect(g.rows.map((x) => x.arm)).toEqual([
        'ddp',
        'm1',
        'm8',
        'm8-sparse',
        'm8-sparse-async',
        'production',
        'sparseloco',
      ]);
      for (const x of g.rows) {
        expect(x.tokens).toBeGreaterThanOrEqual(g.tokens);
        if (x.arm !== 'ddp') expect(x.innerSteps).toBe(30);
        expect(x.evalLoss).toBeLessThan(Math.log(256));
      }
      for (const arm of ['ddp', 'm1', 'm8']) expect(g.rows.find((x) => x.arm === arm)!.seedLosses).toHaveLength(2);
    }
    expect(r.verdicts.map((v) => v.arm)).toEqual([
      'm1',
      'm8',
      'm8-sparse',
      'm8-sparse-async',
      'production',
      'sparseloco',
    ]);
    for (const v of r.verdicts) {
      expect(['narrows', 'holds', 'widens']).toContain(v.word);
      expect(v.delta).toBeCloseTo(v.points[1].gap - v.points[0].gap, 12);
      expect(v.sd).toBeGreaterThan(0);
    }
    expect(r.fits.map((f) => f.arm)).toContain('m8');
    expect(r.checks).toHaveLength(5);
    expect(readFileSync(join(out, 'report.md'), 'utf8')).toContain('## Gap to the tuned DDP against N');
    expect(existsSync(join(out, 'report.json'))).toBe(true);
    // the same folder under another protocol is refused, not mixed in
    await expect(runScaling({ quick: true, out, tokensPerParam: 1, print: false, log: () => {} })).rejects.toThrow(
      /another protocol/,
    );
  }, 600_000); // ~30 s of CPU; the limit is for a shared, loaded machine
});
