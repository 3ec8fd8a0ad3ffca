// The sparse downlink (`serve --downlink sparse`): the outer update in the uplink's own sparse code,
// with the server's error feedback. The worker-thread outer step cuts its frame into fragments bit for
// bit as the coordinator encodes it whole; a code whose fragments cannot be cut on whole bytes is refused
// when the config is checked; the flags and the admin API pick it; and a simulated run on it learns as
// well as on the int4 downlink.

import { afterAll, describe, expect, it } from 'vitest';
import { DOWNLINK_ENCODINGS, encodeDelta, peekHeader } from '../core/codec/index.ts';
import {
  DEFAULT_COORDINATOR_CONFIG,
  SPARSE_CODE_DOWNLINK,
  SPARSE_DOWNLINK,
  SPARSE_UPLINK,
  mergeConfig,
  validateCoordinatorConfig,
} from '../core/coord/index.ts';
import { patchConfig } from '../core/coord/config.ts';
import type { OuterConfig } from '../core/coord/outer.ts';
import { type DownlinkSpec, fragmentProblem } from '../core/coord/outer-fragment.ts';
import { OuterPool } from '../server/outer/pool.ts';
import { buildRunConfig } from '../server/run/config.ts';
import { parseConfigPatch } from '../server/run/knobs.ts';
import { buildProgram } from '../instruments/cli.ts';
import { runSimulate, simulateOptionsFromCli } from '../instruments/simulate/index.ts';
import { ReferenceOuter } from './helpers/outer-reference.ts';

const rand = (seed: number) => () => (seed = (seed * 1664525 + 1013904223) >>> 0) / 2 ** 32 - 0.5;
const vec = (n: number, seed: number, scale = 0.01) => {
  const r = rand(seed);
  return Float32Array.from({ length: n }, () => r() * scale);
};
const nesterov: OuterConfig = { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 };
const same = (a: ArrayBufferView, b: ArrayBufferView) =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

const pools: OuterPool[] = [];
afterAll(async () => {
  for (const p of pools) await p.close();
});

/** `steps` outer steps on the pool and on the whole-array reference: the same frames, θ and residual. */
async function matches(n: number, downlink: DownlinkSpec, workers: number, align: number | undefined, steps = 3) {
  const theta0 = vec(n, 1, 1);
  const ref = new ReferenceOuter(theta0);
  const pool = OuterPool.start({ theta: theta0, workers, align });
  pools.push(pool);
  for (let s = 0; s < steps; s++) {
    const deltas = [vec(n, 10 + s), vec(n, 20 + s)];
    const slots: number[] = [];
    for (const d of deltas) {
      const r = await pool.ingest(encodeDelta(d, { encoding: 'f32' }));
      if (!r.ok) throw new Error(r.error.code);
      slots.push(r.value.slot);
    }
    const want = ref.step(deltas, [0.6, 0.4], nesterov, downlink);
    const got = await pool.step({ slots, weights: [0.6, 0.4], outer: nesterov, downlink, scale: 1, period: 1 });
    for (const slot of slots) pool.release(slot);
    if (!want || !got.ok) throw new Error(got.ok ? 'the reference rejected the step' : got.error.message);
    // the frame carries the configured code (its k per chunk, striding and value bits), as encodeDelta writes it
    const h = peekHeader(got.value.frame),
      own = peekHeader(encodeDelta(new Float32Array(n), downlink));
    if (!h.ok || !own.ok) throw new Error('no header');
    const code = ({ encoding, blockSize, k, strided, valueBits }: typeof h.value) => ({
      encoding,
      blockSize,
      k,
      strided,
      valueBits,
    });
    expect(code(h.value)).toEqual(code(own.value));
    expect(h.value.k).toBe(Math.round((downlink.topkFraction ?? 0) * downlink.blockSize));
    expect(same(got.value.frame, want.frame), `step ${s}: the frame`).toBe(true);
    expect(got.value.hash).toBe(want.hash);
  }
  expect(same(pool.theta, ref.theta)).toBe(true);
  // what the frames left out is kept, the same on both
  const st = await pool.exportViews();
  expect(same(st.residual, ref.downlink.fb.residual)).toBe(true);
  expect(st.residual.some((x) => x !== 0)).toBe(true);
}

