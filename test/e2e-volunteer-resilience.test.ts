// The volunteer island's engine wrapper (client/volunteer/resilient-engine.ts), in Node with the
// CPU reference engine standing in for a GPU one: a lost device is rebuilt and the round replayed
// to exactly the state the lost device had; the usage cap rests between steps and applies at once;
// hold() keeps training steps back while a sample runs.

import { describe, expect, it } from 'vitest';
import { CpuEngine } from '../client/engine/cpu.ts';
import { type EngineHandle, ResilientEngine } from '../client/volunteer/resilient-engine.ts';
import { sampleBatch } from '../core/data/dataset.ts';
import type { Batch, TrainingEngine } from '../core/engine.ts';
import { PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';

const config = PRESETS.tiny;
const B = 4, T = 16;
const data = new Uint8Array(4096).map((_, i) => (i * 7 + (i >> 3)) & 0x7f);
const batch = (i: number): Batch => sampleBatch(data, B, T, 1, 2, i);
const stepOpts = (i: number) => ({ lr: 1e-3 * (1 + i / 10), gradClip: 1 });

/** A CPU engine that pretends to be a GPU one whose device can be lost. */
class LossyEngine implements TrainingEngine {
  readonly kind = 'webgpu' as const;
  readonly config = config;
  readonly gpuBytes = 0;
  readonly inner = new CpuEngine({ config, maxBatch: B, maxT: T });
  private dead = false;
  private onLost!: (i: { reason: string; message: string }) => void;
  readonly lost = new Promise<{ reason: string; message: string }>((r) => { this.onLost = r; });
  stepDelayMs = 0;
  constructor(readonly device: string) {}
  lose(): void { this.dead = true; this.onLost({ reason: 'unknown', message: 'test' }); }
  private check(): void { if (this.dead) throw new Error('E_DEVICE_LOST: gone'); }
  async setParams(p: Float32Array) { this.check(); return this.inner.setParams(p); }
  async getParams() { this.check(); return this.inner.getParams(); }
  async readDelta() { this.check(); return this.inner.readDelta(); }
  async getOptimizerState() { this.check(); return this.inner.getOptimizerState(); }
  async setOptimizerState(s: Parameters<TrainingEngine['setOptimizerState']>[0]) { this.check(); return this.inner.setOptimizerState(s); }
  async resetOptimizerState() { this.check(); return this.inner.resetOptimizerState(); }
  async step(b: Batch, o: Parameters<TrainingEngine['step']>[1]) {
    this.check();
    if (this.stepDelayMs) await new Promise((r) => setTimeout(r, this.stepDelayMs));
    return this.inner.step(b, o);
  }
  async takeLosses() { this.check(); return this.inner.takeLosses(); }
  async evalLoss(b: Batch) { this.check(); return this.inner.evalLoss(b); }
  async nextTokenLogits(c: Uint8Array) { this.check(); return this.inner.nextTokenLogits(c); }
  destroy(): void {}
}

async function resilient(): Promise<{ engine: ResilientEngine; devices: LossyEngine[] }> {
  const devices: LossyEngine[] = [];
  const open = async (): Promise<EngineHandle> => {
    const e = new LossyEngine(`gpu ${devices.length}`);
    devices.push(e);
    return { engine: e, lost: e.lost, dispose: () => {}, simulateLoss: () => e.lose(), gpuDevice: null };
  };
  return { engine: await ResilientEngine.create({ open }), devices };
}

describe('ResilientEngine', () => {
  it('rebuilds a lost device and replays the round: same losses and Δ as without the loss', async () => {
    const theta = initParams(config, 7);
    // reference: six steps after one warm-up round (so the optimizer state is not zero)
    const ref = new CpuEngine({ config, maxBatch: B, maxT: T });
    await ref.setParams(theta);
    await ref.step(batch(100), stepOpts(0));
    await ref.takeLosses();
    await ref.setParams(await ref.getParams());
    for (let i = 0; i < 6; i++) await ref.step(batch(i), stepOpts(i));
    const refLosses = await ref.takeLosses();
    const refDelta = await ref.readDelta();

    const { engine, devices } = await resilient();
    await engine.setParams(theta);
    await engine.step(batch(100), stepOpts(0));
    await engine.takeLosses();
    await engine.setParams(await engine.getParams());
    const losses: number[] = [];
    for (let i = 0; i < 6; i++) {
      await engine.step(batch(i), stepOpts(i));
      if (i === 1) losses.push(...await engine.takeLosses());
      if (i === 3) devices[0].lose(); // two steps taken, two more queued, then the device dies
    }
    losses.push(...await engine.takeLosses());
    expect(devices).toHaveLength(2);
    expect(engine.device).toBe('gpu 1');
    expect(losses).toEqual(refLosses);
    expect(Array.from(await engine.readDelta())).toEqual(Array.from(refDelta));
    expect(engine.losses).toBe(1);
  });

  it('the usage cap rests work·(1−u)/u after each step, changes at once, and a pause cuts the rest short', async () => {
    const { engine, devices } = await resilient();
    devices[0].stepDelayMs = 60;
    await engine.setParams(initParams(config, 1));
    const timeStep = async (i: number) => {
      const t0 = performance.now();
      await engine.step(batch(i), stepOpts(i));
      await engine.takeLosses();
      return performance.now() - t0;
    };
    const full = await timeStep(0);
    engine.dutyCycle = 0.25; // rest 3× the work
    const capped = await timeStep(1);
    expect(capped).toBeGreaterThan(full * 2.5);
    engine.dutyCycle = 0.1; // rest 9× the work, unless interrupted
    const t0 = performance.now();
    const p = timeStep(2);
    const poke = setInterval(() => engine.interruptRest(), 10); // a pause arriving during the rest
    await p;
    clearInterval(poke);
    expect(performance.now() - t0).toBeLessThan(full * 4);
  });

  it('hold() keeps steps back until released', async () => {
    const { engine } = await resilient();
    await engine.setParams(initParams(config, 1));
    const release = engine.hold();
    let stepped = false;
    const p = engine.step(batch(0), stepOpts(0)).then(() => { stepped = true; });
    await new Promise((r) => setTimeout(r, 30));
    expect(stepped).toBe(false);
    release();
    await p;
    expect(stepped).toBe(true);
  });
});
