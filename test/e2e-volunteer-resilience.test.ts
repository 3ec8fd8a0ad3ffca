// The volunteer island's engine wrapper (client/volunteer/resilient-engine.ts), in Node with the
// CPU reference engine standing in for a GPU one: a lost device is rebuilt and the round replayed
// to exactly the state the lost device had; the usage cap rests between steps and applies at once;
// hold() keeps training steps back while a sample runs.

import { describe, expect, it } from 'vitest';
import { JsEngine } from '../core/engine/js.ts';
import { calibrate, fullStepPlan, pickNumerics } from '../client/island/calibrate.ts';
import { estimateCosts } from '../client/volunteer/costs.ts';
import { type BusyInfo, type EngineHandle, ResilientEngine } from '../client/volunteer/resilient-engine.ts';
import { generateBetweenSteps } from '../client/volunteer/sampler.ts';
import { visibleText } from '../client/volunteer/sample-text.ts';
import { parseRunInfo } from '../client/volunteer/run-info.ts';
import { generate } from '../core/sample.ts';
import type { IslandView } from '../core/api.ts';
import { creditOf } from '../core/credit.ts';
import { sampleBatch } from '../core/data/dataset.ts';
import type { Batch, TrainingEngine } from '../core/engine/index.ts';
import { PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';

const config = PRESETS.tiny;
const B = 4,
  T = 16;
const data = new Uint8Array(4096).map((_, i) => (i * 7 + (i >> 3)) & 0x7f);
const batch = (i: number): Batch => sampleBatch(data, B, T, 1, 2, i);
const stepOpts = (i: number) => ({ lr: 1e-3 * (1 + i / 10), gradClip: 1 });

/** A CPU engine that pretends to be a GPU one whose device can be lost. */
class LossyEngine implements TrainingEngine {
  readonly kind = 'webgpu' as const;
  readonly config = config;
  readonly gpuBytes = 0;
  readonly inner = new JsEngine({ config, maxBatch: B, maxT: T });
  private dead = false;
  private onLost!: (i: { reason: string; message: string }) => void;
  readonly lost = new Promise<{ reason: string; message: string }>((r) => {
    this.onLost = r;
  });
  stepDelayMs = 0;
  /** Extra per batch row: a device bound by arithmetic. */
  rowDelayMs = 0;
  constructor(readonly device: string) {}
  lose(): void {
    this.dead = true;
    this.onLost({ reason: 'unknown', message: 'test' });
  }
  private check(): void {
    if (this.dead) throw new Error('E_DEVICE_LOST: gone');
  }
  async setParams(p: Float32Array) {
    this.check();
    return this.inner.setParams(p);
  }
  async getParams() {
    this.check();
    return this.inner.getParams();
  }
  async readDelta() {
    this.check();
    return this.inner.readDelta();
  }
  async getOptimizerState() {
    this.check();
    return this.inner.getOptimizerState();
  }
  async setOptimizerState(s: Parameters<TrainingEngine['setOptimizerState']>[0]) {
    this.check();
    return this.inner.setOptimizerState(s);
  }
  async resetOptimizerState() {
    this.check();
    return this.inner.resetOptimizerState();
  }
  async step(b: Batch, o: Parameters<TrainingEngine['step']>[1]) {
    this.check();
    const delay = this.stepDelayMs + this.rowDelayMs * b.B;
    if (delay) await new Promise((r) => setTimeout(r, delay));
    return this.inner.step(b, o);
  }
  async takeLosses() {
    this.check();
    return this.inner.takeLosses();
  }
  async evalLoss(b: Batch) {
    this.check();
    return this.inner.evalLoss(b);
  }
  async nextTokenLogits(c: Uint8Array) {
    this.check();
    return this.inner.nextTokenLogits(c);
  }
  destroy(): void {}
}

async function resilient(onBusy?: (i: BusyInfo) => void): Promise<{ engine: ResilientEngine; devices: LossyEngine[] }> {
  const devices: LossyEngine[] = [];
  const open = async (): Promise<EngineHandle> => {
    const e = new LossyEngine(`gpu ${devices.length}`);
    devices.push(e);
    return { engine: e, lost: e.lost, dispose: () => {}, simulateLoss: () => e.lose(), gpuDevice: null };
  };
  return { engine: await ResilientEngine.create({ open, onBusy }), devices };
}

describe('ResilientEngine', () => {
  it('rebuilds a lost device and replays the round: same losses and Δ as without the loss', async () => {
    const theta = initParams(config, 7);
    // reference: six steps after one warm-up round (so the optimizer state is not zero)
    const ref = new JsEngine({ config, maxBatch: B, maxT: T });
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
      if (i === 1) losses.push(...(await engine.takeLosses()));
      if (i === 3) devices[0].lose(); // two steps taken, two more queued, then the device dies
    }
    losses.push(...(await engine.takeLosses()));
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
    await timeStep(0); // warm-up: a first step is slower (pipelines, JIT) and would inflate `full`
    const full = await timeStep(1);
    engine.dutyCycle = 0.25; // rest 3× the work
    const capped = await timeStep(2);
    expect(capped).toBeGreaterThan(full * 2.5);
    engine.dutyCycle = 0.1; // rest 9× the work, unless interrupted
    const t0 = performance.now();
    const p = timeStep(3);
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
    const p = engine.step(batch(0), stepOpts(0)).then(() => {
      stepped = true;
    });
    await new Promise((r) => setTimeout(r, 30));
    expect(stepped).toBe(false);
    release();
    await p;
    expect(stepped).toBe(true);
  });

  it('backs off when steps get much slower than the recent median (a busy GPU) and returns when they recover', async () => {
    const events: BusyInfo[] = [];
    const { engine, devices } = await resilient((i) => events.push(i));
    devices[0].stepDelayMs = 15;
    await engine.setParams(initParams(config, 1));
    const run = async (n: number) => {
      for (let i = 0; i < n; i++) {
        await engine.step(batch(i), stepOpts(i));
        await engine.takeLosses();
      }
    };
    await run(6);
    expect(engine.busy).toBe(false);
    const median = engine.medianStepMs!;
    // the wrapper's own test hook: every step now takes much longer, as a game sharing the GPU would cause
    engine.extraStepMs = Math.max(150, 8 * median);
    await run(2);
    expect(engine.busy).toBe(true);
    expect(events).toHaveLength(1);
    expect(events[0].busy).toBe(true);
    expect(engine.effectiveDutyCycle).toBe(0.25);
    // the rest after a slow step is 3× its work at the lowered cap
    const t0 = performance.now();
    await run(1);
    expect(performance.now() - t0).toBeGreaterThan(3 * engine.extraStepMs);
    expect(engine.medianStepMs, 'slow steps do not move the median').toBe(median);
    engine.extraStepMs = 0;
    // two quick steps in a row release it (a step slowed by a noisy machine may delay that a little)
    for (let i = 0; i < 10 && engine.busy; i++) await run(1);
    expect(engine.busy).toBe(false);
    expect(events.map((e) => e.busy)).toEqual([true, false]);
    expect(engine.effectiveDutyCycle).toBe(1);
  });

  it('a step a few ms long that jitters by 5× is not a busy device (the CPU engine): slow means 50 ms over too', async () => {
    const events: BusyInfo[] = [];
    const { engine, devices } = await resilient((i) => events.push(i));
    devices[0].stepDelayMs = 2;
    await engine.setParams(initParams(config, 1));
    for (let i = 0; i < 12; i++) {
      engine.extraStepMs = i >= 6 ? 10 : 0; // ~12 ms against a median of ~2–5 ms
      await engine.step(batch(i), stepOpts(i));
      await engine.takeLosses();
    }
    expect(engine.busy).toBe(false);
    expect(events).toEqual([]);
  });

  it('a sample is written between training steps: same tokens as generate(), no training step stretched 2×', async () => {
    const { engine, devices } = await resilient();
    // steps of 150 ms: a busy 2-core machine's timer jitter (tens of ms) stays well inside the 2×
    // bound; tokens of 20 ms: the whole sample at once (≥ 480 ms) would not
    devices[0].stepDelayMs = 150;
    const theta = initParams(config, 3);
    await engine.setParams(theta);
    const sampler = new JsEngine({ config, maxBatch: 1 });
    await sampler.setParams(theta);
    const slow = new Proxy(sampler, {
      get: (t, k) =>
        k === 'nextTokenLogits'
          ? async (c: Uint8Array) => {
              await new Promise((r) => setTimeout(r, 20));
              return t.nextTokenLogits(c);
            }
          : Reflect.get(t, k),
    });
    const o = { tokens: 24, temperature: 0.8, seed: 5 };
    const want = await generate(sampler, Uint8Array.from([67, 97]), o);
    // training runs alongside: step times must stay near their usual 150 ms
    await engine.step(batch(0), stepOpts(0));
    await engine.takeLosses();
    let done = false;
    const stepMs: number[] = [];
    const training = (async () => {
      for (let i = 1; !done; i++) {
        const t0 = performance.now();
        await engine.step(batch(i), stepOpts(i));
        await engine.takeLosses();
        stepMs.push(performance.now() - t0);
      }
    })();
    const got = await generateBetweenSteps(slow, Uint8Array.from([67, 97]), o, engine, () => {});
    done = true;
    await training;
    expect(Array.from(got)).toEqual(Array.from(want));
    expect(stepMs.length).toBeGreaterThan(1);
    const usual = engine.medianStepMs!;
    for (const ms of stepMs)
      expect(ms, `steps ${stepMs.map(Math.round).join(', ')} vs median ${usual}`).toBeLessThan(2 * usual + 40);
  });

  it('shows invalid UTF-8 and control bytes as visible escapes, readable text as it is', () => {
    const bytes = Uint8Array.from([
      0x43, 0x61, 0x6c, 0x6c, 0x0a, 0xc3, 0xa9, 0xff, 0x01, 0xe2, 0x82, 0x41, 0x09, 0xf0, 0x9f, 0x90, 0xb3, 0x7f,
    ]);
    expect(visibleText(bytes)).toEqual([
      { text: 'Call\né', escaped: false },
      { text: '\\xff\\x01\\xe2\\x82', escaped: true },
      { text: 'A\t🐳', escaped: false },
      { text: '\\x7f', escaped: true },
    ]);
    // overlong and surrogate encodings are not text
    expect(visibleText(Uint8Array.from([0xc0, 0xaf, 0xed, 0xa0, 0x80])).every((p) => p.escaped)).toBe(true);
  });

  it('costs per hour follow the measured speed, the cap and the round-time target within the step bounds', () => {
    const base = {
      model: PRESETS.small,
      batch: 8,
      seqLen: 128,
      bytesPerRound: { up: 2_000_000, down: 1_000_000 },
      config: { coordinator: { minInnerSteps: 1, maxInnerSteps: 2000 } },
    };
    const timed = parseRunInfo({ ...base, targetRoundMs: 90_000 });
    // 1024 tokens a step at 512 tok/s: 2 s a step, 45 steps fill 90 s: 40 rounds an hour
    const c = estimateCosts(timed, 512);
    expect(c.roundSec).toBeCloseTo(90);
    expect(c.upPerHour).toBeCloseTo(40 * 2_000_000);
    expect(c.downPerHour).toBeCloseTo(40 * 1_000_000);
    // once the server has sent updates, their measured mean (deflated) replaces the codec's bound
    expect(estimateCosts(timed, 512, 250_000)).toMatchObject({
      downPerRound: 250_000,
      downPerHour: 40 * 250_000,
      upPerHour: 40 * 2_000_000,
    });
    // a device too slow for one step in 90 s still runs one: a round is one 120 s step
    expect(estimateCosts(timed, 1024 / 120).roundSec).toBeCloseTo(120);
    expect(estimateCosts(timed, null).upPerHour).toBeNull();
    const fixed = parseRunInfo({ ...base, innerSteps: 10 });
    expect(estimateCosts(fixed, 1024).roundSec).toBeCloseTo(10);
    // a corpus run's text comes once; a shard run's range each round: 2 bytes a token, 45 steps of 8 × 129
    expect(c.dataPerRound).toBeNull();
    const shards = parseRunInfo({
      ...base,
      targetRoundMs: 90_000,
      data: { trainBytes: 0, heldOutBytes: 0, shards: 3 },
    });
    const range = 2 * 45 * 8 * 129;
    expect(estimateCosts(shards, 512)).toMatchObject({ dataPerRound: range, downPerHour: 40 * (1_000_000 + range) });
    // with fixed steps the range is known before the speed is
    const fixedShards = parseRunInfo({ ...fixed, data: { trainBytes: 0, heldOutBytes: 0, shards: 3 } });
    expect(estimateCosts(fixedShards, null).dataPerRound).toBe(2 * 10 * 8 * 129);
  });

  it('calibration times full batches on a quick device and scales batches 1 and 2 up on a slow one', async () => {
    const shape = { config, maxBatch: B, maxT: T };
    const quick = await calibrate(new JsEngine({ config, maxBatch: B, maxT: T }), data, shape, 'k');
    expect(quick).toMatchObject({ key: 'k', estimated: false });
    expect(quick.timed.map((t) => t.B)).toEqual([1, 2, B, B]);
    expect(quick.tokensPerSec).toBeCloseTo((1000 * B * T) / quick.stepMs);
    // bound by arithmetic, 800 ms a row: a full step (3.2 s) is estimated from 2.4 s of small steps
    const slow = new LossyEngine('slow');
    slow.rowDelayMs = 800;
    const s = await calibrate(slow, data, shape, 'k');
    expect(s.estimated).toBe(true);
    expect(s.timed.map((t) => t.B)).toEqual([1, 2]);
    expect(s.stepMs).toBeGreaterThanOrEqual(800 * B);
    expect(s.stepMs).toBeLessThan(1.25 * 800 * B);
    expect(s.ms).toBeLessThan(s.stepMs);
    // the rule: the smaller of B × batch 1 and B/2 × batch 2, both at least the full step (fixed work ≥ 0)
    expect(fullStepPlan(7000, 14_000, 8)).toEqual({ kind: 'estimated', stepMs: 56_000 });
    expect(fullStepPlan(9300, 15_000, 8)).toEqual({ kind: 'estimated', stepMs: 60_000 });
    expect(fullStepPlan(6000, 7500, 8)).toEqual({ kind: 'estimated', stepMs: 30_000 }); // batch 1 slowed by warm-up
    expect(fullStepPlan(300, 600, 8)).toEqual({ kind: 'full' }); // a full step is cheap to time
    expect(fullStepPlan(7000, 14_000, 2)).toEqual({ kind: 'full' });
    // 2 devices: 2 and 4 rows timed
    expect(fullStepPlan(7000, 14_000, 8, 2)).toEqual({ kind: 'estimated', stepMs: 28_000 });
    expect(fullStepPlan(7000, 14_000, 4, 2)).toEqual({ kind: 'full' });
  });

  it('?precision=auto keeps f16 storage only when it trains faster, and says so', () => {
    const c = (tokensPerSec: number) => ({
      key: 'k',
      tokensPerSec,
      stepMs: 1,
      timed: [],
      estimated: false,
      ms: 1,
      at: 0,
    });
    const faster = pickNumerics(c(1000), c(1400));
    expect([faster.numerics, faster.speedup]).toEqual(['f16', 1.4]);
    expect(faster.line).toBe(
      'Numerics: f16 storage, 1.40× faster than f32 here (f16 1,400 vs f32 1,000 tokens/s); master weights stay f32.',
    );
    const slower = pickNumerics(c(1000), c(900));
    expect(slower.numerics).toBe('f32');
    expect(slower.line).toContain('f16 storage was not faster here');
  });

  it("a contributor's credit adds up their islands, ranks by merged tokens and shows their latest name", () => {
    const isl = (
      id: string,
      contributorId: string,
      name: string,
      tokens: number,
      tokensSubmitted: number,
      lastSeen: number,
    ) =>
      ({
        id,
        contributorId,
        name,
        tokens,
        tokensSubmitted,
        accepted: tokens > 0 ? 1 : 0,
        rejected: 0,
        lastSeen,
        status: 'online',
        engine: 'webgpu',
      }) as unknown as IslandView;
    const all = [
      isl('island-1', 'alice-0001', 'volunteer-alice', 1000, 1200, 1),
      isl('island-2', 'bob-00001', 'bob', 1500, 1500, 2),
      isl('island-3', 'alice-0001', 'Ishmael', 1000, 1000, 3),
      isl('island-4', 'carol-001', 'carol', 0, 500, 4),
    ];
    expect(creditOf(all, 'alice-0001')).toEqual({
      contributorId: 'alice-0001',
      name: 'Ishmael',
      tokens: 2000,
      tokensComputed: 2200,
      accepted: 2,
      rejected: 0,
      islands: 2,
      rank: 1,
      contributors: 2,
    });
    expect(creditOf(all, 'bob-00001').rank).toBe(2);
    // computed but nothing merged yet: counted, not ranked
    expect(creditOf(all, 'carol-001')).toMatchObject({ tokens: 0, tokensComputed: 500, rank: null });
    expect(creditOf(all, 'nobody-01')).toMatchObject({
      name: null,
      tokens: 0,
      islands: 0,
      rank: null,
      contributors: 2,
    });
  });
});
