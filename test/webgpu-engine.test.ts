// The whole model on the GPU against the CPU reference (PRESETS.tiny): loss and every
// parameter's gradient vs GPT (core/model/gpt.ts), 10 AdamW steps vs JsEngine, Δ,
// eval, sampling logits, one submission per step, and the adapter-limit errors.
// Loss and gradients: error per tensor = max|gpu − cpu| / max|cpu| (normwise relative) ≤ 1e-3.
// Parameters after AdamW: max |gpu − cpu| ≤ 1e-3 per element (absolute). Adam divides each
// gradient by its own running RMS, so an element whose true gradient is ~0 (e.g. the key
// bias: softmax ignores a per-row constant) moves by ±lr·(rounding noise)/(noise+eps) on
// either engine; a relative measure is meaningless there. 1e-3 is 3% of 10·lr.
// SwiftShader runs barrier kernels slowly, so the batches here are small (B ≤ 4).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEXT, textBatch } from './helpers/batches.ts';
import { type GPTConfig, PRESETS, mfu, paramLayout } from '../core/model/config.ts';
import { GPT, initParams } from '../core/model/gpt.ts';
import { JsEngine } from '../core/engine/js.ts';
import {
  WebGpuEngine,
  checkAdapterFits,
  estimateGpuBytes,
  requiredLimits,
  type WebGpuEngineOptions,
} from '../client/island/engine/webgpu.ts';
import { getTestDevice, maxRelErr, releaseTestDevice } from './helpers/gpu.ts';
import { KernelSet } from '../client/island/engine/webgpu-kernels.ts';
import {
  TILE_VARIANTS,
  autotuneMatmuls,
  choiceLabel,
  modelMatmuls,
  tuneCacheKey,
  tuneKey,
} from '../client/island/engine/webgpu-tune.ts';

const TOL = 1e-3;
const config: GPTConfig = PRESETS.tiny;
const opts: WebGpuEngineOptions = { config, maxBatch: 4, lossReadEvery: 4 };
const init = initParams(config, 1234);
const report: Record<string, number> = {};

const batch = textBatch;

function compareTensors(what: string, got: Float32Array, want: Float32Array, measure: 'rel' | 'abs' = 'rel'): number {
  let worst = 0;
  for (const t of paramLayout(config).tensors) {
    const e = maxRelErr(got.subarray(t.offset, t.offset + t.size), want.subarray(t.offset, t.offset + t.size))[measure];
    expect(e, `${what} ${t.name}: ${measure} err ${e}`).toBeLessThanOrEqual(TOL);
    worst = Math.max(worst, e);
  }
  report[what] = worst;
  return worst;
}

let device: GPUDevice;
let adapter: GPUAdapter;
let engine: WebGpuEngine;
// the autotuner's cache: the engine under test runs the variants it chose
const tuneCache = new Map<string, string>();
const cache = { get: (k: string) => tuneCache.get(k) ?? null, set: (k: string, v: string) => void tuneCache.set(k, v) };

beforeAll(async () => {
  const gpu = await getTestDevice({ requiredLimits: requiredLimits(opts), optionalFeatures: ['timestamp-query'] });
  device = gpu.device;
  adapter = gpu.adapter;
  const t0 = performance.now();
  engine = await WebGpuEngine.create(device, { ...opts, adapterInfo: gpu.info.description, peakTflops: 2 });
  report.createMs = Math.round(performance.now() - t0);
});

afterAll(async () => {
  engine?.destroy();
  console.log(
    'webgpu engine vs CPU:',
    JSON.stringify(report, (_, v) => (typeof v === 'number' && v < 1 ? Number(v.toExponential(2)) : v)),
  );
  await releaseTestDevice();
});

