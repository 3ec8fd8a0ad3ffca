// The island runtime with an in-process transport and the CPU engine, in virtual time.

import { describe, expect, it } from 'vitest';
import { JsEngine } from '../core/engine/js.ts';
import { IslandRuntime, type IslandEvent } from '../client/island/index.ts';
import { VirtualClock } from '../instruments/simulate/clock.ts';
import { LocalHub } from '../instruments/simulate/local.ts';
import { Coordinator, type CoordinatorConfigPatch, type CoordinatorEvent } from '../core/coord/index.ts';
import type { GPTConfig } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import type { Batch, StepOptions } from '../core/engine/index.ts';

const CONFIG: GPTConfig = { vocabSize: 256, blockSize: 16, nLayer: 1, nHead: 2, nEmbd: 16 };
const TEXT = new TextEncoder().encode(
  'It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. '.repeat(
    40,
  ),
);

/** JsEngine whose steps take virtual time (1 ms per token). */
class TimedEngine extends JsEngine {
  constructor(private readonly clock: VirtualClock) {
    super({ config: CONFIG, maxBatch: 4 });
  }
  override async step(b: Batch, o: StepOptions): Promise<void> {
    await super.step(b, o);
    await this.clock.sleep(b.B * b.T);
  }
}

function setup(config: CoordinatorConfigPatch) {
  const clock = new VirtualClock();
  const coord = new Coordinator({
    params: initParams(CONFIG, 3),
    config: {
      batchSize: 2,
      seqLen: 16,
      innerSteps: 6,
      minInnerSteps: 1,
      dylu: false,
      islandTimeoutMs: 1e9,
      uplink: { encoding: 'int4', blockSize: 64 },
      ...config,
    },
  });
  const events: CoordinatorEvent[] = [];
  const hub = new LocalHub(coord, { clock, observe: (e) => events.push(e) });
  const island = () => {
    const rt = new IslandRuntime({ engine: new TimedEngine(clock), train: TEXT, transport: hub.connect(), clock });
    const seen: IslandEvent[] = [];
    rt.on((e) => seen.push(e));
    return { rt, seen };
  };
  return { clock, coord, hub, events, island };
}

