// The Wasm engine on threads (worker_threads sharing its memory, client/island/engine/wasm-threads.ts):
// the same inputs and thread count give the same bits, run after run, and 2 threads the same bits as 1
// (each kernel splits its rows by a fixed rule and every output is summed in one order); `--threads`
// belongs to the Wasm engine and is refused elsewhere with a code; `bench cpu` measures both engines.

import { describe, expect, it } from 'vitest';
import { hashParams } from '../core/coord/hash.ts';
import { sampleBatch } from '../core/data/dataset.ts';
import { encodeText } from '../core/data/tokenizer.ts';
import { PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { createEngine } from '../client/island/engine/node-engines.ts';
import { benchCpu } from '../instruments/bench/cpu.ts';
import { MIN_SPLIT_WORK, worthSplitting } from '../core/engine/wasm/kernels.ts';

const TEXT = encodeText('It is not down in any map; true places never are. '.repeat(40));
const config = PRESETS.small;

/** θ's hash and the losses after `steps` steps of `small` on `threads` threads. */
async function train(threads: number, steps = 3): Promise<{ hash: string; losses: number[]; device: string }> {
  const B = 2,
    T = 64;
  const e = await createEngine('cpu', { config, maxBatch: B, maxT: T }, { threads });
  try {
    await e.setParams(initParams(config, 5));
    for (let s = 0; s < steps; s++) await e.step(sampleBatch(TEXT, B, T, 5, 0, s), { lr: 3e-3, gradClip: 1 });
    return { hash: hashParams(await e.getParams()), losses: await e.takeLosses(), device: e.device };
  } finally {
    e.destroy();
  }
}

describe('the Wasm engine on threads', () => {
  it('gives the same θ hash for the same seed and thread count, and 2 threads the same bits as 1', async () => {
    const [a, b, one] = [await train(2), await train(2), await train(1)];
    expect(a.device).toBe('wasm-simd (2 threads)');
    expect(one.device).toBe('wasm-simd (1 thread)');
    expect(a.losses[2]).toBeLessThan(a.losses[0]); // it trains
    expect(b.hash).toBe(a.hash);
    expect(b.losses).toEqual(a.losses);
    expect(one.hash).toBe(a.hash);
  }, 120_000);

  it("--threads is the Wasm engine's: the JS reference and WebGPU refuse it with a code", async () => {
    const opts = { config: PRESETS.tiny, maxBatch: 2 };
    await expect(createEngine('js', opts, { threads: 2 })).rejects.toThrow(/^E_BAD_CONFIG: --threads/);
    await expect(createEngine('webgpu', opts, { threads: 2 })).rejects.toThrow(/^E_BAD_CONFIG: --threads needs/);
    await expect(createEngine('cpu', opts, { threads: 0 })).rejects.toThrow(/^E_BAD_CONFIG: --threads 0/);
  });

  it('splits a call over the threads only when each share outweighs waking a helper', () => {
    // gemm over 256 rows of K 32 · N 96 (tiny's qkv): 786k multiply-adds, split; a residual add of 8k: not
    expect(worthSplitting('gemm', 256, 4, [0, 0, 32, 1, 0, 0, 0, 32, 96], 2)).toBe(true);
    expect(worthSplitting('residualForward', 8192, 4, [0, 0, 0], 2)).toBe(false);
    expect(worthSplitting('residualForward', 2 * MIN_SPLIT_WORK, 4, [0, 0, 0], 2)).toBe(true);
    // attention over (b, h) pairs: T² · head size each
    expect(worthSplitting('attentionForward', 16, 1, [0, 0, 0, 128, 128, 4], 2)).toBe(true);
    expect(worthSplitting('gemm', 256, 4, [0, 0, 32, 1, 0, 0, 0, 32, 96], 1)).toBe(false);
    expect(worthSplitting('gemm', 7, 4, [0, 0, 32, 1, 0, 0, 0, 4096, 4096], 2)).toBe(false); // under 2 × align
  });

  it('bench cpu: both engines on the same preset in one run, the Wasm step faster than the JS one', async () => {
    const r = await benchCpu({ presets: ['tiny'], steps: 3, threads: [1, 2] });
    expect(r.rows.map((x) => [x.engine, x.threads])).toEqual([
      ['js', 1],
      ['wasm', 1],
      ['wasm', 2],
    ]);
    for (const x of r.rows) {
      expect(x.tokensPerSec).toBeGreaterThan(0);
      expect(x.gflops).toBeGreaterThan(0);
      expect(x.tokensPerSec * x.msPerStep).toBeCloseTo(x.batch * x.seqLen * 1000, 0);
    }
    expect(r.rows[0].vsJs).toBe(1);
    expect(r.rows[1].vsJs).toBeGreaterThan(2); // 7-10× measured here on tiny, loaded or not
    // the time per op: every kernel of the step; timed inside the profiled steps, their sum is most of those
    for (const x of r.rows.slice(1)) {
      const ops = x.ops!;
      expect(ops.map((o) => o.kernel)).toEqual(expect.arrayContaining(['gemm', 'attentionForward', 'adamw']));
      expect(ops.every((o, i) => i === 0 || o.msPerStep <= ops[i - 1].msPerStep)).toBe(true);
      const sum = ops.reduce((a, o) => a + o.msPerStep, 0);
      expect(sum).toBeLessThanOrEqual(x.profiledMsPerStep!);
      expect(sum).toBeGreaterThan(0.5 * x.profiledMsPerStep!);
    }
    expect(r.rows[0].ops).toBeUndefined();
    expect(r.rows[0].profiledMsPerStep).toBeUndefined();
    expect(r.load.cpus).toBeGreaterThan(0);
    expect(r.load.after).toBeGreaterThanOrEqual(0);
  }, 120_000);
});