describe('WebGpuEngine on tiny', () => {
  it('autotunes every matmul once, then reads the choices from the cache', async () => {
    // the qkv forward of tiny, timed without a budget: every variant (default tile vec4 and scalar, each other tile), cached
    const rows = opts.maxBatch * config.blockSize;
    const qkv = { pass: 'fwd', C: config.nEmbd, OC: 3 * config.nEmbd } as const;
    const first = await autotuneMatmuls(device, KernelSet.for(device), [qkv], rows, {
      adapter: engine.device,
      cache,
      budgetMs: Infinity,
    });
    expect(first.report[0].from).toBe('timed');
    const variants = ['vec4', 'scalar', ...TILE_VARIANTS.map((tile) => choiceLabel({ vec4: true, splitK: 1, tile }))];
    expect(Object.keys(first.report[0].ms!).sort()).toEqual(variants.sort());
    expect(tuneCache.size).toBe(1 + variants.length); // the choice and each variant's time
    // an engine start past its budget: the cached shape is read, the 14 others keep the default, one variant of the next is timed and cached
    const again = await WebGpuEngine.create(device, {
      ...opts,
      adapterInfo: engine.device,
      autotune: { cache, budgetMs: -1 },
    });
    const report = again.tuning!.report; // 5 layers × fwd, dX, dW
    expect(report.length).toBe(15);
    expect(report.find((r) => r.shape === tuneKey(qkv))).toMatchObject({
      from: 'cache',
      chosen: first.report[0].chosen,
    });
    expect(report.filter((r) => r.from === 'default').length).toBe(14);
    expect(tuneCache.size).toBe(1 + variants.length + 1);
    again.destroy();
    const untuned = await WebGpuEngine.create(device, { ...opts, adapterInfo: engine.device });
    expect(untuned.tuning).toBeNull();
    untuned.destroy();
  });

  it('starts past their budget time one variant each, cached, until the shape has its choice', async () => {
    const rows = opts.maxBatch * config.blockSize;
    const qkv = { pass: 'fwd', C: config.nEmbd, OC: 3 * config.nEmbd } as const;
    const store = new Map<string, string>();
    const partial = { get: (k: string) => store.get(k) ?? null, set: (k: string, v: string) => void store.set(k, v) };
    const n = 2 + TILE_VARIANTS.length; // vec4, scalar and each tile
    for (let start = 1; start <= n; start++) {
      const r = (
        await autotuneMatmuls(device, KernelSet.for(device), [qkv], rows, {
          adapter: 'budget-test',
          cache: partial,
          budgetMs: 0,
        })
      ).report[0];
      expect(Object.keys(r.ms!).length).toBe(start);
      expect(r.from).toBe(start < n ? 'default' : 'timed');
    }
    expect(store.get(tuneCacheKey('budget-test', rows, qkv))).toBeTruthy();
  });

  it('an engine on the other tiles (every matmul from the cache) trains like the CPU: 3 AdamW steps', async () => {
    const rows = opts.maxBatch * config.blockSize;
    const chosen = new Map<string, string>();
    modelMatmuls(config.nEmbd, config.vocabSize).forEach((s, i) => {
      chosen.set(
        tuneCacheKey(engine.device, rows, s),
        JSON.stringify({
          vec4: s.C % 4 === 0 && s.OC % 4 === 0,
          splitK: 1,
          tile: TILE_VARIANTS[i % TILE_VARIANTS.length],
        }),
      );
    });
    const tuned = await WebGpuEngine.create(device, {
      ...opts,
      adapterInfo: engine.device,
      autotune: { cache: { get: (k) => chosen.get(k) ?? null, set: () => {} }, budgetMs: -1 },
    });
    const cpu = new JsEngine(opts);
    try {
      expect(tuned.tuning!.report.every((r) => r.from === 'cache' && r.chosen.tile)).toBe(true);
      await cpu.setParams(init);
      await tuned.setParams(init);
      for (let s = 0; s < 3; s++) {
        const bt = batch(3, 29, 200 + s);
        await cpu.step(bt, { lr: 3e-3, gradClip: 1 });
        await tuned.step(bt, { lr: 3e-3, gradClip: 1 });
      }
      const want = await cpu.takeLosses(),
        got = await tuned.takeLosses();
      expect(got.length).toBe(3);
      got.forEach((l, i) => expect(Math.abs(l - want[i]) / want[i]).toBeLessThanOrEqual(TOL));
      compareTensors('paramsTiles3', await tuned.getParams(), await cpu.getParams(), 'abs');
    } finally {
      tuned.destroy();
    }
  });

  it('profileStep times every dispatch of a step (timestamp-query); mfu() divides by the given peak', async () => {
    expect(device.features.has('timestamp-query')).toBe(true); // SwiftShader has it
    await engine.setParams(init);
    const times = await engine.profileStep(batch(2, config.blockSize, 5), { lr: 0, gradClip: 1 });
    await engine.takeLosses();
    // the step's dispatches that run at this shape (of 18 + 45·L recorded; split-K alternates are skipped)
    expect(times.length).toBeGreaterThan(10 * config.nLayer);
    expect(times.length).toBeLessThanOrEqual(18 + 45 * config.nLayer);
    expect(times.filter((t) => t.entry === 'attention_forward').length).toBe(config.nLayer);
    for (const t of times) expect(t.ms).toBeGreaterThanOrEqual(0);
    expect(times.reduce((a, t) => a + t.ms, 0)).toBeGreaterThan(0);
    expect(engine.peakFlops).toBe(2e12);
    expect(engine.mfu(1000, config.blockSize)).toBeCloseTo(mfu(config, 1000, 2e12, config.blockSize), 12);
  });

  it('peak GPU bytes: base at batch 8 fits in 1 GiB', () => {
    expect(estimateGpuBytes({ config: PRESETS.base, maxBatch: 8 })).toBeLessThanOrEqual(2 ** 30);
    // --precision f16: every activation but the logits and the weight copy as halves, within 450 MiB
    expect(estimateGpuBytes({ config: PRESETS.base, maxBatch: 8, precision: 'f16' })).toBeLessThanOrEqual(
      450 * 2 ** 20,
    );
  });

  it('allocates what estimateGpuBytes says', () => {
    expect(engine.gpuBytes).toBe(estimateGpuBytes(opts));
    expect(engine.device.length).toBeGreaterThan(0);
  });

  it('loss and every parameter gradient match the CPU model (B=3, T=29)', async () => {
    const bt = batch(3, 29, 7);
    const cpu = new GPT(config, 3, 29);
    cpu.params.set(init);
    const loss = cpu.forward(bt.inputs, bt.targets, 3, 29);
    cpu.backward();

    await engine.setParams(init);
    await engine.resetOptimizerState();
    device.pushErrorScope('validation');
    await engine.step(bt, { lr: 0, gradClip: 1 }); // lr 0: θ stays, the gradients stay readable
    expect(await device.popErrorScope()).toBeNull();
    const [gpuLoss] = await engine.takeLosses();
    report.lossErr = Math.abs(gpuLoss - loss) / Math.abs(loss);
    expect(report.lossErr).toBeLessThanOrEqual(TOL);
    compareTensors('grads', await engine.debugReadGrads(), cpu.grads);
    // lr 0 left θ unchanged
    expect(maxRelErr(await engine.getParams(), init).abs).toBe(0);
  });

  it('10 AdamW steps: losses, final params and Δ match JsEngine', async () => {
    const cpu = new JsEngine(opts);
    await cpu.setParams(init);
    await engine.setParams(init);
    await engine.resetOptimizerState();
    const stepOpts = { lr: 3e-3, gradClip: 1 };
    const submits = countSubmits();
    for (let s = 0; s < 10; s++) {
      const bt = batch(2, config.blockSize, 100 + s);
      await cpu.step(bt, stepOpts);
      submits.reset();
      await engine.step(bt, stepOpts);
      expect(submits.count, 'one queue.submit per step').toBe(1);
    }
    submits.restore();
    const want = await cpu.takeLosses();
    const got = await engine.takeLosses(); // ring of 4: two copied out during the steps, the rest now
    expect(got.length).toBe(10);
    let worst = 0;
    got.forEach((l, i) => {
      worst = Math.max(worst, Math.abs(l - want[i]) / Math.abs(want[i]));
    });
    report.losses10 = worst;
    report.firstLoss = want[0];
    report.lastLoss = want[9];
    expect(worst).toBeLessThanOrEqual(TOL);
    expect(want[9]).toBeLessThan(want[0]);
    compareTensors('params10', await engine.getParams(), await cpu.getParams(), 'abs');
    const [gm, cm] = [await engine.getOptimizerState(), await cpu.getOptimizerState()];
    expect(gm.step).toBe(cm.step);
    compareTensors('adamM10', gm.m, cm.m);
    compareTensors('delta10', await engine.readDelta(), await cpu.readDelta(), 'abs');

    // eval and sampling on the trained θ, with shapes unlike the training one
    const ev = batch(5, 20, 999); // 5 > maxBatch: chunked
    const [gl, cl] = [await engine.evalLoss(ev), await cpu.evalLoss(ev)];
    report.evalLoss = Math.abs(gl - cl) / cl;
    expect(report.evalLoss).toBeLessThanOrEqual(TOL);
    const ctx = TEXT.subarray(5, 5 + 40); // longer than blockSize: the last 32 tokens
    const [gLog, cLog] = [await engine.nextTokenLogits(ctx), await cpu.nextTokenLogits(ctx)];
    report.logits = maxRelErr(gLog, cLog).rel;
    expect(report.logits).toBeLessThanOrEqual(TOL);
  });

  it('rejects bad batches with a code instead of corrupting memory', async () => {
    await expect(engine.step(batch(5, 8, 1), { lr: 0, gradClip: 0 })).rejects.toThrow(/E_BAD_BATCH/);
    const bad = batch(1, 4, 1);
    bad.inputs = new Int32Array([1, 2, 300, 4]);
    await expect(engine.step(bad, { lr: 0, gradClip: 0 })).rejects.toThrow(/E_BAD_BATCH/);
    await expect(engine.setParams(new Float32Array(3))).rejects.toThrow(/E_WRONG_SIZE/);
  });

  it("takeLosses maps only after most of the steps' expected GPU time (no pending map while they run)", async () => {
    const bt = batch(4, config.blockSize, 7),
      stepOpts = { lr: 0, gradClip: 1 };
    await engine.step(bt, stepOpts);
    await engine.takeLosses();
    const t1 = performance.now(); // one step as the engine times it: submitted, then read
    await engine.step(bt, stepOpts);
    await engine.takeLosses();
    const oneStep = performance.now() - t1;
    const mapAsync = GPUBuffer.prototype.mapAsync;
    let mappedAt = 0;
    GPUBuffer.prototype.mapAsync = function (this: GPUBuffer, ...a: Parameters<GPUBuffer['mapAsync']>) {
      mappedAt ||= performance.now();
      return mapAsync.apply(this, a);
    };
    try {
      const t0 = performance.now();
      for (let s = 0; s < 3; s++) await engine.step(bt, stepOpts);
      expect(await engine.takeLosses()).toHaveLength(3);
      // it sleeps until 80 % of 3 × its ms per step; mapping at once would come within the recording's few ms
      expect(mappedAt - t0).toBeGreaterThan(1.2 * oneStep);
    } finally {
      GPUBuffer.prototype.mapAsync = mapAsync;
    }
  });
});

