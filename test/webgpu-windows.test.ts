// Binding windows (issue 37): each dispatch binds only the range of a parameter buffer it touches, and the
// dispatches over all of wte or θ split into windows under the binding limit (webgpu-plan.ts, webgpu-step.ts).
// - the windows of a GPT-2-shaped config (V = 50,257, C = 32) under 768 KiB: wte (6.4 MB) and θ (6.5 MB) in 9 each;
// - an engine (V = 4,099, C = 32: GPT-2's head at a size SwiftShader steps in a second, where V = 50,257 took 10 s)
//   under a forced 96 KiB binding limit, where wte (513 KiB) and θ take 6 and 7 windows, against the CPU reference
//   (losses, θ), and bit for bit against the same engine without a forced limit (θ, the Adam moments, Δ, losses);
// - f16 alike, in micro-batches of 1 (V = 4,000 under 64 KiB): θ, Δ and the eval loss bit for bit;
// - requiredLimits: at most the forced limit; a limit below the largest unsplittable range refused, naming it;
// - GPT-2 124M's plan under a 128 MiB binding limit (no GPU).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JsEngine } from '../core/engine/js.ts';
import { type GPTConfig, PRESETS, paramLayout } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import {
  type WebGpuEngineOptions,
  checkAdapterFits,
  estimateGpuBytes,
  limitShortfall,
  memoryPlan,
  plan,
  requiredLimits,
} from '../client/island/engine/webgpu-plan.ts';
import { WebGpuEngine } from '../client/island/engine/webgpu.ts';
import { flatPieces } from '../shaders/kernel.ts';
import { vocabWindows } from '../shaders/ops.ts';
import {
  bitsHash as hash,
  getTestDevice,
  limitsOf,
  maxRelErr,
  releaseTestDevice,
  vocabBatch as batch,
} from './helpers/gpu.ts';

const TOL = 1e-3; // an engine against the CPU reference (as test/webgpu-head.test.ts)
const KiB = 1024,
  MiB = 2 ** 20;

const config: GPTConfig = { vocabSize: 50257, blockSize: 16, nLayer: 2, nHead: 2, nEmbd: 32 };
const base: WebGpuEngineOptions = { config, maxBatch: 2, headChunk: 2048, lossReadEvery: 4 };
const LIMIT = 768 * KiB;
const windowed: WebGpuEngineOptions = { ...base, maxBindingBytes: LIMIT };
// the engines': GPT-2's head and layout, a few thousand ids
const small: GPTConfig = { ...config, vocabSize: 4099 };
const smallBase: WebGpuEngineOptions = { ...base, config: small, headChunk: 512 };
const SMALL_LIMIT = 96 * KiB;
const f16Config: GPTConfig = { ...config, vocabSize: 4000 };
// in micro-batches of 1: the accumulating program's windows too
const f16Base: WebGpuEngineOptions = { ...base, config: f16Config, headChunk: 512, precision: 'f16', microBatch: 1 };
const F16_LIMIT = 64 * KiB;

let device: GPUDevice;

beforeAll(async () => {
  // a device that could bind every buffer whole: the windows are the engine's own
  ({ device } = await getTestDevice({ requiredLimits: requiredLimits(base), optionalFeatures: ['subgroups'] }));
});
afterAll(async () => {
  await releaseTestDevice();
});