describe('IslandRuntime', () => {
  it('completes sync rounds with two islands; replicas end bit-identical; error feedback is used', async () => {
    const { clock, coord, hub, island } = setup({ mode: 'sync', totalTokens: 6 * 2 * 16 * 2 * 3 });
    const a = island(),
      b = island();
    const res = await clock.run(Promise.all([a.rt.start(), b.rt.start()]));
    hub.close();
    expect(res.map((r) => r.reason)).toEqual(['done', 'done']);
    expect(coord.version).toBe(3);
    expect(res.map((r) => r.progress.accepted)).toEqual([3, 3]);
    expect(a.rt.replicaState?.hash).toBe(coord.hash);
    expect(b.rt.replicaState?.hash).toBe(coord.hash);
    // int4 leaves a residual: e = (Δ + e_prev) − decode(frame), non-zero and finite
    const e = a.rt.residual()!;
    let norm = 0;
    for (const x of e) norm += x * x;
    expect(norm).toBeGreaterThan(0);
    expect(Number.isFinite(norm)).toBe(true);
    const steps = a.seen.filter((x) => x.type === 'step').length;
    expect(steps).toBe(18);
    expect(a.seen.some((x) => x.type === 'synced' && x.via === 'update')).toBe(true);
  });

  it('pause/resume mid-round loses no step and sends no duplicate (async)', async () => {
    const { clock, coord, hub, events, island } = setup({
      mode: 'async',
      totalTokens: 6 * 2 * 16 * 3,
      maxStaleness: 10,
      outer: { kind: 'delayed-nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 },
    });
    const a = island();
    let paused = 0;
    a.rt.on((e) => {
      if (e.type === 'step' && e.step === 3 && paused === 0) {
        paused++;
        a.rt.pause();
        void clock.sleep(10_000).then(() => {
          expect(a.rt.progress.status).toBe('paused');
          a.rt.resume();
        });
      }
    });
    const r = await clock.run(a.rt.start());
    hub.close();
    expect(paused).toBe(1);
    expect(r.reason).toBe('done');
    const submitted = a.seen.filter((e): e is Extract<IslandEvent, { type: 'submitted' }> => e.type === 'submitted');
    expect(submitted.map((s) => s.meta.seq)).toEqual([1, 2, 3]);
    expect(submitted.every((s) => s.meta.steps === 6 && s.ack.status === 'applied')).toBe(true);
    expect(a.seen.filter((e) => e.type === 'step')).toHaveLength(18);
    expect(coord.totals().rejected).toEqual({});
    expect(coord.version).toBe(3);
    expect(events.filter((e) => e.type === 'update')).toHaveLength(3);
    expect(a.rt.replicaState?.hash).toBe(coord.hash);
  });

  it('a pause that outlives a sync round abandons it and rejoins the next one', async () => {
    const { clock, coord, hub, island } = setup({
      mode: 'sync',
      totalTokens: 6 * 2 * 16 * 2 * 3,
      quorum: 0.5,
      grace: { factor: 1, floorMs: 0, capMs: 0 },
    });
    const a = island(),
      b = island();
    let paused = false;
    a.rt.on((e) => {
      if (e.type === 'step' && e.step === 2 && !paused) {
        paused = true;
        a.rt.pause();
        void clock.sleep(2_000).then(() => a.rt.resume());
      }
    });
    const res = await clock.run(Promise.all([a.rt.start(), b.rt.start()]));
    hub.close();
    expect(res.map((r) => r.reason)).toEqual(['done', 'done']);
    expect(coord.totals().rejected['E_DUPLICATE']).toBeUndefined();
    expect(a.rt.replicaState?.hash).toBe(coord.hash);
    expect(
      a.seen.some((e) => e.type === 'status' && e.status === 'syncing' && (e.detail ?? '').includes('abandoning')),
    ).toBe(true);
  });

  it('a replica that falls behind catches up through update messages or the snapshot', async () => {
    const { clock, coord, hub, island } = setup({
      mode: 'async',
      totalTokens: 6 * 2 * 16 * 8,
      keepUpdates: 2,
      maxStaleness: 50,
    });
    const a = island(),
      b = island();
    const late = island();
    const p = Promise.all([a.rt.start(), b.rt.start(), clock.sleep(600).then(() => late.rt.start())]);
    const res = await clock.run(p);
    hub.close();
    expect(res.every((r) => typeof r !== 'object' || r.reason === 'done')).toBe(true);
    for (const x of [a, b, late]) expect(x.rt.replicaState?.hash).toBe(coord.hash);
  });
});

// Wall clock: a CPU step runs on the island's own thread. A Node island lets its event loop run at
// least every yieldEveryMs within a round, so its socket answers the server's pings while it trains.
describe('IslandRuntime on the wall clock', () => {
  /** A CPU step that holds the thread for `ms` (a slow machine), as the real CPU engine does. */
  class BusyEngine extends JsEngine {
    constructor(private readonly ms: number) {
      super({ config: CONFIG, maxBatch: 4 });
    }
    override async step(b: Batch, o: StepOptions): Promise<void> {
      const until = performance.now() + this.ms;
      await super.step(b, o);
      while (performance.now() < until) {
        /* the rest of a slow step */
      }
    }
  }

  /** The longest the event loop went without running a 5 ms timer, over one island's run. */
  async function longestStall(yieldEveryMs: number | undefined): Promise<number> {
    const coord = new Coordinator({
      params: initParams(CONFIG, 3),
      config: {
        batchSize: 2,
        seqLen: 16,
        innerSteps: 16,
        minInnerSteps: 1,
        dylu: false,
        mode: 'async',
        totalTokens: 16 * 2 * 16 * 2,
        uplink: { encoding: 'int4', blockSize: 64 },
      },
    });
    const hub = new LocalHub(coord);
    const rt = new IslandRuntime({ engine: new BusyEngine(25), train: TEXT, transport: hub.connect(), yieldEveryMs });
    let last = performance.now(),
      worst = 0;
    const timer = setInterval(() => {
      const t = performance.now();
      worst = Math.max(worst, t - last);
      last = t;
    }, 5);
    try {
      const r = await rt.start();
      expect(r.reason).toBe('done');
    } finally {
      clearInterval(timer);
      hub.close();
    }
    return Math.max(worst, performance.now() - last);
  }

  it('yieldEveryMs keeps the event loop running within a round (16 steps of 25 ms: 400 ms held without it)', async () => {
    const held = await longestStall(undefined);
    const yielding = await longestStall(100);
    expect(held, 'without yields a round holds the thread').toBeGreaterThan(350);
    expect(yielding, `longest stall with yields every 100 ms (without: ${held.toFixed(0)} ms)`).toBeLessThan(200);
  });
});
