// --precision f16 and --devices 2 on SwiftShader (two devices, each from its own Dawn instance),
// f16 engines throughout so each device compiles one set of pipelines:
// - the f16 engine against the f32 CPU reference: the same losses within f16's rounding, it
//   learns, Δ comes back as halves, and it holds less GPU memory than f32 (gpuBytes = the plan);
// - an island of two devices (client/island/engine/multi-device.ts) against one device at twice the
//   batch: the same losses and θ within the kernel tolerance (only the order of the gradient sums
//   differs), and one Δ.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Batch, TrainingEngine } from '../core/engine/index.ts';
import { textBatch } from './helpers/batches.ts';
import { type GPTConfig, PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { JsEngine } from '../core/engine/js.ts';
import { WebGpuEngine, estimateGpuBytes, requiredLimits } from '../client/island/engine/webgpu.ts';
import { MultiDeviceEngine, splitRows } from '../client/island/engine/multi-device.ts';
import { createNodeGpu, type NodeGpu } from '../client/island/engine/dawn.ts';
import { maxRelErr } from './helpers/gpu.ts';
import { calibrate } from '../client/island/calibrate.ts';

const config: GPTConfig = PRESETS.tiny;
const T = 16,
  B = 4,
  STEPS = 4;
const init = initParams(config, 99);
const batch = (seed: number): Batch => textBatch(B, T, seed);

/** Each engine from θ = init, STEPS steps on the same two batches in turn. */
async function trainFromInit(engines: TrainingEngine[]): Promise<void> {
  for (const e of engines) await e.setParams(init);
  for (let s = 0; s < STEPS; s++) for (const e of engines) await e.step(batch(s % 2), { lr: 3e-3, gradClip: 1 });
}

let gpus: NodeGpu[] = [];

beforeAll(async () => {
  const limits = requiredLimits({ config, maxBatch: B, maxT: T, precision: 'f16' });
  gpus = [await createNodeGpu({ requiredLimits: limits }), await createNodeGpu({ requiredLimits: limits })];
});

afterAll(async () => {
  for (const g of gpus) await g.dispose();
});

describe('multi-device island', () => {
  it('splits rows as evenly as it goes', () => {
    expect(splitRows(4, 2)).toEqual([2, 2]);
    expect(splitRows(5, 2)).toEqual([3, 2]);
    expect(splitRows(7, 3)).toEqual([3, 2, 2]);
  });

  it('f16 storage: losses within f16 rounding of the f32 reference, learns, Δ as halves, less memory', async () => {
    const f16 = await WebGpuEngine.create(gpus[0].device, { config, maxBatch: B, maxT: T, precision: 'f16' });
    expect(f16.numerics).toBe('f16');
    expect(f16.gpuBytes).toBe(estimateGpuBytes({ config, maxBatch: B, maxT: T, precision: 'f16' }));
    expect(f16.gpuBytes).toBeLessThan(estimateGpuBytes({ config, maxBatch: B, maxT: T }));
    const ref = new JsEngine({ config, maxBatch: B, maxT: T });
    const twin = new JsEngine({ config, maxBatch: B, maxT: T, precision: 'f16' }); // the CPU twins' model of f16
    await trainFromInit([f16, ref, twin]);
    const lh = await f16.takeLosses(),
      lf = await ref.takeLosses(),
      lt = await twin.takeLosses();
    const rel = (a: number[]) => a.map((l, s) => Math.abs(l / lh[s] - 1));
    console.log(
      `f16 engine vs f32 reference: ${rel(lf)
        .map((x) => x.toExponential(1))
        .join(' ')}; vs the f16 CPU twins: ${rel(lt)
        .map((x) => x.toExponential(1))
        .join(' ')}`,
    );
    for (let s = 0; s < STEPS; s++)
      expect(Math.abs(lh[s] - lf[s]), `step ${s}: f16 ${lh[s]} vs f32 ${lf[s]}`).toBeLessThan(2e-3 * lf[s]);
    for (let s = 0; s < STEPS; s++)
      expect(Math.abs(lh[s] - lt[s]), `step ${s}: f16 ${lh[s]} vs twins ${lt[s]}`).toBeLessThan(2e-4 * lt[s]);
    expect(lh[STEPS - 1]).toBeLessThan(lh[0] - 0.05);
    // Δ = θ_start − θ read back as halves: the f32 difference rounded once
    const theta = await f16.getParams(),
      delta = await f16.readDelta();
    const want = init.map((v, i) => v - theta[i]);
    expect(maxRelErr(delta, want).rel).toBeLessThan(1e-3);
    expect(Array.from(delta).every((v) => Math.fround(v) === v)).toBe(true);
    f16.destroy();
    ref.destroy();
    twin.destroy();
  });

  it('2 devices × batch 2 equal 1 device × batch 4: losses and θ after 4 steps, and it learns', async () => {
    const one = await WebGpuEngine.create(gpus[0].device, { config, maxBatch: B, maxT: T, precision: 'f16' });
    // a 4 KiB readback buffer: θ, Δ and the gradients come back in many chunks
    const two = new MultiDeviceEngine([
      await WebGpuEngine.create(gpus[0].device, {
        config,
        maxBatch: B / 2,
        maxT: T,
        precision: 'f16',
        readbackBytes: 4096,
      }),
      await WebGpuEngine.create(gpus[1].device, {
        config,
        maxBatch: B / 2,
        maxT: T,
        precision: 'f16',
        readbackBytes: 4096,
      }),
    ]);
    expect([two.devices, two.numerics]).toEqual([2, 'f16']);
    await trainFromInit([one, two]);
    const l1 = await one.takeLosses(),
      l2 = await two.takeLosses();
    expect(l2).toHaveLength(STEPS);
    for (let s = 0; s < STEPS; s++)
      expect(Math.abs(l2[s] - l1[s]), `step ${s}: ${l2[s]} vs ${l1[s]}`).toBeLessThan(1e-4 * l1[s]);
    expect(l2[STEPS - 1]).toBeLessThan(l2[0] - 0.05); // it learns: the same two batches, seen twice
    // θ: the difference in the order of dW's sums flips a few halves of the weight copy, and Adam
    // turns the gradient noise of elements whose gradient is ~0 into ±lr moves (see
    // webgpu-engine.test.ts); so θ agrees in norm, measured against how far the steps moved it
    const d1 = await one.readDelta(),
      d2 = await two.readDelta();
    const norm = (a: ArrayLike<number>, b?: ArrayLike<number>) =>
      Math.sqrt(Array.from(a).reduce((s, v, i) => s + (v - (b ? b[i] : 0)) ** 2, 0));
    const apart = norm(d2, d1) / norm(d1);
    console.log(
      `2-device vs 1-device: ‖Δ₂ − Δ₁‖/‖Δ₁‖ = ${apart.toExponential(2)}; losses ${l2.map((l, s) => (l / l1[s] - 1).toExponential(1)).join(' ')} relative`,
    );
    expect(apart).toBeLessThan(1e-2);
    // the island's calibration runs on it too: its smallest timed batch gives each device a row
    // (batch 1 on 2 devices was E_BAD_BATCH: `atoll island --devices 2` never trained)
    const text = new TextEncoder().encode(
      'Call me Ishmael. Some years ago, never mind how long precisely. '.repeat(20),
    );
    const cal = await calibrate(two, text, { config, maxBatch: B, maxT: T }, 'test');
    expect(cal.timed.map((t) => t.B).slice(0, 2)).toEqual([2, 4]);
    expect(cal.tokensPerSec).toBeGreaterThan(0);
    one.destroy();
    two.destroy();
  });
});
