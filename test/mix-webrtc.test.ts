// Butterfly mixing over real WebRTC data channels (node-datachannel, libdatachannel, on loopback
// with host candidates only): four members signal through a relay standing in for the server's
// `mix:signal`, swap their committed frames along the butterfly, and each reduces its fragment,
// bit for bit the fragment the server recomputes; a member killed mid-exchange leaves its peers
// with a failed exchange (their fallback is the direct upload), not a hang.

import { RTCPeerConnection } from 'node-datachannel/polyfill';
import { afterAll, describe, expect, it } from 'vitest';
import { type SignalPort, type RtcPeerConstructor, WebRtcPeerNet } from '../client/island/mix-webrtc.ts';
import type { MemberPlan } from '../client/island/mix-member.ts';
import { decodeDelta, encodeDelta } from '../core/codec/index.ts';
import { canonicalFragment, exchange, fragmentRanges, mixWeights } from '../core/mix/butterfly.ts';
import { sha256Hex } from '../core/mix/commit.ts';
import { gaussian, mulberry32 } from '../core/random.ts';

/** The server's relay: member i's signals to member j arrive at j with from = i. */
function relay(k: number): SignalPort[] {
  const listeners: Array<(g: number, from: number, kind: 'offer' | 'answer' | 'candidate', data: string) => void> = [];
  return Array.from({ length: k }, (_, i) => ({
    send: (g, to, kind, data) => setTimeout(() => listeners[to]?.(g, i, kind, data), 1),
    onSignal: (l) => { listeners[i] = l; },
  }));
}

const nets: WebRtcPeerNet[] = [];
afterAll(() => { for (const n of nets) n.leave(1); });

describe('butterfly mixing over WebRTC (node-datachannel)', () => {
  it('four members swap committed frames and reduce their fragments; a member killed mid-exchange fails its peers fast', async () => {
    const k = 4, n = 5000;
    const r = gaussian(mulberry32(11));
    const frames = Array.from({ length: k }, () => encodeDelta(Float32Array.from({ length: n }, () => r() * 1e-2), { encoding: 'int8', blockSize: 64, deflate: true }));
    const tokens = [128, 256, 256, 384];
    const plan = (groupId: number, index: number): MemberPlan => ({
      groupId, index, ranges: fragmentRanges(n, k, 64), weights: mixWeights(tokens),
      members: frames.map((f, m) => ({ islandId: `island-${m + 1}`, meta: {} as never, frameHash: sha256Hex(f), tokens: tokens[m], readyAt: 0 })),
    });
    const signals = relay(k);
    for (let i = 0; i < k; i++) nets.push(new WebRtcPeerNet(RTCPeerConnection as unknown as RtcPeerConstructor, signals[i], [], 15_000));
    const ids = frames.map((_, m) => `island-${m + 1}`);
    const run = (g: number, i: number) => {
      const p = plan(g, i);
      nets[i].join(p);
      return exchange(i, k, frames[i], nets[i].channel(`g${g}`, i, ids), (j, b) => sha256Hex(b) === p.members[j].frameHash);
    };
    const t0 = performance.now();
    const held = await Promise.all(frames.map((_, i) => run(1, i)));
    const ms = performance.now() - t0;
    const xs = frames.map((f) => { const d = decodeDelta(f, n); if (!d.ok) throw new Error(d.error.message); return d.value.slice(); });
    const p = plan(1, 0);
    for (let i = 0; i < k; i++) {
      expect(held[i]!.map((b) => sha256Hex(b))).toEqual(frames.map((f) => sha256Hex(f)));
      const mine = canonicalFragment(held[i]!.map((b) => { const d = decodeDelta(b, n); return d.ok ? d.value.slice() : null; }), p.weights, p.ranges[i]);
      expect(mine).toEqual(canonicalFragment(xs, p.weights, p.ranges[i]));
    }
    console.log(`mix-webrtc: 4-member exchange over data channels (connect + 2 stages) in ${ms.toFixed(0)} ms`);
    // group 2: member 3 connects, then dies (1.2 s in: its channels are open) without sending its stage-0 message
    const doomed = plan(2, 3);
    nets[3].join(doomed);
    setTimeout(() => nets[3].leave(2), 1200);
    const t1 = performance.now();
    let partnerMs = Infinity;
    const rest = await Promise.all([0, 1, 2].map((i) => run(2, i).then((x) => { if (i === 2) partnerMs = performance.now() - t1; return x; })));
    // its stage-0 partner sees the channel close well before the 15 s timeout; the others stop at
    // their timeout here (live, the server's mix:abort stops them as soon as the partner reports)
    expect(rest).toEqual([null, null, null]);
    expect(partnerMs).toBeLessThan(4000);
    console.log(`mix-webrtc: the dead member's partner gave up after ${partnerMs.toFixed(0)} ms`);
  }, 60_000);
});