describe('sparse downlink', () => {
  it("the outer pool's fragments give the coordinator's frame bit for bit (strided 1-bit, deflated, top-k 2-bit)", async () => {
    // two 65,536-entry fragments and a short last chunk: the run setting at the pool's own alignment
    await matches(2 * 65536 + 3 * 4096 + 123, { ...SPARSE_CODE_DOWNLINK }, 2, undefined);
    await matches(2 * 65536 + 77, { ...SPARSE_CODE_DOWNLINK, deflate: true }, 2, undefined, 2);
    // top-k offsets (6 bits each at chunks of 64) and 2-bit values over three fragments of 512
    const topk = { encoding: 'sparse', blockSize: 64, topkFraction: 0.5, valueBits: 2, feedbackDecay: 0.9 } as const;
    await matches(9 * 512 + 37, topk, 3, 512);
  }, 60_000);

  it('a code whose fragments would not start on whole bytes is refused, at config time and by the pool', async () => {
    // 19 of 64 entries at 1 bit: a fragment of 256 entries holds 76 bits of codes
    const odd = { encoding: 'sparse', blockSize: 64, topkFraction: 0.3, strided: true, valueBits: 1 } as const;
    expect(fragmentProblem(odd, 256)).toMatch(/whole bytes/);
    expect(fragmentProblem(odd)).toBeNull(); // at the pool's 65,536: 1024 chunks, whole bytes
    const pool = OuterPool.start({ theta: vec(1024, 2), workers: 2, align: 256 });
    pools.push(pool);
    const r = await pool.ingest(encodeDelta(vec(1024, 3), { encoding: 'f32' }));
    if (!r.ok) throw new Error(r.error.code);
    const got = await pool.step({
      slots: [r.value.slot],
      weights: null,
      outer: nesterov,
      downlink: odd,
      scale: 1,
      period: 1,
    });
    expect(got).toMatchObject({ ok: false, error: { code: 'E_POOL_ALIGN' } });
    // at 65,536 a chunk of the whole vector keeps 19,661 one-bit codes: no whole byte
    const whole = { ...odd, blockSize: 65536 };
    const c = mergeConfig(DEFAULT_COORDINATOR_CONFIG, { downlink: whole });
    expect(validateCoordinatorConfig(c).join()).toMatch(/downlink: a sparse downlink keeping 19661 of 65536/);
    expect(patchConfig(DEFAULT_COORDINATOR_CONFIG, { downlink: whole })).toMatchObject({
      ok: false,
      error: { code: 'E_BAD_CONFIG' },
    });
    expect(
      validateCoordinatorConfig(mergeConfig(DEFAULT_COORDINATOR_CONFIG, { downlink: SPARSE_CODE_DOWNLINK })),
    ).toEqual([]);
  });

  it('serve --downlink, the admin API and simulate --downlink pick it, over --codec whatever the order', () => {
    expect(SPARSE_CODE_DOWNLINK).toEqual({ ...SPARSE_UPLINK, feedbackDecay: 1 });
    const serve = buildProgram().commands.find((c) => c.name() === 'serve')!;
    expect(serve.options.find((o) => o.long === '--downlink')!.argChoices).toEqual([...DOWNLINK_ENCODINGS]);
    const sim = buildProgram().commands.find((c) => c.name() === 'simulate')!;
    expect(sim.options.find((o) => o.long === '--downlink')!.argChoices).toEqual([...DOWNLINK_ENCODINGS]);
    const cc = (flags: Parameters<typeof buildRunConfig>[1]) =>
      buildRunConfig(null, { preset: 'tiny', ...flags }).coordinator;
    expect(cc({ downlink: 'sparse' })).toMatchObject({ uplink: SPARSE_UPLINK, downlink: SPARSE_CODE_DOWNLINK });
    expect(cc({ downlink: 'sparse', codec: 'int8' })).toMatchObject({
      uplink: { encoding: 'int8' },
      downlink: SPARSE_CODE_DOWNLINK,
    });
    expect(cc({ downlink: 'int4', codec: 'int8' }).downlink).toEqual(SPARSE_DOWNLINK);
    for (const body of [
      { codec: 'int8', downlink: 'sparse' },
      { downlink: 'sparse', codec: 'int8' },
    ])
      expect(parseConfigPatch(body)).toEqual({
        ok: true,
        value: { uplink: { encoding: 'int8' }, downlink: { ...SPARSE_CODE_DOWNLINK } },
      });
    expect(parseConfigPatch({ downlink: 'topk' })).toMatchObject({ ok: false, error: { code: 'E_BAD_REQUEST' } });
    expect(simulateOptionsFromCli({ downlink: 'sparse' })).toMatchObject({ ok: true, value: { downlink: 'sparse' } });
    expect(simulateOptionsFromCli({ downlink: 'topk' })).toMatchObject({ ok: false, error: { code: 'E_BAD_REQUEST' } });
  });

  it('a simulated run on it learns, and ends within 1.03× of the same run on the int4 downlink', async () => {
    const run = async (downlink: 'int4' | 'sparse') => {
      const r = await runSimulate({
        ...{ preset: 'smoke', mode: 'async', codec: 'sparse', downlink, tokens: 16_384, evalBatches: 8 },
        ...{ compare: 'none', workers: 0, print: false, log: () => {} },
      });
      const row = r.runs[0];
      return { row, downlink: r.config.rows[0].coordinator.downlink };
    };
    const int4 = await run('int4');
    const sparse = await run('sparse');
    expect(int4.downlink).toEqual(SPARSE_DOWNLINK);
    expect(sparse.downlink).toEqual(SPARSE_CODE_DOWNLINK);
    const curve = sparse.row.evalCurve;
    expect(curve.at(-1)!.evalLoss).toBeLessThan(curve[0].evalLoss - 2); // from ~5.5 (uniform over 256 bytes)
    expect(sparse.row.evalLoss / int4.row.evalLoss).toBeLessThanOrEqual(1.03);
    // and it downloads under a third of int4's bytes
    expect(sparse.row.bytesDownPerIsland).toBeLessThan(int4.row.bytesDownPerIsland / 3);
  }, 60_000);
});
