// θ's flat buffers over several GPUBuffers (issue 37, "splits what exceeds a device's limit"): where θ, its
// gradients, the Adam moments, the round's start (and f16's weight copy) exceed the buffer limit, each is made of
// several GPUBuffers cut between tensors, every window bound in the buffer that holds it (webgpu-plan.ts, kernel.ts).
// - the cut of a small GPT-2-shaped config (V = 512, C = 64, θ 523 KiB) under a forced 160 KiB: 4 buffers, whole
//   tensors, a LayerNorm's weight and bias together, the pieces of θ inside them;
// - an engine under that limit (and a 64 KiB binding limit: pieces inside the buffers) against the CPU reference
//   (losses, θ), and bit for bit against the same engine without limits (losses, θ, m, v, Δ, eval loss, the
//   gradients read back and written for several devices), what it allocated checked: 4 GPUBuffers for each flat
//   buffer, every buffer within the limit;
// - f16 under the limit alone (pieces = buffers): the weight copy and Δ (halves) in 4 buffers, bit for bit;
// - a limit below one tensor (wte, 128 KiB) refused with E_ADAPTER_TOO_SMALL naming it, before anything is allocated;
// - GPT-2 124M's plan under the WebGPU default maxBufferSize of 256 MiB (no GPU).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JsEngine } from '../core/engine/js.ts';
import { type GPTConfig, PRESETS, paramLayout } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { mulberry32 } from '../core/random.ts';
import {
  type WebGpuEngineOptions,
  checkAdapterFits,
  estimateGpuBytes,
  limitShortfall,
  memoryPlan,
  plan,
  requiredLimits,
} from '../client/island/engine/webgpu-plan.ts';
import { bufferParts } from '../client/island/engine/webgpu-step.ts';
import { WebGpuEngine } from '../client/island/engine/webgpu.ts';
import { bitsHash as hash, getTestDevice, limitsOf, maxRelErr, releaseTestDevice, vocabBatch } from './helpers/gpu.ts';

const TOL = 1e-3; // an engine against the CPU reference (as test/webgpu-windows.test.ts)
const KiB = 1024,
  MiB = 2 ** 20;

const config: GPTConfig = { vocabSize: 512, blockSize: 16, nLayer: 2, nHead: 2, nEmbd: 64 };
const base: WebGpuEngineOptions = { config, maxBatch: 2, headChunk: 128, lossReadEvery: 4 };
const LIMIT = 160 * KiB;
const split: WebGpuEngineOptions = { ...base, maxBufferBytes: LIMIT, maxBindingBytes: 64 * KiB };
const FLAT = ['params', 'grads', 'm', 'v', 'start'];
const layout = paramLayout(config);

let device: GPUDevice;

beforeAll(async () => {
  // a device that could hold every buffer whole: the split is the engine's own
  ({ device } = await getTestDevice({ requiredLimits: requiredLimits(base) }));
});
afterAll(async () => {
  await releaseTestDevice();
});

const batch = (B: number, T: number, seed: number) => vocabBatch(B, T, seed, config.vocabSize);

/** What `make` returns, and every buffer the device created meanwhile (label, bytes). */
async function allocated<T>(make: () => Promise<T>): Promise<[T, Array<{ label: string; size: number }>]> {
  const create = device.createBuffer;
  const made: Array<{ label: string; size: number }> = [];
  device.createBuffer = (desc: GPUBufferDescriptor) => {
    made.push({ label: desc.label ?? '', size: desc.size });
    return create.call(device, desc);
  };
  try {
    return [await make(), made];
  } finally {
    device.createBuffer = create;
  }
}

