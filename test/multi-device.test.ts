// An island of two WebGPU devices (client/engine/multi-device.ts) against one device at twice the
// batch: the same losses and the same θ after a few steps, within the kernel tolerance (the only
// difference is the order of the gradient sums), and it learns. Two SwiftShader devices here,
// each from its own Dawn instance.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Batch } from '../core/engine.ts';
import { type GPTConfig, PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { mulberry32 } from '../core/random.ts';
import { WebGpuEngine, requiredLimits } from '../client/engine/webgpu.ts';
import { MultiDeviceEngine, splitRows } from '../client/engine/multi-device.ts';
import { createNodeGpu, type NodeGpu } from '../server/gpu.ts';
import { maxRelErr } from './helpers/gpu.ts';

const config: GPTConfig = PRESETS.tiny;
const T = 16, B = 4, STEPS = 4;
const init = initParams(config, 99);
const TEXT = new TextEncoder().encode('Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, and nothing particular to interest me on shore. ');

function batch(seed: number): Batch {
  const r = mulberry32(seed);
  const inputs = new Uint8Array(B * T), targets = new Uint8Array(B * T);
  for (let b = 0; b < B; b++) {
    const s = Math.floor(r() * (TEXT.length - T - 1));
    inputs.set(TEXT.subarray(s, s + T), b * T);
    targets.set(TEXT.subarray(s + 1, s + T + 1), b * T);
  }
  return { inputs, targets, B, T };
}

let gpus: NodeGpu[] = [];

beforeAll(async () => {
  const limits = requiredLimits({ config, maxBatch: B, maxT: T });
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

  it('2 devices × batch 2 equal 1 device × batch 4: losses and θ after 4 steps, and it learns', async () => {
    const one = await WebGpuEngine.create(gpus[0].device, { config, maxBatch: B, maxT: T });
    const two = new MultiDeviceEngine([
      await WebGpuEngine.create(gpus[0].device, { config, maxBatch: B / 2, maxT: T }),
      await WebGpuEngine.create(gpus[1].device, { config, maxBatch: B / 2, maxT: T }),
    ]);
    expect(two.devices).toBe(2);
    await one.setParams(init);
    await two.setParams(init);
    const opts = { lr: 3e-3, gradClip: 1 };
    for (let s = 0; s < STEPS; s++) {
      await one.step(batch(s % 2), opts);
      await two.step(batch(s % 2), opts);
    }
    const l1 = await one.takeLosses(), l2 = await two.takeLosses();
    expect(l2).toHaveLength(STEPS);
    for (let s = 0; s < STEPS; s++) expect(Math.abs(l2[s] - l1[s]), `step ${s}: ${l2[s]} vs ${l1[s]}`).toBeLessThan(1e-4 * l1[s]);
    expect(l2[STEPS - 1]).toBeLessThan(l2[0] - 0.05); // it learns: the same two batches, seen twice
    const p1 = await one.getParams(), p2 = await two.getParams();
    expect(maxRelErr(p2, p1).abs).toBeLessThan(1e-5);
    const d1 = await one.readDelta(), d2 = await two.readDelta();
    expect(maxRelErr(d2, d1).rel).toBeLessThan(1e-3);
    one.destroy();
    two.destroy();
  });
});
