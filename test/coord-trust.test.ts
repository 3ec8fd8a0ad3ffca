// The outer step's trust region (core/coord/trust.ts) on a real coordinator with a plain clock: a
// round whose merged Δ is far longer than the run's recent ones moves θ by at most factor × the
// median ‖u‖ of the last `window` versions (the momentum taking the same reduced share), the version
// says so (trustGain, the totals' trustClips); no limit during the warm-up, none when it is off.

import { describe, expect, it } from 'vitest';
import { type CodecOptions, encodeDelta } from '../core/codec/index.ts';
import { Coordinator, type CoordinatorConfigPatch } from '../core/coord/index.ts';
import { median } from '../core/coord/aggregate.ts';
import { trustGain } from '../core/coord/trust.ts';
import { gaussian, mulberry32 } from '../core/random.ts';

const N = 512;
const F32: CodecOptions = { encoding: 'f32' };

function vec(seed: number, scale: number): Float32Array {
  const r = gaussian(mulberry32(seed));
  return Float32Array.from({ length: N }, () => scale * r());
}

const norm = (x: Float32Array) => Math.sqrt(x.reduce((a, v) => a + v * v, 0));

/** One island in sync rounds (every round closes at its Δ); `big(r)`: round r's Δ is 20× longer. */
function run(config: CoordinatorConfigPatch, rounds: number, big: (r: number) => boolean) {
  const c = new Coordinator({
    params: vec(7, 0.02),
    config: {
      mode: 'sync',
      soloPlainStep: false, // the Nesterov step, momentum included, for a lone island too
      uplink: F32,
      downlink: { encoding: 'f32', blockSize: 64 },
      normBound: { factor: 0 },
      batchSize: 4,
      seqLen: 8,
      innerSteps: 10,
      dylu: false,
      ...config,
    },
  });
  const j = c.join({ caps: { engine: 'cpu' } }, 0);
  if (!j.ok || !j.value.assignment) throw new Error('join failed');
  let a = j.value.assignment;
  const moved: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const before = (c.params() as Float32Array).slice();
    const steps = a.innerSteps;
    const meta = {
      islandId: a.islandId,
      roundId: a.roundId,
      baseVersion: a.baseVersion,
      seq: r + 1,
      steps,
      tokens: steps * a.batchSize * a.seqLen,
      lossFirst: 3,
      lossLast: 2,
      lossMean: 2.5,
      elapsedMs: 1000,
    };
    const d = vec(100 + r, big(r) ? 0.2 : 0.01);
    expect(c.submit({ meta, frame: encodeDelta(d, F32) }, 1000 * (r + 1)).ok).toBe(true);
    expect(c.version).toBe(r + 1);
    const after = c.params() as Float32Array;
    moved.push(norm(before.map((v, i) => v - after[i])));
    const next = c.nextAssignment(a.islandId, 1000 * (r + 1) + 1);
    if (!next.ok || !next.value) throw new Error('no assignment');
    a = next.value;
  }
  return { c, history: c.history(), moved };
}

describe("the outer step's trust region", () => {
  it('γ from the proposals at 1, 0 and −1 makes ‖γA + B‖ the limit (or the shortest u when B alone is over)', () => {
    const A = vec(1, 1),
      B = vec(2, 0.3);
    const q = (g: number) => A.reduce((s, a, i) => s + (g * a + B[i]) ** 2, 0);
    const limit = 0.5 * Math.sqrt(q(1));
    const g = trustGain(q(1), q(0), q(-1), limit);
    expect(g).toBeGreaterThan(0);
    expect(g).toBeLessThan(1);
    expect(Math.sqrt(q(g)) / limit).toBeCloseTo(1, 4);
    expect(Math.sqrt(q(g))).toBeLessThanOrEqual(limit); // γ is cut down to its grid, never up
    // the momentum alone is longer than the limit: the γ ≥ 0 of the shortest u
    const tight = 0.5 * Math.sqrt(q(0));
    const g0 = trustGain(q(1), q(0), q(-1), tight);
    expect(q(g0)).toBeLessThanOrEqual(q(0) * (1 + 1e-9));
  });

  it('clips a round 20× longer than the recent ones to factor × their median; the version says so', () => {
    const spike = (r: number) => r === 10;
    const { history, moved, c } = run({ trustRegion: { factor: 2, window: 8 } }, 12, spike);
    const limit = 2 * median(history.slice(2, 10).map((h) => h.updateNorm));
    expect(history[10].trustGain).toBeGreaterThan(0);
    expect(history[10].trustGain).toBeLessThan(0.5);
    expect(history[10].updateNorm / limit).toBeCloseTo(1, 4);
    expect(moved[10] / limit).toBeCloseTo(1, 3); // θ itself moved by the limit (f32 downlink: u exactly)
    expect(history.filter((h) => h.trustGain !== undefined).map((h) => h.version)).toEqual([11]);
    expect(c.totals().trustClips).toBe(1);
    // the same run without the trust region: the spike moves θ ~10× further
    const off = run({ trustRegion: { factor: 0, window: 8 } }, 12, spike);
    expect(off.moved[10]).toBeGreaterThan(5 * moved[10]);
    expect(off.history.some((h) => h.trustGain !== undefined)).toBe(false);
    // the momentum took only γ of the spike: the next, ordinary round moves θ less than without the clip
    expect(moved[11]).toBeLessThan(0.5 * off.moved[11]);
  });

  it('does not act during the warm-up (fewer than `window` versions)', () => {
    const { history } = run({ trustRegion: { factor: 2, window: 8 } }, 6, (r) => r === 4);
    expect(history.every((h) => h.trustGain === undefined)).toBe(true);
    expect(history[4].updateNorm).toBeGreaterThan(5 * history[3].updateNorm);
  });
});
