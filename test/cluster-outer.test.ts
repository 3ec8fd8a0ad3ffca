// The outer step in worker threads is the coordinator's outer step, bit for bit: the same downlink
// frame bytes, the same θ and hash, the same optimizer and error-feedback state, over sync rounds,
// async delayed-Nesterov arrivals, merge-window shares, the plain step, f32 and int4 downlinks and a
// rejected (non-finite) step.

import { afterAll, describe, expect, it } from 'vitest';
import { encodeDelta, peekHeader } from '../core/codec/index.ts';
import { l2 } from '../core/coord/aggregate.ts';
import type { OuterConfig } from '../core/coord/outer.ts';
import { OuterPool } from '../server/outer/pool.ts';
import { type DownlinkCfg, ReferenceOuter } from './helpers/outer-reference.ts';

const N = 57 * 256 + 37; // not a multiple of the alignment, the block size or the worker count; fragments of two 4096-element chunks
const rand = (seed: number) => () => (seed = (seed * 1664525 + 1013904223) >>> 0) / 2 ** 32 - 0.5;
const vec = (seed: number, scale = 0.01) => {
  const r = rand(seed);
  return Float32Array.from({ length: N }, () => r() * scale);
};

const pools: OuterPool[] = [];
afterAll(async () => {
  for (const p of pools) await p.close();
});

