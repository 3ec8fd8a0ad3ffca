// Per-island quality: each delta's cosine with its sync round's merged delta and its norm against
// the round's median (core/coord/aggregate.ts), and the server's per-island record of it.

import { describe, expect, it } from 'vitest';
import { combineDeltas, l2 } from '../core/coord/aggregate.ts';
import { DEFAULT_COORDINATOR_CONFIG } from '../core/coord/index.ts';
import type { PendingDelta } from '../core/coord/types.ts';
import { IslandQuality } from '../server/run/island-quality.ts';

function pending(islandId: string, delta: number[]): PendingDelta {
  const d = Float32Array.from(delta);
  return {
    islandId,
    seq: 1,
    roundId: 1,
    baseVersion: 0,
    staleness: 0,
    tokens: 100,
    weight: 0,
    delta: d,
    score: l2(d),
    steps: 1,
    lossMean: 3,
    arrivedAt: 0,
  };
}

describe('island quality', () => {
  it('cosine with the merged Δ and norm against the round median', () => {
    const kept = [pending('a', [1, 0, 0, 0]), pending('b', [1, 0.2, 0, 0]), pending('c', [-3, 0, 0, 0])];
    const g = new Float32Array(4);
    combineDeltas(kept, { ...DEFAULT_COORDINATOR_CONFIG, trimFraction: 0 }, 0, g, new Float64Array(4));
    const [a, b, c] = kept;
    // g = mean = (-1/3, 0.2/3, 0, 0): the large opposite delta dominates it
    expect(c.cosine!).toBeGreaterThan(0.95);
    expect(a.cosine!).toBeLessThan(-0.9);
    expect(b.cosine!).toBeLessThan(-0.9);
    expect(c.normRatio!).toBeCloseTo(3 / Math.hypot(1, 0.2), 5); // median score is b's
    expect(b.normRatio).toBe(1);
  });

  it('the server keeps each island\u2019s contributions and their recent means, and replays them from the log', () => {
    const q = new IslandQuality();
    q.record(1, 1000, [
      {
        islandId: 'a',
        seq: 1,
        roundId: 1,
        baseVersion: 0,
        staleness: 0,
        tokens: 10,
        weight: 0.5,
        cosine: 0.8,
        normRatio: 1.2,
      },
    ]);
    q.record(2, 2000, [
      {
        islandId: 'a',
        seq: 2,
        roundId: 2,
        baseVersion: 1,
        staleness: 1,
        tokens: 10,
        weight: 0.5,
        cosine: 0.6,
        normRatio: 0.8,
      },
    ]);
    expect(q.summary('a')).toEqual({ cosine: 0.7, normRatio: 1 });
    expect(q.contributions('a').map((c) => c.version)).toEqual([1, 2]);
    expect(q.summary('nobody')).toEqual({ cosine: null, normRatio: null });
    const r = new IslandQuality();
    r.replayLine({
      t: 1000,
      type: 'update',
      version: 1,
      contributors: [{ island: 'a', staleness: 0, tokens: 10, weight: 0.5, cos: 0.8, norm: 1.2 }],
    });
    r.replayLine({
      t: 2000,
      type: 'update',
      version: 2,
      contributors: [{ island: 'a', staleness: 1, tokens: 10, weight: 0.5, cos: 0.6, norm: 0.8 }],
    });
    expect(r.contributions('a')).toEqual(q.contributions('a'));
    r.truncate(1);
    expect(r.contributions('a').map((c) => c.version)).toEqual([1]);
  });
});
