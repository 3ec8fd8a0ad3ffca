// Butterfly mixing over real WebRTC data channels (node-datachannel, libdatachannel, on loopback
// with host candidates only): four members signal through a relay standing in for the server's
// `mix:signal`, swap their committed frames along the butterfly, and each reduces its fragment,
// bit for bit the fragment the server recomputes; a later group of other members reuses the links
// of the pairs it shares with the first (no signalling for them); a member killed mid-exchange
// leaves its peers with a failed exchange (their fallback is the direct upload), not a hang; a
// downlink ring of members no group held together all-gathers an update over the links groups left.

import { RTCPeerConnection } from 'node-datachannel/polyfill';
import { afterAll, describe, expect, it } from 'vitest';
import { type SignalPort, type RtcPeerConstructor, WebRtcPeerNet } from '../client/island/mix-webrtc.ts';
import type { MemberPlan } from '../client/island/mix-member.ts';
import { decodeDelta, encodeDelta } from '../core/codec/index.ts';
import {
  canonicalFragment,
  exchange,
  fragmentRanges,
  joinPieces,
  mixWeights,
  pieceRange,
} from '../core/mix/butterfly.ts';
import { sha256Hex } from '../core/mix/commit.ts';
import { gaussian, mulberry32 } from '../core/random.ts';

/** The server's relay: net n's signal in group g to member `to` reaches that member's net, from = n's index in g; each is logged. */
function relay(
  nets: number,
  groups: Map<number, number[]>,
  log: Array<{ g: number; from: number; to: number }>,
): SignalPort[] {
  const listeners: Array<(g: number, from: number, kind: 'offer' | 'answer' | 'candidate', data: string) => void> = [];
  return Array.from({ length: nets }, (_, n) => ({
    send: (g, to, kind, data) => {
      const order = groups.get(g)!,
        from = order.indexOf(n);
      log.push({ g, from, to });
      setTimeout(() => listeners[order[to]]?.(g, from, kind, data), 1);
    },
    onSignal: (l) => {
      listeners[n] = l;
    },
  }));
}

const nets: WebRtcPeerNet[] = [];
afterAll(() => {
  for (const n of nets) n.close();
});