describe('outer pool', () => {
  it('matches the sequential outer step bit for bit (sync rounds, async delayed Nesterov, shares, plain steps, f32 and int4 downlinks, a rejected step)', async () => {
    const theta0 = vec(1, 1);
    const ref = new ReferenceOuter(theta0);
    const pool = OuterPool.start({ theta: theta0, workers: 3, align: 256 });
    pools.push(pool);
    const int8 = { encoding: 'int8' as const, blockSize: 64 };
    const nesterov: OuterConfig = { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 };
    const dn: OuterConfig = { kind: 'delayed-nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 };
    const check = async (
      deltas: Float32Array[],
      weights: number[] | null,
      outer: OuterConfig,
      downlink: DownlinkCfg = int8,
      scale = 1,
      period = 1,
      share = false,
    ) => {
      const slots: number[] = [];
      for (const d of deltas) {
        const r = await pool.ingest(encodeDelta(d, { encoding: 'f32' }));
        if (!r.ok) throw new Error(r.error.code);
        expect(r.value.norm).toBe(l2(d));
        slots.push(r.value.slot);
      }
      const want = ref.step(deltas, weights, outer, downlink, scale, period, share);
      const got = await pool.step({ slots, weights, outer, downlink, scale, period, share });
      for (const s of slots) pool.release(s);
      if (!want) {
        expect(got.ok).toBe(false);
        return;
      }
      if (!got.ok) throw new Error(got.error.message);
      expect(Buffer.from(got.value.frame).equals(Buffer.from(want.frame))).toBe(true);
      const h = peekHeader(got.value.frame);
      expect(h.ok && h.value.deflated).toBe(downlink.deflate === true);
      expect(got.value.hash).toBe(want.hash);
      expect(Buffer.from(pool.theta.buffer).equals(Buffer.from(ref.theta.buffer))).toBe(true);
      expect(got.value.updateNorm).toBeCloseTo(want.updateNorm, 6);
      // each delta's agreement sums (the fragments' partial sums added: equal up to rounding)
      const close = (x: number[], y: number[]) =>
        x.forEach((v, j) => expect(Math.abs(v - y[j])).toBeLessThanOrEqual(1e-9 * Math.abs(y[j]) + 1e-12));
      if (want.agreement) {
        const a = got.value.agreement!;
        close(a.dots, want.agreement.dots);
        close(a.sqs, want.agreement.sqs);
        close([a.gg], [want.agreement.gg]);
      } else expect(got.value.agreement).toBeUndefined();
    };
    for (let r = 0; r < 3; r++) await check([vec(10 + r), vec(20 + r), vec(30 + r)], [0.5, 0.3, 0.2], nesterov);
    // rounds of 4 and 7 deltas: the fused pass takes deltas four at a time, then one by one
    await check(
      [0, 1, 2, 3].map((j) => vec(80 + j)),
      [0.4, 0.3, 0.2, 0.1],
      nesterov,
    );
    await check(
      [0, 1, 2, 3, 4, 5, 6].map((j) => vec(90 + j)),
      [0.2, 0.2, 0.1, 0.1, 0.1, 0.15, 0.15],
      nesterov,
    );
    for (let k = 0; k < 4; k++) await check([vec(40 + k)], null, dn, int8, 1 / 3, 3);
    await check([vec(50)], [1], nesterov, { encoding: 'f32', blockSize: 64 });
    const bad = vec(60);
    bad[N - 3] = 3e38;
    await check([bad, bad], [1e10, 1e10], nesterov); // overflows: rejected, nothing changes
    await check([vec(70), vec(71)], [0.5, 0.5], nesterov);
    // a merge window's share of a step, the plain step (period 0), an int4 downlink (fused and generic paths)
    await check([vec(72), vec(73)], [0.6, 0.4], nesterov, int8, 0.37, 1, true);
    await check([vec(74)], null, nesterov, { encoding: 'f32', blockSize: 64 }, 0.61, 1, true);
    await check([vec(75)], null, nesterov, int8, 1, 0);
    await check([vec(78)], null, { kind: 'sgd', lr: 1, momentum: 0, dnPeriod: 0 }, int8, 0.3, 1, true); // sgd, a share of a step
    await check(
      [vec(79), vec(80)],
      [0.5, 0.5],
      { kind: 'sgd', lr: 0.5, momentum: 0.9, dnPeriod: 0 },
      int8,
      0.6,
      1,
      true,
    ); // heavy ball, a share
    await check([vec(76)], [1], nesterov, { encoding: 'int4', blockSize: 64 });
    await check([vec(77)], null, nesterov, { encoding: 'int4', blockSize: 32 }, 0.5, 1, true);
    // the default run's downlink (int4, deflated): the workers seal the frame deflated, as encodeDelta does
    await check([vec(81), vec(82)], [0.5, 0.5], nesterov, { encoding: 'int4', blockSize: 256, deflate: true });

    const s = await pool.exportViews();
    expect(Buffer.from(s.outer.momentum.buffer).equals(Buffer.from(ref.outer.state.momentum.buffer))).toBe(true);
    expect(Buffer.from(s.residual.buffer).equals(Buffer.from(ref.downlink.fb.residual.buffer))).toBe(true);
    expect(s.outer.steps).toBe(ref.outer.state.steps);
  });

  it('a θ smaller than one fragment runs on one worker; a dead worker fails every call instead of hanging', async () => {
    const n = 3064; // not a multiple of the block size: a second, empty fragment would start off a block boundary
    const theta0 = Float32Array.from({ length: n }, (_, i) => Math.sin(i));
    const ref = new ReferenceOuter(theta0);
    const pool = OuterPool.start({ theta: theta0, workers: 2 });
    pools.push(pool);
    const d = Float32Array.from({ length: n }, (_, i) => 0.01 * Math.cos(i));
    const r = await pool.ingest(encodeDelta(d, { encoding: 'f32' }));
    if (!r.ok) throw new Error(r.error.code);
    const outer: OuterConfig = { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 };
    const got = await pool.step({
      slots: [r.value.slot],
      weights: [1],
      outer,
      downlink: { encoding: 'int8', blockSize: 64 },
      scale: 1,
      period: 1,
    });
    if (!got.ok) throw new Error(got.error.message);
    expect(got.value.hash).toBe(ref.step([d], [1], outer, { encoding: 'int8', blockSize: 64 })!.hash);
    await (pool as unknown as { workers: Array<{ terminate(): Promise<number> }> }).workers[0].terminate();
    await expect(pool.ingest(encodeDelta(d, { encoding: 'f32' }))).rejects.toThrow(/exited/);
  });

  it('ingest rejects a corrupt frame with its code and frees the slot', async () => {
    const pool = OuterPool.start({ theta: vec(2), workers: 2, align: 256 });
    pools.push(pool);
    const f = encodeDelta(vec(3), { encoding: 'int8', blockSize: 64 });
    f[100] ^= 1;
    const r = await pool.ingest(f);
    expect(r.ok ? 'ok' : r.error.code).toBe('E_CRC');
    const wrong = await pool.ingest(encodeDelta(new Float32Array(N - 1), { encoding: 'f32' }));
    expect(wrong.ok ? 'ok' : wrong.error.code).toBe('E_WRONG_SIZE');
  });

  it('state exported from one pool and imported into another continues identically', async () => {
    const theta0 = vec(5, 1);
    const a = OuterPool.start({ theta: theta0, workers: 2, align: 256 });
    pools.push(a);
    const int8 = { encoding: 'int8' as const, blockSize: 64 };
    const outer: OuterConfig = { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 };
    const one = async (p: OuterPool, seed: number) => {
      const r = await p.ingest(encodeDelta(vec(seed), { encoding: 'f32' }));
      if (!r.ok) throw new Error(r.error.code);
      const s = await p.step({ slots: [r.value.slot], weights: [1], outer, downlink: int8, scale: 1, period: 1 });
      p.release(r.value.slot);
      if (!s.ok) throw new Error(s.error.code);
      return s.value;
    };
    await one(a, 80);
    const b = OuterPool.start({ theta: a.theta, workers: 3, align: 256 });
    pools.push(b);
    await b.importState(await a.exportViews());
    const [x, y] = [await one(a, 81), await one(b, 81)];
    expect(y.hash).toBe(x.hash);
    expect(Buffer.from(y.frame).equals(Buffer.from(x.frame))).toBe(true);
  });
});

describe('bench server: outerWorkers', () => {
  it("reports ingest and apply apart, with the event loop's longest stall; --outer-workers is a flag", async () => {
    const { benchOuterPool } = await import('../instruments/bench/outer-pool.ts');
    const r = await benchOuterPool({ n: 1 << 16, workers: 2, seconds: 0.05 });
    expect(r.workers).toBe(2);
    expect(r.roundSize).toBe(4);
    for (const k of [
      'ingestParamsPerSec',
      'applyParamsPerSec',
      'applyAsyncParamsPerSec',
      'stepMs',
      'loopMaxStallMs',
    ] as const)
      expect(r[k]).toBeGreaterThan(0);
    const { buildProgram } = await import('../instruments/cli.ts');
    const bench = buildProgram().commands.find((c) => c.name() === 'bench')!;
    expect(bench.commands.find((c) => c.name() === 'server')!.options.map((o) => o.long)).toContain('--outer-workers');
  });
});
