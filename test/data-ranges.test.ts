// The range ledger (core/coord/data-ranges.ts) against a plain reference: a state per token per
// epoch (free, held, trained), driven by random takes, partial trains, releases and islands leaving.

import { describe, expect, it } from 'vitest';
import { encodeDelta } from '../core/codec/index.ts';
import { Coordinator } from '../core/coord/index.ts';
import { DataRanges, type TokenRange } from '../core/coord/data-ranges.ts';
import type { Assignment, DeltaMeta } from '../core/protocol.ts';
import { rangeBatch } from '../core/data/shards.ts';
import { mulberry32 } from '../core/random.ts';

const SHARDS = [
  { name: 'a.bin', tokens: 1000 },
  { name: 'b.bin', tokens: 437 },
  { name: 'c.bin', tokens: 64 },
];

describe('DataRanges', () => {
  it('draws in order, shortens at a shard end, opens the next epoch only when nothing fits, serves old ranges first', () => {
    const d = new DataRanges([
      { name: 'a', tokens: 100 },
      { name: 'b', tokens: 35 },
    ]);
    expect(d.take('i1', 1, 3, 10)).toEqual({ range: { shard: 'a', offset: 0, length: 30 }, steps: 3 });
    expect(d.take('i2', 1, 10, 10)).toEqual({ range: { shard: 'a', offset: 30, length: 70 }, steps: 7 });
    expect(d.take('i3', 1, 10, 10)).toEqual({ range: { shard: 'b', offset: 0, length: 30 }, steps: 3 });
    // b's last 5 tokens hold no step: epoch 1 opens, while epoch 0 still has ranges in flight
    expect(d.take('i4', 1, 2, 10)?.range).toEqual({ shard: 'a', offset: 0, length: 20 });
    expect(d.status().epoch).toBe(1);
    d.release('i2', 1); // back to epoch 0: served before epoch 1's
    expect(d.take('i5', 1, 2, 10)?.range).toEqual({ shard: 'a', offset: 30, length: 20 });
    d.trained('i1', 1, 2); // two of its three steps: a 20..30 is free again in epoch 0
    expect(d.take('i6', 1, 5, 10)?.range).toEqual({ shard: 'a', offset: 20, length: 10 });
    const st = d.status();
    expect(st.shards[0].trained).toBe(20);
    expect(st.inFlight.map((r) => r.islandId).sort()).toEqual(['i3', 'i4', 'i5', 'i6']);
    d.releaseGone((id) => id === 'i4');
    expect(d.rangeOf('i4', 1)).toBeUndefined();
    expect(d.rangeOf('i5', 1)).toEqual({ shard: 'a', offset: 30, length: 20 });
    // a submitted Δ's range stays when its island goes
    d.submitted('i5', 1);
    d.releaseIsland('i5');
    d.refused('i5', 1); // a resend refused at submit: the accepted Δ keeps it
    expect(d.rangeOf('i5', 1)).toBeDefined();
    d.refused('i6', 1);
    expect(d.rangeOf('i6', 1)).toBeUndefined();
    // the state survives a snapshot
    expect(new DataRanges(d.state()).status()).toEqual(d.status());
  });

  it('agrees with a per-token reference over random work: every epoch trains each token once, tails skipped', () => {
    const rnd = mulberry32(42);
    const d = new DataRanges(SHARDS);
    const ref = new Map<number, Uint8Array[]>(); // epoch → per shard, per token: 0 free, 1 held, 2 trained
    const epochOf = (e: number) => {
      if (!ref.has(e))
        ref.set(
          e,
          SHARDS.map((s) => new Uint8Array(s.tokens)),
        );
      return ref.get(e)!;
    };
    const si = (name: string) => SHARDS.findIndex((s) => s.name === name);
    const held: { island: string; round: number; epoch: number; range: TokenRange; unit: number }[] = [];
    const trained = SHARDS.map(() => 0);
    const set = (e: number, r: TokenRange, to: number) =>
      epochOf(e)[si(r.shard)].fill(to, r.offset, r.offset + r.length);
    let closed = 0;
    let skipped = 0;
    for (let op = 0; op < 4000 && closed < 6; op++) {
      const u = rnd();
      if (u < 0.5 || held.length === 0) {
        const unit = 8 * (1 + Math.floor(rnd() * 3));
        const island = `i${Math.floor(rnd() * 5)}`,
          round = op;
        const got = d.take(island, round, 1 + Math.floor(rnd() * 12), unit);
        expect(got).not.toBeNull();
        const e = d.status().inFlight.find((x) => x.islandId === island && x.roundId === round)!.epoch;
        const states = epochOf(e)[si(got!.range.shard)].subarray(
          got!.range.offset,
          got!.range.offset + got!.range.length,
        );
        expect(states.every((x) => x === 0)).toBe(true); // never held or trained twice in an epoch
        expect(got!.range.length).toBe(got!.steps * unit);
        set(e, got!.range, 1);
        held.push({ island, round, epoch: e, range: got!.range, unit });
      } else {
        const k = Math.floor(rnd() * held.length);
        const h = held.splice(k, 1)[0];
        if (u < 0.8) {
          const steps = Math.floor(rnd() * (h.range.length / h.unit + 1));
          d.trained(h.island, h.round, steps);
          const done = steps * h.unit;
          set(h.epoch, { ...h.range, length: done }, 2);
          set(h.epoch, { ...h.range, offset: h.range.offset + done, length: h.range.length - done }, 0);
          trained[si(h.range.shard)] += done;
        } else {
          d.release(h.island, h.round);
          set(h.epoch, h.range, 0);
        }
      }
      const st = d.status();
      expect(st.shards.map((s) => s.trained)).toEqual(trained);
      while (st.epochsDone > closed) {
        // the closed epoch: nothing held, every token trained once but a skipped tail under a step
        const states = epochOf(closed);
        let free = 0;
        for (const s of states)
          for (const x of s) {
            expect(x).not.toBe(1);
            if (x === 0) free++;
          }
        skipped += free;
        closed++;
      }
      expect(st.skipped).toBe(skipped);
    }
    expect(closed).toBeGreaterThanOrEqual(3);
    expect(skipped).toBeLessThan(closed * SHARDS.length * 24);
  });

  it('rangeBatch reads each token of a round range once, in order', () => {
    const B = 2,
      T = 4;
    const tokens = new Uint16Array(3 * B * (T + 1)).map((_, i) => i);
    const seen: number[] = [];
    for (let s = 0; s < 3; s++) {
      const b = rangeBatch(tokens, B, T, s);
      for (let r = 0; r < B; r++) {
        seen.push(b.inputs[r * T], ...b.targets.subarray(r * T, r * T + T));
        expect([...b.inputs.subarray(r * T + 1, r * T + T)]).toEqual([...b.targets.subarray(r * T, r * T + T - 1)]);
      }
    }
    expect(seen).toEqual([...tokens]);
    expect(() => rangeBatch(tokens, B, T, 3)).toThrow(/E_RANGE_SHORT/);
  });
});