describe('windows under a forced binding limit', () => {
  it('split wte and θ into windows under the limit, the per-tensor ranges whole', () => {
    const N = paramLayout(config).total;
    const p = plan(windowed);
    expect(p.windows.vocab.length).toBe(9);
    expect(p.windows.pieces.length).toBe(9);
    expect(p.windows.vocab[0][0]).toBe(0);
    expect(p.windows.vocab.at(-1)![1]).toBe(config.vocabSize);
    expect(p.windows.pieces.at(-1)![1]).toBe(N);
    for (const [lo, hi] of p.windows.vocab) expect((hi - lo) * 4 * config.nEmbd + 256).toBeLessThanOrEqual(LIMIT);
    expect(p.storage.get('params')).toBeGreaterThan(8 * LIMIT); // the buffers themselves stay whole
    const m = memoryPlan(windowed);
    expect(m).toMatchObject({ bindingLimit: LIMIT, vocabWindows: 9, thetaPieces: 9 });
    expect(m.largestWindow).toBeLessThanOrEqual(LIMIT);
    expect(m.largestBuffer).toBeGreaterThan(8 * LIMIT);
    const whole = memoryPlan(base);
    expect(whole).toMatchObject({ bindingLimit: null, vocabWindows: 1, thetaPieces: 1 });
    expect(whole.largestWindow).toBe(whole.largestBuffer);
    expect(vocabWindows(100, 4, 0)).toEqual([[0, 100]]);
    expect(flatPieces([[0, 1000]], 1024)).toEqual([
      [0, 256],
      [256, 512],
      [512, 768],
      [768, 1000],
    ]);
  });

  it('requiredLimits asks for at most the limit; maxBufferSize still the largest buffer', () => {
    const need = requiredLimits(windowed);
    expect(need.maxStorageBufferBindingSize).toBeLessThanOrEqual(LIMIT);
    expect(need.maxBufferSize).toBe(plan(windowed).storage.get('params'));
    expect(requiredLimits(base).maxStorageBufferBindingSize).toBe(plan(base).storage.get('params'));
    expect(limitShortfall(need, device.limits, windowed, 'device').ok).toBe(true);
  });

  it('refuses a limit below the largest unsplittable range, naming the limit', async () => {
    // the head's 2048 rows of logits (B·T = 32) and of wte are 256 KiB each: no window splits them
    const tight: WebGpuEngineOptions = { ...base, maxBindingBytes: 64 * KiB };
    expect(requiredLimits(tight).maxStorageBufferBindingSize).toBe(256 * KiB);
    const r = limitShortfall(requiredLimits(tight), device.limits, tight, 'device');
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.code).toBe('E_ADAPTER_TOO_SMALL');
      expect(r.error.message).toMatch(/^maxStorageBufferBindingSize: model needs 256 KiB/);
      expect(r.error.message).toContain('the binding limit (maxBindingBytes) is 64 KiB');
    }
    await expect(WebGpuEngine.create(device, tight)).rejects.toMatchObject({ code: 'E_ADAPTER_TOO_SMALL' });
    // an adapter whose own limit is that small: the same refusal
    const small = { limits: { ...limitsOf(device), maxStorageBufferBindingSize: 64 * KiB } } as unknown as GPUAdapter;
    const fits = checkAdapterFits(small, base);
    expect(fits.ok).toBe(false);
    if (!fits.ok) expect(fits.error.message).toContain('adapter allows 64 KiB');
    // and one that allows the windows' 768 KiB fits
    const enough = { limits: { ...limitsOf(device), maxStorageBufferBindingSize: LIMIT } } as unknown as GPUAdapter;
    expect(checkAdapterFits(enough, base).ok).toBe(true);
  });

  it('3 AdamW steps: losses and θ as the CPU reference, and bit for bit as without windows', async () => {
    const init = initParams(small, 2024);
    const ref = new JsEngine(smallBase);
    const [win, bound] = await boundBytes(() =>
      WebGpuEngine.create(device, { ...smallBase, maxBindingBytes: SMALL_LIMIT }),
    );
    const [whole, boundWhole] = await boundBytes(() => WebGpuEngine.create(device, smallBase));
    try {
      // every storage binding the windowed engine made is within the limit; without it θ is bound whole
      expect(bound).toBeGreaterThan(SMALL_LIMIT / 2);
      expect(bound).toBeLessThanOrEqual(SMALL_LIMIT);
      expect(boundWhole).toBe(whole.memory.largestBuffer);
      // what it allocates is what the windowed plan says (the carry of the grad norm's pieces, their uniforms)
      expect(win.gpuBytes).toBe(estimateGpuBytes({ ...smallBase, maxBindingBytes: SMALL_LIMIT }));
      expect(win.memory.total).toBe(win.gpuBytes);
      expect(win.memory).toMatchObject({ bindingLimit: SMALL_LIMIT, vocabWindows: 6, thetaPieces: 7 });
      expect(win.memory.largestWindow).toBeLessThanOrEqual(SMALL_LIMIT);
      expect(win.memory.largestBuffer).toBeGreaterThan(5 * SMALL_LIMIT);
      expect(whole.memory).toMatchObject({ vocabWindows: 1, thetaPieces: 1 });
      for (const e of [ref, win, whole]) await e.setParams(init);
      device.pushErrorScope('validation');
      for (let s = 0; s < 3; s++) {
        const bt = batch(2, small.blockSize, 500 + s, small.vocabSize);
        // a small clip norm: the clip scale (from the grad norm's pieces) matters to θ
        for (const e of [ref, win, whole]) await e.step(bt, { lr: 3e-3, gradClip: 0.5 });
      }
      expect(await device.popErrorScope()).toBeNull();
      const [lr, lw, lh] = [await ref.takeLosses(), await win.takeLosses(), await whole.takeLosses()];
      expect(lw).toEqual(lh);
      lw.forEach((l, i) => expect(Math.abs(l - lr[i]) / lr[i]).toBeLessThanOrEqual(TOL));
      const [pw, ph, pr] = [await win.getParams(), await whole.getParams(), await ref.getParams()];
      expect(hash(pw)).toBe(hash(ph));
      for (const t of paramLayout(small).tensors) {
        const { abs } = maxRelErr(pw.subarray(t.offset, t.offset + t.size), pr.subarray(t.offset, t.offset + t.size));
        expect(abs, `θ ${t.name}`).toBeLessThanOrEqual(TOL);
      }
      expect(Math.abs(pw[0] - init[0])).toBeGreaterThan(0); // θ moved
      const [ow, oh] = [await win.getOptimizerState(), await whole.getOptimizerState()];
      expect(hash(ow.m)).toBe(hash(oh.m));
      expect(hash(ow.v)).toBe(hash(oh.v));
      expect(hash(await win.readDelta())).toBe(hash(await whole.readDelta()));
      const ev = batch(2, small.blockSize, 77, small.vocabSize);
      expect(await win.evalLoss(ev)).toBe(await whole.evalLoss(ev));
    } finally {
      win.destroy();
      whole.destroy();
    }
  });

  it('f16 in micro-batches (V = 4,000 under 64 KiB): θ, the weight copy and Δ bit for bit as without', async () => {
    const opts: WebGpuEngineOptions = { ...f16Base, maxBindingBytes: F16_LIMIT };
    const m = memoryPlan(opts);
    expect(m.vocabWindows).toBeGreaterThan(1);
    expect(m.thetaPieces).toBeGreaterThan(1);
    expect(m.largestWindow).toBeLessThanOrEqual(F16_LIMIT);
    const init = initParams(f16Config, 31);
    const [win, bound] = await boundBytes(() => WebGpuEngine.create(device, opts));
    const whole = await WebGpuEngine.create(device, f16Base);
    try {
      expect(bound).toBeLessThanOrEqual(F16_LIMIT);
      for (const e of [win, whole]) await e.setParams(init);
      for (let s = 0; s < 3; s++) {
        const bt = batch(2, f16Config.blockSize, 600 + s, f16Config.vocabSize);
        for (const e of [win, whole]) await e.step(bt, { lr: 3e-3, gradClip: 0.5 });
      }
      const [lw, lh] = [await win.takeLosses(), await whole.takeLosses()];
      expect(lw).toEqual(lh);
      expect(hash(await win.getParams())).toBe(hash(await whole.getParams()));
      expect(hash(await win.readDelta())).toBe(hash(await whole.readDelta()));
      // the weight copy (packed in pieces after setParams) feeds the forward: the eval losses agree
      for (const e of [win, whole]) await e.setParams(init);
      const ev = batch(2, f16Config.blockSize, 78, f16Config.vocabSize);
      expect(await win.evalLoss(ev)).toBe(await whole.evalLoss(ev));
    } finally {
      win.destroy();
      whole.destroy();
    }
  });
});

