// The volunteer page's relay between its island worker and the peer connections on its main thread
// (client/island/mix-relay.ts), in Node: a MessageChannel stands in for the page's, node-datachannel
// for the browser's RTCPeerConnection. A relayed member and a direct one swap committed frames over a
// real data channel; stage messages cross the port transferred (the sender's buffer is detached,
// not copied); and a main thread whose RTCPeerConnection refuses to be made ends the exchange at
// once (the island then uploads directly) instead of waiting for the timeout.

import { MessageChannel } from 'node:worker_threads';
import { RTCPeerConnection } from 'node-datachannel/polyfill';
import { afterAll, describe, expect, it } from 'vitest';
import type { MemberPlan } from '../client/island/mix-member.ts';
import { RelayPeerNet, type RelayPort, hostPeerNet } from '../client/island/mix-relay.ts';
import { type RtcPeerConstructor, type SignalPort, WebRtcPeerNet } from '../client/island/mix-webrtc.ts';
import { encodeDelta } from '../core/codec/index.ts';
import { exchange, fragmentRanges, mixWeights } from '../core/mix/butterfly.ts';
import { sha256Hex } from '../core/mix/commit.ts';

/** The server's relay: member i's signals to member j arrive at j with from = i. */
function relay(k: number): SignalPort[] {
  const listeners: Array<(g: number, from: number, kind: 'offer' | 'answer' | 'candidate', data: string) => void> = [];
  return Array.from({ length: k }, (_, i) => ({
    send: (g, to, kind, data) => setTimeout(() => listeners[to]?.(g, i, kind, data), 1),
    onSignal: (l) => {
      listeners[i] = l;
    },
  }));
}

const n = 3000;
const frames = [1, 2].map((s) =>
  encodeDelta(
    Float32Array.from({ length: n }, (_, i) => Math.sin(i * s) * 1e-2),
    { encoding: 'int8', blockSize: 64, deflate: false },
  ),
);
const plan = (groupId: number, index: number): MemberPlan => ({
  groupId,
  index,
  ranges: fragmentRanges(n, 2, 64),
  weights: mixWeights([256, 256]),
  members: frames.map((f, m) => ({ islandId: `island-${m}`, frameHash: sha256Hex(f), tokens: 256 })),
});
const ids = ['island-0', 'island-1'];
const check = (p: MemberPlan) => (j: number, b: Uint8Array) => sha256Hex(b) === p.members[j].frameHash;

const closers: Array<() => void> = [];
afterAll(() => {
  for (const c of closers) c();
});

/** The worker's end of a page whose main thread runs `RTC`; the port's messages to the host are recorded. */
function page(RTC: RtcPeerConstructor, signal: SignalPort) {
  const ch = new MessageChannel();
  const host = hostPeerNet(ch.port1 as unknown as RelayPort, RTC, 10_000);
  const sent: unknown[] = [];
  const port = ch.port2 as unknown as RelayPort;
  const post = port.postMessage.bind(port);
  port.postMessage = (m, transfer) => {
    sent.push(m);
    post(m, transfer);
  };
  closers.push(() => {
    host.close();
    ch.port1.close();
    ch.port2.close();
  });
  return { net: new RelayPeerNet(port).use(signal), sent };
}

describe("the page's WebRTC relay (worker ↔ main thread)", () => {
  it('a relayed member and a direct one swap frames over a data channel; stage messages are transferred', async () => {
    const [s0, s1] = relay(2);
    const worker = page(RTCPeerConnection as unknown as RtcPeerConstructor, s0);
    const direct = new WebRtcPeerNet(RTCPeerConnection as unknown as RtcPeerConstructor, s1, [], 10_000);
    closers.push(() => direct.close());
    const [p0, p1] = [plan(1, 0), plan(1, 1)];
    expect(await worker.net.join(p0)).toBe(false);
    direct.join(p1);
    const [a, b] = await Promise.all([
      exchange(0, 2, frames[0], worker.net.channel('g1', 0, ids), check(p0)),
      exchange(1, 2, frames[1], direct.channel('g1', 1, ids), check(p1)),
    ]);
    expect(a!.map(sha256Hex)).toEqual(frames.map(sha256Hex));
    expect(b!.map(sha256Hex)).toEqual(frames.map(sha256Hex));
    // the stage message crossed the port by transfer: the worker's copy is detached
    const stage = worker.sent.find((m) => (m as { t: string }).t === 'send') as { msg: Uint8Array };
    expect(stage.msg.byteLength).toBe(0);
  }, 30_000);

  it('a main thread whose RTCPeerConnection refuses ends the exchange at once', async () => {
    const [s0] = relay(2);
    const Refusing = class {
      constructor() {
        throw new Error('WebRTC is disabled');
      }
    } as unknown as RtcPeerConstructor;
    const worker = page(Refusing, s0);
    const p0 = plan(2, 0);
    const t0 = performance.now();
    expect(await worker.net.join(p0)).toBe(false);
    expect(await exchange(0, 2, frames[0], worker.net.channel('g2', 0, ids), check(p0))).toBeNull();
    expect(performance.now() - t0).toBeLessThan(1000);
  });
});