describe('the coordinator with a range ledger', () => {
  const N = 64;
  const coord = (ranges?: { name: string; tokens: number }[]) =>
    new Coordinator({
      params: new Float32Array(N).fill(0.1),
      config: {
        mode: 'async',
        uplink: { encoding: 'f32' },
        downlink: { encoding: 'f32', blockSize: 64 },
        normBound: { factor: 0 },
        batchSize: 2,
        seqLen: 8,
        innerSteps: 3,
        dylu: false,
        asyncWindow: { floorMs: 0, capMs: 0, fraction: 0 },
      },
      ...(ranges ? { ranges } : {}),
    });
  let seq = 0;
  const meta = (a: Assignment, steps = a.innerSteps): DeltaMeta => ({
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
  });
  const delta = encodeDelta(new Float32Array(N).fill(1e-3), { encoding: 'f32' });

  it('assigns ranges sized to the round; a rejected Δ or a leaver returns it, a kept Δ trains its steps', () => {
    const c = coord([{ name: 'a.bin', tokens: 100 }]);
    const j = c.join({ caps: { engine: 'cpu' } }, 0);
    const a = j.ok ? j.value.assignment! : null;
    expect(a?.data.range).toEqual({ shard: 'a.bin', offset: 0, length: 3 * 2 * 9 });
    // a Δ that does not decode: rejected, its range goes back
    expect(c.submit({ meta: meta(a!), frame: new Uint8Array(40) }, 1).ok).toBe(false);
    expect(c.dataRanges()!.inFlight).toEqual([]);
    const b = c.nextAssignment(a!.islandId, 2);
    const a2 = b.ok ? b.value! : null;
    // 100 tokens hold 5 steps of 18: the range is the first 54 again
    expect(a2?.data.range).toEqual({ shard: 'a.bin', offset: 0, length: 54 });
    expect(c.submit({ meta: meta(a2!, 2), frame: delta }, 3).ok).toBe(true);
    c.tick(10);
    const st = c.dataRanges()!;
    expect(st.shards[0].trained).toBe(36); // its 2 steps; the third step's tokens are free again
    expect(st.recent).toEqual([
      { islandId: a!.islandId, roundId: a2!.roundId, epoch: 0, shard: 'a.bin', offset: 0, length: 36 },
    ]);
    const n = c.nextAssignment(a!.islandId, 11);
    const a3 = n.ok ? n.value! : null;
    expect(a3?.data.range).toEqual({ shard: 'a.bin', offset: 36, length: 54 });
    c.leave(a!.islandId, 12);
    expect(c.dataRanges()!.inFlight).toEqual([]);
    // the ledger travels in the snapshot
    c.join({ caps: { engine: 'cpu' } }, 13);
    const r = Coordinator.restore(c.snapshot());
    expect(r.ok && r.value.dataRanges()).toEqual(c.dataRanges());
  });

  it('a corpus run: no range in the assignment, no ledger in the snapshot', () => {
    const c = coord();
    const j = c.join({ caps: { engine: 'cpu' } }, 0);
    expect(j.ok && 'range' in j.value.assignment!.data).toBe(false);
    expect(c.dataRanges()).toBeNull();
    expect('dataRanges' in c.snapshot().meta).toBe(false);
  });
});
