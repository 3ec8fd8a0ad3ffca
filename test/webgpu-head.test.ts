// The chunked LM head (issue 37): no (B·T, V) buffer, the logits a vocabulary chunk at a time.
// - head.wgsl against its CPU twins (core/model/ops-head.ts), and the twins over all chunks against
//   the full softmax cross-entropy of core/model/ops.ts, on a V of 203 in chunks of 64 (the last 11 wide);
// - a whole engine with a GPT-2-shaped head, V = 1003 in chunks of 256 (4 chunks, the last 235 wide: not
//   a multiple of 4, on the scalar matmul) against the CPU reference: gradients, 3 AdamW steps, eval and
//   sampling logits, one submission a step; in f16 (V = 1004) against the f16 CPU twins;
// - micro-batches with gradient accumulation against the CPU engine on the whole batch;
// - the memory plan: the head's bytes, and GPT-2's plan against the full head's.
// Errors as test/kernels.test.ts (normwise relative) and test/webgpu-engine.test.ts (θ absolute).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Batch } from '../core/engine/index.ts';
import { JsEngine } from '../core/engine/js.ts';
import { type GPTConfig, PRESETS, paramLayout } from '../core/model/config.ts';
import { GPT, initParams } from '../core/model/gpt.ts';
import * as cpu from '../core/model/ops.ts';
import { HEAD_STATS, crossEntropyChunkBackward, crossEntropyChunkForward } from '../core/model/ops-head.ts';
import { gaussian, mulberry32 } from '../core/random.ts';
import { KernelSet, STEP_UNIFORM_BYTES } from '../client/island/engine/webgpu-kernels.ts';
import {
  HEAD_CHUNK,
  type WebGpuEngineOptions,
  estimateGpuBytes,
  memoryPlan,
  microBatches,
  plan,
  requiredLimits,
} from '../client/island/engine/webgpu-plan.ts';
import { WebGpuEngine } from '../client/island/engine/webgpu.ts';
import * as gpu from '../shaders/ops.ts';
import { getTestDevice, maxRelErr, readF32, releaseTestDevice, runDispatches, upload } from './helpers/gpu.ts';

const RTOL = 1e-4, // a kernel against its twin
  TOL = 1e-3; // an engine against the CPU reference
let device: GPUDevice;
let stepBuf: GPUBuffer;
const report: Record<string, number> = {};

const config: GPTConfig = { vocabSize: 1003, blockSize: 24, nLayer: 2, nHead: 2, nEmbd: 32 };
const opts: WebGpuEngineOptions = { config, maxBatch: 3, headChunk: 256, lossReadEvery: 4 };
const f16Config: GPTConfig = { ...config, vocabSize: 1004 };
const f16Opts: WebGpuEngineOptions = { ...opts, config: f16Config, precision: 'f16' };