describe('θ split over GPUBuffers under a forced buffer limit', () => {
  it('cuts θ between tensors into 4 buffers within the limit, the pieces of θ inside them', () => {
    const parts = bufferParts(config, LIMIT);
    expect(parts).toEqual([
      [0, layout.byName.qkvw.offset], // wte, wpe, ln1w, ln1b: 133 KiB
      [layout.byName.qkvw.offset, layout.byName.fcw.offset],
      [layout.byName.fcw.offset, layout.byName.fcprojw.offset],
      [layout.byName.fcprojw.offset, layout.total],
    ]);
    const starts = new Set(layout.tensors.map((t) => t.offset));
    for (const [lo, hi] of parts) {
      expect(starts.has(lo)).toBe(true);
      expect(4 * (hi - lo)).toBeLessThanOrEqual(LIMIT);
    }
    // a LayerNorm binds its weight and bias in one window: never cut between them
    const tight = bufferParts(config, 4 * (layout.byName.ln1b.offset + 64));
    expect(tight.map((p) => p[0])).not.toContain(layout.byName.ln1b.offset);
    expect(bufferParts(config)).toEqual([[0, layout.total]]);
    const p = plan(split);
    expect(p.windows.parts).toEqual(parts);
    for (const [lo, hi] of p.windows.pieces) expect(parts.some(([a, b]) => a <= lo && hi <= b)).toBe(true);
    expect(p.windows.pieces.length).toBe(12);
    for (const k of FLAT) {
      expect(p.storage.has(k)).toBe(false);
      expect([0, 1, 2, 3].map((i) => p.storage.get(`${k}/${i}`))).toEqual(parts.map(([lo, hi]) => 4 * (hi - lo)));
    }
    const m = memoryPlan(split);
    expect(m).toMatchObject({ bufferLimit: LIMIT, thetaBuffers: 4, thetaPieces: 12 });
    expect(m.largestBuffer).toBeLessThanOrEqual(LIMIT);
    expect(m.bytes.parameters).toBe(memoryPlan(base).bytes.parameters);
    expect(memoryPlan(base)).toMatchObject({ bufferLimit: null, thetaBuffers: 1 });
    // requiredLimits asks for the largest buffer made, no longer the whole θ
    expect(requiredLimits(split).maxBufferSize).toBe(m.largestBuffer);
    expect(requiredLimits(base).maxBufferSize).toBe(4 * layout.total);
  });

  it('2 AdamW steps: as the CPU reference, bit for bit as without limits; 4 buffers each, all within the limit', async () => {
    const init = initParams(config, 7);
    const r = mulberry32(3);
    const moments = () => Float32Array.from({ length: layout.total }, () => 1e-3 * r());
    const state = { m: moments(), v: moments(), step: 2 };
    const ref = new JsEngine(base);
    const [cut, made] = await allocated(() => WebGpuEngine.create(device, split));
    const whole = await WebGpuEngine.create(device, base);
    try {
      // what it allocated: each flat buffer as 4 GPUBuffers of its parts, none whole, every buffer within the limit
      for (const k of FLAT) {
        expect(made.filter((b) => b.label.startsWith(`${k}/`)).map((b) => b.size)).toEqual(
          plan(split).windows.parts.map(([lo, hi]) => 4 * (hi - lo)),
        );
        expect(made.some((b) => b.label === k)).toBe(false);
      }
      expect(Math.max(...made.map((b) => b.size))).toBeLessThanOrEqual(LIMIT);
      expect(cut.gpuBytes).toBe(estimateGpuBytes(split));
      expect(cut.memory).toMatchObject({ thetaBuffers: 4, bufferLimit: LIMIT });
      expect(whole.memory.thetaBuffers).toBe(1);
      // θ and the moments written a buffer at a time
      for (const e of [ref, cut, whole]) {
        await e.setParams(init);
        await e.setOptimizerState(state);
      }
      device.pushErrorScope('validation');
      for (let s = 0; s < 2; s++) {
        const bt = batch(2, config.blockSize, 40 + s);
        for (const e of [ref, cut, whole]) await e.step(bt, { lr: 3e-3, gradClip: 0.5 });
      }
      expect(await device.popErrorScope()).toBeNull();
      const [lr, lc, lw] = [await ref.takeLosses(), await cut.takeLosses(), await whole.takeLosses()];
      expect(lc).toEqual(lw);
      lc.forEach((l, i) => expect(Math.abs(l - lr[i]) / lr[i]).toBeLessThanOrEqual(TOL));
      const [pc, pw, pr] = [await cut.getParams(), await whole.getParams(), await ref.getParams()];
      expect(hash(pc)).toBe(hash(pw));
      for (const t of layout.tensors) {
        const { abs } = maxRelErr(pc.subarray(t.offset, t.offset + t.size), pr.subarray(t.offset, t.offset + t.size));
        expect(abs, `θ ${t.name}`).toBeLessThanOrEqual(TOL);
      }
      expect(pc[layout.total - 1]).not.toBe(init[layout.total - 1]); // the last buffer's θ moved
      const [oc, ow] = [await cut.getOptimizerState(), await whole.getOptimizerState()];
      expect(hash(oc.m)).toBe(hash(ow.m));
      expect(hash(oc.v)).toBe(hash(ow.v));
      expect(hash(await cut.readDelta())).toBe(hash(await whole.readDelta()));
      const ev = batch(2, config.blockSize, 77);
      expect(await cut.evalLoss(ev)).toBe(await whole.evalLoss(ev));
      // several devices' path: the gradients read back and written a buffer at a time
      const bt = batch(2, config.blockSize, 50);
      const sums = [new Float32Array(layout.total), new Float32Array(layout.total)];
      for (const [i, e] of [cut, whole].entries()) {
        e.gradientsStep(bt, { lr: 3e-3, gradClip: 0.5 });
        await e.addGradientsInto(sums[i], 1);
      }
      expect(hash(sums[0])).toBe(hash(sums[1]));
      for (const e of [cut, whole]) e.applyGradients(sums[0]);
      expect(hash(await cut.getParams())).toBe(hash(await whole.getParams()));
      await cut.resetOptimizerState();
      expect((await cut.getOptimizerState()).v.every((x) => x === 0)).toBe(true);
    } finally {
      cut.destroy();
      whole.destroy();
    }
  });

  it('f16: the weight copy and Δ (halves) in 4 buffers, bit for bit as without', async () => {
    const f16: WebGpuEngineOptions = { ...base, precision: 'f16' };
    const init = initParams(config, 8);
    const [cut, made] = await allocated(() => WebGpuEngine.create(device, { ...f16, maxBufferBytes: LIMIT }));
    const whole = await WebGpuEngine.create(device, f16);
    try {
      expect(made.filter((b) => b.label.startsWith('wcopy/')).length).toBe(4);
      expect(Math.max(...made.map((b) => b.size))).toBeLessThanOrEqual(LIMIT);
      for (const e of [cut, whole]) await e.setParams(init);
      for (let s = 0; s < 2; s++) {
        const bt = batch(2, config.blockSize, 60 + s);
        for (const e of [cut, whole]) await e.step(bt, { lr: 3e-3, gradClip: 0.5 });
      }
      expect(await cut.takeLosses()).toEqual(await whole.takeLosses());
      expect(hash(await cut.getParams())).toBe(hash(await whole.getParams()));
      const [dc, dw] = [await cut.readDelta(), await whole.readDelta()];
      expect(hash(dc)).toBe(hash(dw));
      expect(dc[layout.total - 1]).not.toBe(0); // Δ of the last buffer's tensors came back
      // the weight copy (packed a piece at a time after setParams) feeds the forward
      for (const e of [cut, whole]) await e.setParams(init);
      const ev = batch(2, config.blockSize, 78);
      expect(await cut.evalLoss(ev)).toBe(await whole.evalLoss(ev));
    } finally {
      cut.destroy();
      whole.destroy();
    }
  });

  it('refuses a limit below one tensor (wte, 128 KiB) with E_ADAPTER_TOO_SMALL, before allocating', async () => {
    const tight: WebGpuEngineOptions = { ...base, maxBufferBytes: 100 * KiB };
    const r = limitShortfall(requiredLimits(tight), device.limits, tight, 'device');
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.code).toBe('E_ADAPTER_TOO_SMALL');
      expect(r.error.message).toMatch(
        /^maxBufferSize: model needs 128 KiB, the buffer limit \(maxBufferBytes\) is 100 KiB/,
      );
      expect(r.error.message).toContain("unsplittable: θ's tensor wte (params/0); try a smaller model)");
    }
    const [made, buffers] = await allocated(() =>
      WebGpuEngine.create(device, tight).then(
        () => null,
        (e: unknown) => e,
      ),
    );
    expect(made).toMatchObject({ code: 'E_ADAPTER_TOO_SMALL' });
    expect(buffers).toEqual([]);
    // an adapter whose own maxBufferSize is that small: the same refusal; one of 160 KiB fits, split
    const adapter = (maxBufferSize: number) =>
      ({ limits: { ...limitsOf(device), maxBufferSize } }) as unknown as GPUAdapter;
    const small = checkAdapterFits(adapter(100 * KiB), base);
    expect(small.ok).toBe(false);
    if (!small.ok) expect(small.error.message).toContain('adapter allows 100 KiB');
    expect(checkAdapterFits(adapter(LIMIT), base).ok).toBe(true);
  });
});