describe('butterfly mixing over WebRTC (node-datachannel)', () => {
  it('four members swap committed frames and reduce their fragments; a later group reuses the pairs it shares; a member killed mid-exchange fails its peers fast', async () => {
    const k = 4,
      n = 5000;
    const r = gaussian(mulberry32(11));
    // five islands (nets), by net index: group 1 is nets 0-3, group 3 nets 0, 1, 2, 4, group 2 nets 0-3 again
    const frames = Array.from({ length: 5 }, () =>
      encodeDelta(
        Float32Array.from({ length: n }, () => r() * 1e-2),
        { encoding: 'int8', blockSize: 64, deflate: true },
      ),
    );
    const tokens = [128, 256, 256, 384, 128];
    const groups = new Map([
      [1, [0, 1, 2, 3]],
      [3, [0, 1, 2, 4]],
      [2, [0, 1, 2, 3]],
    ]);
    const linked = new Map([[3, [[1, 2], [0], [0], []]]]); // group 3: the pairs 0-1 and 0-2 were partners in group 1
    const plan = (groupId: number, index: number): MemberPlan => {
      const order = groups.get(groupId)!;
      return {
        groupId,
        index,
        ranges: fragmentRanges(n, k, 64),
        weights: mixWeights(order.map((x) => tokens[x])),
        members: order.map((x) => ({
          islandId: `island-${x + 1}`,
          frameHash: sha256Hex(frames[x]),
          tokens: tokens[x],
        })),
        ...(linked.has(groupId) ? { linked: linked.get(groupId)![index] } : {}),
      };
    };
    const log: Array<{ g: number; from: number; to: number }> = [];
    const signals = relay(5, groups, log);
    for (let i = 0; i < 5; i++)
      nets.push(new WebRtcPeerNet(RTCPeerConnection as unknown as RtcPeerConstructor, signals[i], [], 6_000));
    const run = (g: number, i: number) => {
      const p = plan(g, i),
        x = groups.get(g)![i];
      const reusedAll = nets[x].join(p);
      return {
        reusedAll,
        held: exchange(
          i,
          k,
          frames[x],
          nets[x].channel(
            `g${g}`,
            i,
            p.members.map((m) => m.islandId),
          ),
          (j, b) => sha256Hex(b) === p.members[j].frameHash,
        ),
      };
    };
    const t0 = performance.now();
    const held = await Promise.all([0, 1, 2, 3].map((i) => run(1, i).held));
    const ms = performance.now() - t0;
    const xs = frames.slice(0, 4).map((f) => {
      const d = decodeDelta(f, n);
      if (!d.ok) throw new Error(d.error.message);
      return d.value.slice();
    });
    const p = plan(1, 0);
    for (let i = 0; i < k; i++) {
      expect(held[i]!.map((b) => sha256Hex(b))).toEqual(frames.slice(0, 4).map((f) => sha256Hex(f)));
      const mine = canonicalFragment(
        held[i]!.map((b) => {
          const d = decodeDelta(b, n);
          return d.ok ? d.value.slice() : null;
        }),
        p.weights,
        p.ranges[i],
      );
      expect(mine).toEqual(canonicalFragment(xs, p.weights, p.ranges[i]));
    }
    // butterfly partners only: 4 pairs of the 6
    expect(new Set(log.filter((s) => s.g === 1).map((s) => [s.from, s.to].sort().join('-')))).toEqual(
      new Set(['0-1', '0-2', '1-3', '2-3']),
    );
    console.log(`mix-webrtc: 4-member exchange over data channels (connect + 2 stages) in ${ms.toFixed(0)} ms`);
    // group 3, other members: the links of the pairs it shares with group 1 carry it, signalled never again
    const t2 = performance.now();
    const third = [0, 1, 2, 3].map((i) => run(3, i));
    expect(third.map((x) => x.reusedAll)).toEqual([true, false, false, false]);
    const held3 = await Promise.all(third.map((x) => x.held));
    for (const h of held3) expect(h!.map((b) => sha256Hex(b))).toEqual([0, 1, 2, 4].map((x) => sha256Hex(frames[x])));
    const signalled3 = log.filter((s) => s.g === 3).map((s) => [s.from, s.to].sort().join('-'));
    expect(new Set(signalled3)).toEqual(new Set(['1-3', '2-3']));
    console.log(
      `mix-webrtc: a group sharing 2 of its 4 pairs with the first in ${(performance.now() - t2).toFixed(0)} ms, ${signalled3.length} signals (all for the 2 new pairs)`,
    );
    // a downlink ring no group had (nets 3 and 4 never met), over the links groups 1 and 3 left:
    // an update frame's 4 pieces all-gathered with no plan and no signalling
    const ring = [3, 1, 2, 4],
      update = frames[0],
      signalsBefore = log.length;
    const ringIds = ring.map((x) => `island-${x + 1}`);
    const gathered = await Promise.all(
      ring.map((x, i) =>
        exchange(i, k, update.slice(...pieceRange(update.length, k, i)), nets[x].channel('d99@7', i, ringIds)),
      ),
    );
    for (const g of gathered) expect(sha256Hex(joinPieces(g!))).toBe(sha256Hex(update));
    expect(log.length).toBe(signalsBefore);
    // group 2: member 3 connects afresh, then dies (1.2 s in: its channels are open) without sending its stage-0 message
    const doomed = plan(2, 3);
    nets[3].join(doomed);
    setTimeout(() => nets[3].close(), 1200);
    const t1 = performance.now();
    let partnerMs = Infinity;
    const rest = await Promise.all(
      [0, 1, 2].map((i) =>
        run(2, i).held.then((x) => {
          if (i === 2) partnerMs = performance.now() - t1;
          return x;
        }),
      ),
    );
    // its stage-0 partner sees the channel close well before the 6 s timeout; the others stop at
    // their timeout here (live, the server's mix:abort stops them as soon as the partner reports)
    expect(rest).toEqual([null, null, null]);
    expect(partnerMs).toBeLessThan(4000);
    console.log(`mix-webrtc: the dead member's partner gave up after ${partnerMs.toFixed(0)} ms`);
  }, 60_000);
});
