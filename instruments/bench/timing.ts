// Timing helpers shared by the benchmarks: medians, interleaved measurements of rival
// implementations, and a queue drain that leaves a core free for a software adapter.

import { median } from '../../core/coord/aggregate.ts';

export { median };

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export function geomean(xs: number[]): number {
  return Math.exp(xs.reduce((a, x) => a + Math.log(x), 0) / Math.max(1, xs.length));
}

export function randomArray(n: number, seed: number): Float32Array {
  let s = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    out[i] = s / 4294967296 - 0.5;
  }
  return out;
}

/**
 * Waits for the queue to drain. While a Dawn promise is pending Node busy-polls a core
 * (a Dawn-in-Node behaviour), which starves a software adapter; sleeping through most of the
 * expected time first keeps that core free. Used identically for ours and TF.js.
 */
export async function drain(device: GPUDevice, expectMs: number): Promise<void> {
  if (expectMs > 5) await sleep(expectMs * 0.8);
  await device.queue.onSubmittedWorkDone();
}

export type Runner = (n: number, expectMs: number) => Promise<void>;

/**
 * Median ms per unit of each runner (`run(n)` does n units and resolves when they are
 * done): a warm-up each, a calibration of n to ~targetMs per measurement, then `repeats`
 * rounds that measure each runner once, interleaved, so that load from anything else on
 * the machine falls on all of them alike.
 */
export async function timeInterleaved(
  runners: Runner[],
  targetMs: number,
  repeats: number,
  maxN = 1000,
): Promise<number[]> {
  const ns: number[] = [];
  const expect: number[] = [];
  for (const run of runners) {
    await run(1, 0); // warm-up: pipeline compilation, allocation
    const t0 = performance.now();
    await run(1, 0);
    const one = Math.max(1e-3, performance.now() - t0);
    const n = Math.max(1, Math.min(maxN, Math.round(targetMs / one)));
    ns.push(n);
    expect.push(one * n);
  }
  const times: number[][] = runners.map(() => []);
  for (let r = 0; r < repeats; r++) {
    for (let i = 0; i < runners.length; i++) {
      const t0 = performance.now();
      await runners[i](ns[i], expect[i]);
      const ms = performance.now() - t0;
      expect[i] = ms;
      times[i].push(ms / ns[i]);
    }
  }
  return times.map(median);
}