describe('GPT-2 124M under a 128 MiB binding limit (planning only)', () => {
  it('needs at most 128 MiB bound at once, where whole buffers needed its 475 MiB θ', () => {
    const gpt2: WebGpuEngineOptions = { config: PRESETS.gpt2, maxBatch: 1 };
    const limited = { ...gpt2, maxBindingBytes: 128 * MiB };
    const before = requiredLimits(gpt2),
      after = requiredLimits(limited);
    expect(before.maxStorageBufferBindingSize).toBe(plan(gpt2).storage.get('params'));
    expect(before.maxStorageBufferBindingSize).toBeGreaterThan(470 * MiB);
    expect(after.maxStorageBufferBindingSize).toBeLessThanOrEqual(128 * MiB);
    expect(after.maxBufferSize).toBe(before.maxBufferSize);
    const m = memoryPlan(limited);
    expect(m.largestWindow).toBeLessThanOrEqual(128 * MiB);
    expect(m.vocabWindows).toBe(2); // wte: 147 MiB
    expect(m.thetaPieces).toBe(4); // θ: 475 MiB
    console.log(
      'gpt2 binding:',
      JSON.stringify({
        beforeMiB: before.maxStorageBufferBindingSize / MiB,
        afterMiB: after.maxStorageBufferBindingSize / MiB,
        largestWindowAt: m.largestWindowAt,
        at64MiB: requiredLimits({ ...gpt2, maxBindingBytes: 64 * MiB }).maxStorageBufferBindingSize / MiB,
      }),
    );
  });
});

/** What `make` returns, and the largest storage buffer range any bind group it created binds (bytes). */
async function boundBytes<T>(make: () => Promise<T>): Promise<[T, number]> {
  const create = device.createBindGroup;
  let most = 0;
  device.createBindGroup = (desc: GPUBindGroupDescriptor) => {
    for (const e of desc.entries) {
      const r = e.resource as GPUBufferBinding;
      if (r.buffer && r.buffer.usage & GPUBufferUsage.STORAGE)
        most = Math.max(most, r.size ?? r.buffer.size - (r.offset ?? 0));
    }
    return create.call(device, desc);
  };
  try {
    return [await make(), most];
  } finally {
    device.createBindGroup = create;
  }
}
