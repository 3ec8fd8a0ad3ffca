// `atoll bench server`, the worker-thread figures: the outer step through OuterPool on a base-sized
// θ, with ingest and apply reported apart, and the longest event-loop stall seen meanwhile (the
// loop only moves messages, so it should stay near the timer's own period).

import { syntheticDelta } from './codec.ts';
import { type Encoding, encodeDelta } from '../../core/codec/index.ts';
import { OuterPool } from '../../server/outer/pool.ts';
import { median } from './timing.ts';

export interface OuterPoolBench {
  workers: number;
  /** Decode + validate + ‖Δ‖ of uplink frames, 2 per worker in flight. */
  ingestParamsPerSec: number;
  /**
   * Sync mode: one outer step (weighted mean of the round, Nesterov, int8 downlink with error feedback, θ hash, CRC)
   * shared by the round's deltas.
   */
  applyParamsPerSec: number;
  /** Async mode: a full outer step per delta (delayed Nesterov). */
  applyAsyncParamsPerSec: number;
  stepMs: number;
  roundSize: number;
  /** Longest gap between 5 ms timer ticks on the event loop while all of the above ran. */
  loopMaxStallMs: number;
}

export async function benchOuterPool(o: {
  n: number;
  workers: number;
  encoding?: Encoding;
  roundSize?: number;
  seconds?: number;
}): Promise<OuterPoolBench> {
  const { n, workers } = o;
  const roundSize = o.roundSize ?? 4;
  const seconds = o.seconds ?? 1.5;
  const delta = syntheticDelta(n, 11);
  const theta = syntheticDelta(n, 7).map((x) => x * 20);
  const frame = encodeDelta(delta, { encoding: o.encoding ?? 'int8', blockSize: 64 });
  const pool = OuterPool.start({ theta, workers });
  let last = performance.now();
  let stall = 0;
  const tick = setInterval(() => {
    const t = performance.now();
    stall = Math.max(stall, t - last);
    last = t;
  }, 5);
  try {
    const timed = async (f: () => Promise<void>) => {
      await f(); // warm-up
      const times: number[] = [];
      const t0 = performance.now();
      while (performance.now() - t0 < seconds * 1000 || times.length < 3) {
        const t = performance.now();
        await f();
        times.push(performance.now() - t);
      }
      return median(times);
    };
    const inFlight = 2 * workers;
    const ingestMs = await timed(async () => {
      const rs = await Promise.all(Array.from({ length: inFlight }, () => pool.ingest(frame)));
      for (const r of rs)
        if (r.ok) pool.release(r.value.slot);
        else throw new Error(`bench: ingest failed: ${r.error.code}`);
    });
    const slots: number[] = [];
    for (let k = 0; k < roundSize; k++) {
      const r = await pool.ingest(frame);
      if (!r.ok) throw new Error(`bench: ingest failed: ${r.error.code}`);
      slots.push(r.value.slot);
    }
    const step = async (s: Parameters<OuterPool['step']>[0]) => {
      const r = await pool.step(s);
      if (!r.ok) throw new Error(`bench: outer step failed: ${r.error.code}`);
    };
    const downlink = { encoding: 'int8' as const, blockSize: 64 };
    const syncMs = await timed(() =>
      step({
        slots,
        weights: slots.map(() => 1 / roundSize),
        outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 },
        downlink,
        scale: 1,
        period: 1,
      }),
    );
    const asyncMs = await timed(() =>
      step({
        slots: [slots[0]],
        weights: null,
        outer: { kind: 'delayed-nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 },
        downlink,
        scale: 1 / roundSize,
        period: roundSize,
      }),
    );
    return {
      workers,
      ingestParamsPerSec: Math.round((inFlight * n) / (ingestMs / 1000)),
      applyParamsPerSec: Math.round(n / (syncMs / roundSize / 1000)),
      applyAsyncParamsPerSec: Math.round(n / (asyncMs / 1000)),
      stepMs: Number(syncMs.toFixed(1)),
      roundSize,
      loopMaxStallMs: Number(stall.toFixed(1)),
    };
  } finally {
    clearInterval(tick);
    await pool.close();
  }
}