describe('GPT-2 124M under the WebGPU default maxBufferSize (planning only)', () => {
  it('asks for at most 256 MiB a buffer, where one θ buffer needed 475 MiB; 128 MiB is below wte', () => {
    const gpt2: WebGpuEngineOptions = { config: PRESETS.gpt2, maxBatch: 1 };
    const limited = { ...gpt2, maxBufferBytes: 256 * MiB, maxBindingBytes: 128 * MiB };
    const before = requiredLimits(gpt2).maxBufferSize,
      after = requiredLimits(limited).maxBufferSize;
    expect(before).toBe(4 * paramLayout(PRESETS.gpt2).total);
    expect(after).toBeLessThanOrEqual(256 * MiB);
    const m = memoryPlan(limited);
    expect(m.thetaBuffers).toBe(2);
    const tooSmall = { ...limited, maxBufferBytes: 128 * MiB };
    const r = limitShortfall(requiredLimits(tooSmall), limitsOf(device) as never, tooSmall, 'device');
    expect(!r.ok && r.error.message).toContain("θ's tensor wte");
    console.log(
      'gpt2 buffers:',
      JSON.stringify({
        beforeMiB: before / MiB,
        afterMiB: after / MiB,
        thetaBuffers: m.thetaBuffers,
        thetaPieces: m.thetaPieces,
        largestBufferAt: m.largestBufferAt,
        largestWindowMiB: m.largestWindow / MiB,
        totalMiB: m.total / MiB,
        wholeTotalMiB: memoryPlan(gpt2).total / MiB,
      }),
    );
  });
});
