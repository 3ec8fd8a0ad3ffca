// The outer momentum follows the inner learning-rate schedule (core/coord/anneal.ts, outer.ts): its decay
// takes η(now)/η(last step) ≤ 1. The factor from the schedule; the optimizer's arithmetic with it; and the
// run it was built for: the twin of a 16-island fleet on sotu (bench/results/fleet/sotu-twin-late-rise.json,
// measured before the anneal) went 3.14 → 4.63 over its last four outer steps, a momentum of early, large
// pseudo-gradients pushing on while the cosine annealed the inner steps. Replayed now, it may not rise.

import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { momentumAnneal } from '../core/coord/anneal.ts';
import { DEFAULT_COORDINATOR_CONFIG, mergeConfig } from '../core/coord/config.ts';
import { OuterOptimizer } from '../core/coord/outer.ts';
import type { VersionStats } from '../core/coord/types.ts';
import { learningRate } from '../core/model/schedule.ts';
import { runSimulate } from '../instruments/simulate/index.ts';
import { tempDir } from './helpers/server.ts';

const cfg = mergeConfig(DEFAULT_COORDINATOR_CONFIG, { totalTokens: 100_000 });
const last = (totalTokens: number, tokens: number) => ({ totalTokens, tokens }) as VersionStats;

describe('the outer momentum follows the inner schedule', () => {
  it('anneals by the schedule’s η ratio since the last step, never above 1', () => {
    const { maxLr, minLr, warmupTokens } = cfg.innerLr;
    const eta = (t: number) => learningRate({ maxLr, minLr, warmup: warmupTokens, total: 100_000 }, t);
    // the last update was taken at 40k tokens (it added 10k): the step at 70k decays by η(70k)/η(40k)
    const a = momentumAnneal(cfg, 70_000, last(50_000, 10_000));
    expect(a).toBeCloseTo(eta(70_000) / eta(40_000), 12);
    expect(a).toBeLessThan(0.7);
    expect(momentumAnneal(cfg, 70_000, undefined)).toBe(1); // the first step
    expect(momentumAnneal({ ...cfg, totalTokens: 0 }, 70_000, last(50_000, 10_000))).toBe(1); // no budget: no decay
    const warm = { ...cfg, innerLr: { ...cfg.innerLr, warmupTokens: 50_000 } };
    expect(momentumAnneal(warm, 20_000, last(10_000, 10_000))).toBe(1); // a warm-up does not grow it
  });

  it('multiplies the momentum’s decay (nesterov, sgd with momentum, a window’s share), and the step with it', () => {
    const n = 5;
    const g = Float32Array.from([0.5, -1, 2, 0.25, -0.125]);
    for (const [kind, share] of [
      ['nesterov', false],
      ['nesterov', true],
      ['sgd', false],
    ] as const) {
      const o = new OuterOptimizer(n);
      const outer = { kind, lr: 0.7, momentum: 0.9, dnPeriod: 0 };
      o.propose(outer, g, 1, 1);
      o.commit();
      const m = o.state.momentum.slice();
      const s = share ? 0.5 : 1;
      o.propose(outer, g, s, 1, share, 1, 0.25);
      const decay = (share ? 0.9 ** s : 0.9) * 0.25;
      for (let i = 0; i < n; i++) {
        const mi = Math.fround(decay * m[i] + s * g[i]);
        const u = kind === 'nesterov' ? 0.7 * (s * g[i] + (share ? s : 1) * 0.9 * mi) : 0.7 * mi;
        expect(o.update[i]).toBeCloseTo(u, 6);
      }
    }
  });

  it('the sotu fleet’s twin, replayed, no longer rises late (it rose 47 %)', async () => {
    const sim = await runSimulate({
      fromFleet: join(import.meta.dirname, '../bench/results/fleet/sotu-twin-late-rise.json'),
      rows: ['twin'],
      workers: 0,
      out: tempDir('atoll-anneal-'),
      print: false,
      log: () => {},
    });
    const twin = sim.runs[0];
    expect(twin.maxRise).toBeLessThan(0.02); // eval never 2 % above its running best
    expect(twin.evalLoss).toBeLessThan(3.1); // DDP on the same tokens: 3.086
  }, 120_000);
});
