// A sync round whose live members cannot reach minContributors: it closes with those present once
// they are all in and the grace deadline passed (or at the round timeout), says why in the version's
// stats, the round event and the totals, and the run keeps making versions. Plain clock, real coordinator.

import { describe, expect, it } from 'vitest';
import { type CodecOptions, encodeDelta } from '../core/codec/index.ts';
import { Coordinator, type CoordinatorEvent } from '../core/coord/index.ts';
import type { Assignment, DeltaMeta } from '../core/protocol.ts';
import { gaussian, mulberry32 } from '../core/random.ts';

const N = 128;
const F32: CodecOptions = { encoding: 'f32' };

function vec(seed: number): Float32Array {
  const r = gaussian(mulberry32(seed));
  return Float32Array.from({ length: N }, () => 0.01 * r());
}

function coord(minContributors: number): Coordinator {
  return new Coordinator({
    params: vec(99),
    config: {
      mode: 'sync',
      downlink: { encoding: 'f32', blockSize: 64 },
      uplink: F32,
      normBound: { factor: 0 },
      batchSize: 4,
      seqLen: 8,
      innerSteps: 10,
      dylu: false,
      quorum: 0.75,
      minContributors,
      grace: { factor: 1.5, floorMs: 2_000, capMs: 60_000 },
      roundTimeoutMs: 30_000,
      islandTimeoutMs: 1e9,
    },
  });
}

let seq = 0;
function meta(a: Assignment): DeltaMeta {
  const steps = a.innerSteps;
  return {
    islandId: a.islandId,
    roundId: a.roundId,
    baseVersion: a.baseVersion,
    seq: ++seq,
    steps,
    tokens: steps * a.batchSize * a.seqLen,
    lossFirst: 3,
    lossLast: 2,
    lossMean: 2.5,
    elapsedMs: 1000,
  };
}

const updates = (evs: CoordinatorEvent[]) =>
  evs.filter((e): e is Extract<CoordinatorEvent, { type: 'update' }> => e.type === 'update');

function joinAll(c: Coordinator, k: number, now: number): Assignment[] {
  return Array.from({ length: k }, () => {
    const j = c.join({ caps: { engine: 'cpu' } }, now);
    if (!j.ok || !j.value.assignment) throw new Error('expected an assignment');
    return j.value.assignment;
  });
}

describe('a sync round short of minContributors', () => {
  it('closes with the live members once they are all in and the grace passed, and keeps making versions', () => {
    const c = coord(3);
    let work = joinAll(c, 3, 0);
    c.leave(work[2].islandId, 10); // one of three dies: 2 live members can never make 3
    work = work.slice(0, 2);
    let now = 0;
    for (let round = 0; round < 4; round++) {
      const opened = now;
      now += 1000;
      for (const a of work) {
        expect(c.submit({ meta: meta(a), frame: encodeDelta(vec(now + seq), F32) }, now).ok).toBe(true);
        expect(c.nextAssignment(a.islandId, now)).toEqual({ ok: true, value: null }); // waits for the round
      }
      expect(c.version).toBe(round); // all in, but the grace deadline (opened + 2 s floor) has not passed
      const deadline = c.nextDeadline();
      expect(deadline).toBe(opened + 2000);
      c.tick(deadline - 1);
      expect(c.version).toBe(round);
      now = deadline;
      c.tick(now);
      expect(c.version).toBe(round + 1);
      const evs = c.drainEvents();
      const [u] = updates(evs);
      expect(u.contributors).toHaveLength(2);
      expect(u.stats.shortClose).toBe('members-in');
      const closed = evs.find((e) => e.type === 'round' && e.state === 'closed');
      expect(closed?.type === 'round' && closed.shortClose).toBe('members-in');
      // the members were told to wait; their next assignments come as events on the new version
      work = evs.flatMap((e) => (e.type === 'assignment' && e.result.ok ? [e.result.value] : []));
      expect(work.map((a) => a.baseVersion)).toEqual([round + 1, round + 1]);
    }
    expect(c.totals().shortRounds).toBe(4);
  });

  it('closes at the round timeout when a live member stays silent; a full round is not short', () => {
    const c = coord(2);
    const [a, b] = joinAll(c, 2, 0);
    c.submit({ meta: meta(a), frame: encodeDelta(vec(1), F32) }, 500); // b is alive but silent
    expect(c.nextDeadline()).toBe(30_000);
    c.tick(29_999);
    expect(c.version).toBe(0);
    c.tick(30_000);
    expect(c.version).toBe(1);
    const [u] = updates(c.drainEvents());
    expect(u.stats.shortClose).toBe('timeout');
    // b's late delta and a's next round make two: a round at minContributors closes as before, not short
    const next = c.nextAssignment(a.islandId, 30_001);
    if (!next.ok || !next.value) throw new Error('expected an assignment');
    c.submit({ meta: meta(b), frame: encodeDelta(vec(2), F32) }, 30_100);
    c.submit({ meta: meta(next.value), frame: encodeDelta(vec(3), F32) }, 31_000);
    c.tick(c.nextDeadline());
    const later = updates(c.drainEvents());
    expect(later).toHaveLength(1);
    expect(later[0].stats.shortClose).toBeUndefined();
    expect(c.totals().shortRounds).toBe(1);
  });

  it('closes at once when no member is alive any more', () => {
    const c = coord(3);
    const [a, b] = joinAll(c, 2, 0);
    c.submit({ meta: meta(a), frame: encodeDelta(vec(1), F32) }, 100);
    c.leave(b.islandId, 200);
    expect(c.version).toBe(0); // a is in and alive: the grace still holds the round open for a joiner
    c.leave(a.islandId, 300);
    expect(c.version).toBe(1);
    expect(updates(c.drainEvents())[0].stats.shortClose).toBe('none-live');
  });
});