beforeAll(async () => {
  const limits = requiredLimits(opts);
  ({ device } = await getTestDevice({ requiredLimits: limits, optionalFeatures: ['subgroups'] }));
  stepBuf = device.createBuffer({ size: STEP_UNIFORM_BYTES, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
});

afterAll(async () => {
  console.log(
    'chunked head:',
    JSON.stringify(report, (_, v) => (typeof v === 'number' && v < 1 ? Number(v.toExponential(2)) : v)),
  );
  await releaseTestDevice();
});

function randn(n: number, seed: number, scale = 1): Float32Array {
  const g = gaussian(mulberry32(seed));
  return Float32Array.from({ length: n }, () => g() * scale);
}

/** Columns [v0, v0 + w) of a (N, V) matrix, as (N, w). */
function columns(a: Float32Array, N: number, V: number, v0: number, w: number): Float32Array {
  const out = new Float32Array(N * w);
  for (let r = 0; r < N; r++) out.set(a.subarray(r * V + v0, r * V + v0 + w), r * w);
  return out;
}

function expectRel(name: string, got: Float32Array, want: Float32Array, tol: number): void {
  const { rel } = maxRelErr(got, want);
  report[name] = Math.max(report[name] ?? 0, rel);
  expect(rel, `${name}: rel err ${rel}`).toBeLessThanOrEqual(tol);
}

describe('head.wgsl: the cross-entropy a vocabulary chunk at a time', () => {
  const N = 3 * 17,
    V = 203,
    chunks = gpu.vocabChunks(V, 64);
  const logits = randn(N * V, 90, 3);
  const r = mulberry32(91);
  const targets = Uint32Array.from({ length: N }, () => Math.floor(r() * V));
  targets[0] = V - 1; // in the ragged last chunk
  targets[1] = 192; // its first id
  targets[2] = 63; // the last id of the first chunk
  const losses = new Float32Array(N),
    probs = new Float32Array(N * V),
    dlogits = new Float32Array(N * V);
  cpu.softmaxCrossEntropyForward(losses, probs, logits, targets, N, 1, V);
  cpu.softmaxCrossEntropyBackward(dlogits, probs, targets, 1 / N, N, 1, V);

  it('splits V into chunks, the last ragged', () => {
    expect(chunks.map((c) => c.width)).toEqual([64, 64, 64, 11]);
    expect(gpu.vocabChunks(256, 8192)).toEqual([{ v0: 0, width: 256 }]);
    expect(gpu.vocabChunks(50257, HEAD_CHUNK).length).toBe(7);
  });

  it('the CPU twins over all chunks give the full losses and dlogits', () => {
    const stats = new Float32Array(N * HEAD_STATS),
      got = new Float32Array(N);
    chunks.forEach((ch, j) => {
      const part = columns(logits, N, V, ch.v0, ch.width);
      crossEntropyChunkForward(stats, got, part, targets, N, ch.v0, ch.width, j === 0, j === chunks.length - 1);
    });
    expectRel('twin losses', got, losses, 1e-6);
    for (const ch of chunks) {
      const part = columns(logits, N, V, ch.v0, ch.width);
      crossEntropyChunkBackward(part, stats, targets, 1 / N, N, ch.v0, ch.width);
      expectRel('twin dlogits', part, columns(dlogits, N, V, ch.v0, ch.width), 1e-5);
    }
  });

  for (const subgroups of [false, true]) {
    it(`ce_chunk_forward and ce_chunk_backward match their twins (${subgroups ? 'subgroup' : 'workgroup'} sums)`, async () => {
      const kernels = new KernelSet(device, { subgroups });
      const shape = { B: 3, T: 17 };
      const parts = chunks.map((ch) => columns(logits, N, V, ch.v0, ch.width));
      const gParts = parts.map((p) => upload(device, p));
      const gStats = upload(device, new Float32Array(N * HEAD_STATS)),
        gLosses = upload(device, new Float32Array(N)),
        gTargets = upload(device, targets);
      const specs = chunks.map((ch, j) =>
        gpu.crossEntropyChunkForward(gStats, gLosses, gParts[j], gTargets, {
          ...ch,
          first: j === 0,
          last: j === chunks.length - 1,
        }),
      );
      await runDispatches(device, kernels, specs, shape, stepBuf);
      const stats = new Float32Array(N * HEAD_STATS),
        want = new Float32Array(N);
      chunks.forEach((ch, j) =>
        crossEntropyChunkForward(stats, want, parts[j], targets, N, ch.v0, ch.width, j === 0, j === chunks.length - 1),
      );
      expectRel('ce_chunk_forward losses', await readF32(device, gLosses, N), want, RTOL);
      expectRel('ce_chunk_forward stats', await readF32(device, gStats, N * HEAD_STATS), stats, RTOL);
      const back = chunks.map((ch, j) => gpu.crossEntropyChunkBackward(gParts[j], gStats, gTargets, ch));
      await runDispatches(device, kernels, back, shape, stepBuf);
      for (const [j, ch] of chunks.entries()) {
        crossEntropyChunkBackward(parts[j], stats, targets, 1 / N, N, ch.v0, ch.width);
        expectRel('ce_chunk_backward', await readF32(device, gParts[j], N * ch.width), parts[j], RTOL);
      }
    });
  }
});

/** Tokens over the whole vocabulary (every chunk holds targets), the target a function of the input. */
function vocabBatch(B: number, T: number, seed: number, V: number): Batch {
  const r = mulberry32(seed);
  const inputs = Uint32Array.from({ length: B * T }, () => Math.floor(r() * V));
  const targets = inputs.map((x) => (x * 7 + 3) % V);
  return { inputs, targets, B, T };
}

function compareTensors(what: string, got: Float32Array, want: Float32Array, measure: 'rel' | 'abs'): void {
  for (const t of paramLayout(config).tensors) {
    const e = maxRelErr(got.subarray(t.offset, t.offset + t.size), want.subarray(t.offset, t.offset + t.size))[measure];
    report[what] = Math.max(report[what] ?? 0, e);
    expect(e, `${what} ${t.name}: ${measure} err ${e}`).toBeLessThanOrEqual(TOL);
  }
}

describe('an engine with the head in 4 chunks (V = 1003, chunks of 256)', () => {
  const init = initParams(config, 4321);
  let engine: WebGpuEngine;

  beforeAll(async () => {
    engine = await WebGpuEngine.create(device, opts);
  });
  afterAll(() => engine?.destroy());

  it('plans a chunk of logits, no (B·T, V) buffer, and allocates what it plans', () => {
    const p = plan(opts);
    expect([p.headChunk, p.headChunks]).toEqual([256, 4]);
    for (const k of ['logits', 'probs', 'dlogits']) expect(p.storage.has(k), k).toBe(false);
    const BT = opts.maxBatch * config.blockSize;
    expect(p.storage.get('logitsChunk')).toBe(4 * BT * 256);
    const m = memoryPlan(opts);
    expect(m.total).toBe(estimateGpuBytes(opts));
    expect(engine.gpuBytes).toBe(m.total);
    // the engine plans for the device's binding and buffer limits (every buffer fits them here: no windows, no split)
    expect(engine.memory).toEqual({
      ...m,
      bindingLimit: device.limits.maxStorageBufferBindingSize,
      bufferLimit: device.limits.maxBufferSize,
    });
    expect(m.bytes.head).toBe(4 * BT * (256 + HEAD_STATS + 1));
  });

  it('loss and every gradient match the CPU model (B = 3, T = 23)', async () => {
    const bt = vocabBatch(3, 23, 7, config.vocabSize);
    const ref = new GPT(config, 3, 23);
    ref.params.set(init);
    const loss = ref.forward(bt.inputs, bt.targets, 3, 23);
    ref.backward();
    await engine.setParams(init);
    device.pushErrorScope('validation');
    await engine.step(bt, { lr: 0, gradClip: 1 });
    expect(await device.popErrorScope()).toBeNull();
    const [got] = await engine.takeLosses();
    expect(Math.abs(got - loss) / loss).toBeLessThanOrEqual(TOL);
    compareTensors('grads', await engine.debugReadGrads(), ref.grads, 'rel');
  });

  it('3 AdamW steps, one submission each: losses and θ as JsEngine; eval and sampling logits as the CPU', async () => {
    const ref = new JsEngine(opts);
    await ref.setParams(init);
    await engine.setParams(init);
    await engine.resetOptimizerState();
    const submit = device.queue.submit;
    let submits = 0;
    for (let s = 0; s < 3; s++) {
      const bt = vocabBatch(3, config.blockSize, 100 + s, config.vocabSize);
      await ref.step(bt, { lr: 3e-3, gradClip: 1 });
      submits = 0;
      device.queue.submit = (b) => {
        submits += 1;
        return submit.call(device.queue, b);
      };
      await engine.step(bt, { lr: 3e-3, gradClip: 1 });
      device.queue.submit = submit;
      expect(submits, 'one queue.submit a step').toBe(1);
    }
    const want = await ref.takeLosses(),
      got = await engine.takeLosses();
    got.forEach((l, i) => expect(Math.abs(l - want[i]) / want[i]).toBeLessThanOrEqual(TOL));
    compareTensors('params3', await engine.getParams(), await ref.getParams(), 'abs');
    const ev = vocabBatch(5, 20, 999, config.vocabSize); // 5 > maxBatch: in two parts
    const [gl, cl] = [await engine.evalLoss(ev), await ref.evalLoss(ev)];
    expect(Math.abs(gl - cl) / cl).toBeLessThanOrEqual(TOL);
    const ctx = vocabBatch(1, 30, 5, config.vocabSize).inputs; // longer than blockSize: the last 24
    const [gLog, cLog] = [await engine.nextTokenLogits(ctx), await ref.nextTokenLogits(ctx)];
    expect(gLog.length).toBe(config.vocabSize);
    expectRel('sampling logits', gLog, cLog, TOL);
  });
});

describe('f16 with the head in chunks (V = 1004)', () => {
  // the whole batch of 3, and micro-batches of 2 (1, 2) against the twins at the whole batch
  for (const microBatch of [undefined, 2])
    it(`losses as the f16 CPU twins over 3 steps${microBatch ? ', in micro-batches of 2' : ''}`, async () => {
      const engine = await WebGpuEngine.create(device, { ...f16Opts, microBatch });
      try {
        const init = initParams(f16Config, 77);
        const twin = new JsEngine(f16Opts);
        for (const e of [engine, twin]) await e.setParams(init);
        for (let s = 0; s < 3; s++) {
          const bt = vocabBatch(3, config.blockSize, 300 + s, f16Config.vocabSize);
          for (const e of [engine, twin]) await e.step(bt, { lr: 3e-3, gradClip: 1 });
        }
        const lh = await engine.takeLosses(),
          lt = await twin.takeLosses();
        lh.forEach((l, s) => expect(Math.abs(l - lt[s]), `step ${s}: ${l} vs ${lt[s]}`).toBeLessThan(2e-4 * lt[s]));
      } finally {
        engine.destroy();
      }
    });
});

describe('micro-batches: a batch of 5 in micro-batches of 2 (1, 2, 2) equals the whole batch', () => {
  const micro: WebGpuEngineOptions = { ...opts, maxBatch: 5, microBatch: 2 };
  const init = initParams(config, 99);

  it('splits a batch, the ragged micro-batch first', () => {
    expect(microBatches(5, 2)).toEqual([1, 2, 2]);
    expect(microBatches(4, 2)).toEqual([2, 2]);
    expect(microBatches(3, 8)).toEqual([3]);
  });

  it('plans activations for 2 sequences, not 5', () => {
    const whole = plan({ ...micro, microBatch: undefined }),
      p = plan(micro);
    expect(p.storage.get('ln1.0')).toBe(4 * 2 * config.blockSize * config.nEmbd);
    expect(whole.storage.get('ln1.0')).toBe(4 * 5 * config.blockSize * config.nEmbd);
    expect(memoryPlan(micro).bytes.activations).toBeLessThan(
      0.5 * memoryPlan({ ...micro, microBatch: 5 }).bytes.activations,
    );
    expect(memoryPlan(micro).microBatch).toBe(2);
  });

  it('gradients, losses and θ after 3 AdamW steps as the CPU engine at the whole batch', async () => {
    const engine = await WebGpuEngine.create(device, micro);
    try {
      expect(engine.gpuBytes).toBe(estimateGpuBytes(micro));
      const bt = vocabBatch(5, 19, 11, config.vocabSize);
      const ref = new GPT(config, 5, 19);
      ref.params.set(init);
      const loss = ref.forward(bt.inputs, bt.targets, 5, 19);
      ref.backward();
      await engine.setParams(init);
      await engine.step(bt, { lr: 0, gradClip: 1 });
      const [got] = await engine.takeLosses();
      expect(Math.abs(got - loss) / loss).toBeLessThanOrEqual(TOL);
      compareTensors('microGrads', await engine.debugReadGrads(), ref.grads, 'rel');

      const cpuEngine = new JsEngine(micro);
      await cpuEngine.setParams(init);
      await engine.setParams(init);
      await engine.resetOptimizerState();
      for (let s = 0; s < 3; s++) {
        const b = vocabBatch(s === 1 ? 4 : 5, config.blockSize, 400 + s, config.vocabSize); // 4: (2, 2)
        for (const e of [engine, cpuEngine]) await e.step(b, { lr: 3e-3, gradClip: 1 });
      }
      const want = await cpuEngine.takeLosses(),
        losses = await engine.takeLosses();
      losses.forEach((l, i) => expect(Math.abs(l - want[i]) / want[i]).toBeLessThanOrEqual(TOL));
      compareTensors('microParams3', await engine.getParams(), await cpuEngine.getParams(), 'abs');
      const ev = vocabBatch(5, 20, 998, config.vocabSize); // in micro-batches of 2
      const [gl, cl] = [await engine.evalLoss(ev), await cpuEngine.evalLoss(ev)];
      expect(Math.abs(gl - cl) / cl).toBeLessThanOrEqual(TOL);
    } finally {
      engine.destroy();
    }
  });
});

describe('the memory plan at GPT-2 size', () => {
  it('holds one chunk of logits where the full head held three (B·T, V) buffers', () => {
    const gpt2: WebGpuEngineOptions = { config: PRESETS.gpt2, maxBatch: 1 };
    const m = memoryPlan(gpt2);
    const BT = 1024,
      V = PRESETS.gpt2.vocabSize;
    expect([m.headChunk, m.headChunks]).toEqual([HEAD_CHUNK, 7]);
    expect(m.bytes.head).toBe(4 * BT * (HEAD_CHUNK + HEAD_STATS + 1));
    expect(m.bytes.head).toBeLessThan((3 * 4 * BT * V) / 18); // 32 MiB, not 3 × 196 MiB
    expect(m.largestBuffer).toBe(plan(gpt2).storage.get('params'));
    expect(requiredLimits(gpt2).maxStorageBufferBindingSize).toBe(m.largestBuffer);
    report.gpt2MiB = Math.round(m.total / 2 ** 20);
  });
});