describe('adapter limits', () => {
  const huge: WebGpuEngineOptions = {
    config: { vocabSize: 50000, blockSize: 64, nLayer: 1, nHead: 8, nEmbd: 8192 },
    maxBatch: 1,
  };

  it('checkAdapterFits names the limit the model exceeds', () => {
    expect(checkAdapterFits(adapter, opts).ok).toBe(true);
    const r = checkAdapterFits(adapter, huge);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.error.code).toBe('E_ADAPTER_TOO_SMALL');
    // its bindings fit in windows (the largest, one layer's fc weight, 1 GiB); θ's flat buffer (4.6 GiB) does not
    expect(r.error.message).toMatch(/^maxBufferSize: model needs [\d.]+ MiB, adapter allows [\d.]+ MiB/);
    const bad = checkAdapterFits(adapter, { config, maxBatch: 0 });
    expect(bad.ok ? null : bad.error.code).toBe('E_BAD_CONFIG');
    // attention holds rows as vec4s: a head size of 6 is refused in f32 too
    const oddHeads = checkAdapterFits(adapter, { config: { ...config, nEmbd: 12, nHead: 2 }, maxBatch: 1 });
    expect(oddHeads.ok ? null : oddHeads.error.message).toMatch(/head size .* multiple of 4, got 6/);
  });

  it('create() on a device without the limits rejects with E_ADAPTER_TOO_SMALL (no crash, nothing allocated)', async () => {
    // the shared device was created with tiny's limits, i.e. the 128 MiB default binding size
    const big: WebGpuEngineOptions = {
      config: { vocabSize: 40000, blockSize: 64, nLayer: 1, nHead: 8, nEmbd: 1024 },
      maxBatch: 1,
    };
    expect(requiredLimits(big).maxStorageBufferBindingSize).toBeGreaterThan(device.limits.maxStorageBufferBindingSize);
    // binding windows split its wte (156 MiB) and θ: under the device's 128 MiB it would fit
    const windowed = { ...big, maxBindingBytes: device.limits.maxStorageBufferBindingSize };
    expect(requiredLimits(windowed).maxStorageBufferBindingSize).toBeLessThanOrEqual(128 * 2 ** 20);
    // the head in one chunk of all 40,000 rows of wte (156 MiB) is a range no window splits
    await expect(WebGpuEngine.create(device, { ...big, headChunk: 40000 })).rejects.toMatchObject({
      code: 'E_ADAPTER_TOO_SMALL',
      message: expect.stringMatching(/maxStorageBufferBindingSize: model needs [\d.]+ MiB, device allows 128 MiB/),
    });
  });
});

// Last: it destroys the file's device.
describe('device loss', () => {
  it('lost resolves, onLost fires, and the engine refuses work with E_DEVICE_LOST', async () => {
    let seen: { reason: string } | null = null;
    engine.onLost((l) => {
      seen = l;
    });
    device.destroy();
    const l = await engine.lost;
    expect(l.reason).toBe('destroyed');
    expect(seen).toEqual(l);
    await expect(engine.step(batch(1, 8, 1), { lr: 0, gradClip: 0 })).rejects.toThrow(/E_DEVICE_LOST/);
    await expect(engine.getParams()).rejects.toThrow(/E_DEVICE_LOST/);
  });
});

function countSubmits() {
  const q = device.queue;
  const original = q.submit;
  const c = {
    count: 0,
    reset: () => {
      c.count = 0;
    },
    restore: () => {
      q.submit = original;
    },
  };
  q.submit = function (this: GPUQueue, bufs: Iterable<GPUCommandBuffer>) {
    c.count += 1;
    return original.call(this, bufs);
  };
  return c;
}
