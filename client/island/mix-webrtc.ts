// Butterfly mixing's data channels over WebRTC: one RTCPeerConnection per peer of a group, one
// ordered reliable data channel ('atoll-mix') on it, signalled through the server (`mix:signal`,
// non-trickle: the offer and answer carry every gathered candidate). The browser passes its native
// RTCPeerConnection; the Node island passes node-datachannel's (`node-datachannel/polyfill`,
// libdatachannel). No node: or DOM imports: the constructor comes in.
//
// A message on the channel: 1 byte key length, the key (UTF-8: which exchange, e.g. `g12` for a
// group's Δs, `d12@40` for version 40's pieces), 1 byte stage, then packPieces' bytes.

import { type PieceChannel, packPieces, unpackPieces } from '../../core/mix/butterfly.ts';
import type { MemberPlan, PeerNet } from './mix-member.ts';

/** The parts of the standard RTCPeerConnection API used here. */
export interface RtcPeer {
  createDataChannel(label: string, init?: { ordered?: boolean }): RtcChannel;
  createOffer(): Promise<{ type: string; sdp?: string }>;
  createAnswer(): Promise<{ type: string; sdp?: string }>;
  setLocalDescription(d: { type: string; sdp?: string }): Promise<void>;
  setRemoteDescription(d: { type: string; sdp?: string }): Promise<void>;
  readonly localDescription: { type: string; sdp: string } | null;
  readonly iceGatheringState: string;
  addEventListener(type: 'icegatheringstatechange' | 'datachannel', l: (e: { channel?: RtcChannel }) => void): void;
  close(): void;
}

export interface RtcChannel {
  binaryType: string;
  readonly readyState: string;
  send(data: Uint8Array): void;
  addEventListener(type: 'open' | 'close' | 'message', l: (e: { data?: unknown }) => void): void;
  close(): void;
}

export type RtcPeerConstructor = new (cfg: { iceServers: MemberPlanIce[] }) => RtcPeer;
type MemberPlanIce = { urls: string | string[]; username?: string; credential?: string };

/** The server's signalling relay (`mix:signal`), as the member sees it. */
export interface SignalPort {
  send(groupId: number, to: number, kind: 'offer' | 'answer' | 'candidate', data: string): void;
  onSignal(l: (groupId: number, from: number, kind: 'offer' | 'answer' | 'candidate', data: string) => void): void;
}

interface Link {
  channel: Promise<RtcChannel | null>;
  peer: RtcPeer;
  closed: boolean;
}

interface Waiter { resolve(m: Uint8Array | null): void }

/** WebRTC data channels to the peers of this island's groups. */
export class WebRtcPeerNet implements PeerNet {
  private readonly links = new Map<string, Link>();
  private readonly mail = new Map<string, Uint8Array>();
  private readonly waiters = new Map<string, Waiter>();
  private readonly plans = new Map<number, MemberPlan>();
  private readonly pendingOffers = new Map<string, string>();
  private readonly linkWaiters = new Map<string, Array<(c: RtcChannel | null) => void>>();

  constructor(private readonly RTC: RtcPeerConstructor, private readonly signal: SignalPort, private readonly iceServers: MemberPlanIce[] = [], private readonly timeoutMs = 10_000) {
    signal.onSignal((g, from, kind, data) => this.onSignal(g, from, kind, data));
  }

  /** Connects to every peer of a group as soon as it is announced (the lower index offers). */
  join(plan: MemberPlan): void {
    this.plans.set(plan.groupId, plan);
    for (let j = 0; j < plan.members.length; j++) {
      if (j === plan.index) continue;
      if (plan.index < j) this.connect(plan.groupId, j, true);
      else {
        const offer = this.pendingOffers.get(`${plan.groupId}/${j}`);
        if (offer !== undefined) { this.pendingOffers.delete(`${plan.groupId}/${j}`); this.answer(plan.groupId, j, offer); }
      }
    }
  }

  /** Closes a group's connections (its exchange and downlink are over). */
  leave(groupId: number): void {
    for (const [k, l] of this.links) if (k.startsWith(`${groupId}/`)) { l.closed = true; l.peer.close(); this.links.delete(k); }
    this.plans.delete(groupId);
    // an exchange still waiting on this group's peers ends now (the server called the group off)
    for (const slot of [...this.waiters.keys()]) if (slot.startsWith(`${groupId}/`)) this.wake(slot, null);
    for (const [k, l] of this.linkWaiters) if (k.startsWith(`${groupId}/`)) { this.linkWaiters.delete(k); for (const w of l) w(null); }
    for (const k of [...this.mail.keys()]) if (k.startsWith(`${groupId}/`)) this.mail.delete(k);
  }

  channel(key: string, _index: number, _members: string[]): PieceChannel {
    const groupId = Number(/^[a-z](\d+)/.exec(key)?.[1] ?? NaN);
    return {
      send: async (to, stage, pieces) => {
        const ch = await this.channelTo(`${groupId}/${to}`);
        if (!ch || ch.readyState !== 'open') return;
        const body = packPieces(pieces), k = new TextEncoder().encode(key);
        const msg = new Uint8Array(2 + k.length + body.length);
        msg[0] = k.length; msg.set(k, 1); msg[1 + k.length] = stage; msg.set(body, 2 + k.length);
        ch.send(msg);
      },
      recv: async (from, stage) => {
        const m = await this.take(`${groupId}/${from}|${key}|${stage}`);
        return m && unpackPieces(m);
      },
    };
  }

  /** The open channel to a peer; the answerer's link exists only once the offer arrived, so wait for it. */
  private channelTo(name: string): Promise<RtcChannel | null> {
    const link = this.links.get(name);
    if (link) return link.channel;
    return new Promise((resolve) => {
      const list = this.linkWaiters.get(name) ?? [];
      list.push(resolve);
      this.linkWaiters.set(name, list);
      setTimeout(() => resolve(null), this.timeoutMs);
    });
  }

  private take(slot: string): Promise<Uint8Array | null> {
    const m = this.mail.get(slot);
    if (m) { this.mail.delete(slot); return Promise.resolve(m); }
    // no link yet: the partner's offer is on its way (the timeout covers one that never comes)
    if (this.links.get(slot.slice(0, slot.indexOf('|')))?.closed) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.waiters.set(slot, { resolve });
      setTimeout(() => this.wake(slot, null), this.timeoutMs);
    });
  }

  private wake(slot: string, m: Uint8Array | null): void {
    const w = this.waiters.get(slot);
    if (w) { this.waiters.delete(slot); w.resolve(m); } else if (m) this.mail.set(slot, m);
  }

  private connect(groupId: number, peer: number, offerer: boolean, remoteOffer?: string): void {
    const pc = new this.RTC({ iceServers: this.plans.get(groupId)?.iceServers ?? this.iceServers });
    const name = `${groupId}/${peer}`;
    let opened: (c: RtcChannel | null) => void = () => {};
    const link: Link = { peer: pc, closed: false, channel: new Promise((r) => (opened = r)) };
    this.links.set(name, link);
    for (const w of this.linkWaiters.get(name) ?? []) void link.channel.then(w);
    this.linkWaiters.delete(name);
    const wire = (ch: RtcChannel) => {
      ch.binaryType = 'arraybuffer';
      ch.addEventListener('open', () => opened(ch));
      ch.addEventListener('close', () => this.closed(name, link));
      ch.addEventListener('message', (e) => this.onMessage(name, e.data));
      if (ch.readyState === 'open') opened(ch);
    };
    const gathered = new Promise<void>((resolve) => {
      if (pc.iceGatheringState === 'complete') resolve();
      pc.addEventListener('icegatheringstatechange', () => { if (pc.iceGatheringState === 'complete') resolve(); });
    });
    setTimeout(() => opened(null), this.timeoutMs);
    void (async () => {
      try {
        if (offerer) {
          wire(pc.createDataChannel('atoll-mix', { ordered: true }));
          await pc.setLocalDescription(await pc.createOffer());
          await gathered;
          this.signal.send(groupId, peer, 'offer', pc.localDescription!.sdp);
        } else {
          pc.addEventListener('datachannel', (e) => { if (e.channel) wire(e.channel); });
          await pc.setRemoteDescription({ type: 'offer', sdp: remoteOffer });
          await pc.setLocalDescription(await pc.createAnswer());
          await gathered;
          this.signal.send(groupId, peer, 'answer', pc.localDescription!.sdp);
        }
      } catch {
        this.closed(name, link);
      }
    })();
  }

  private answer(groupId: number, from: number, sdp: string): void { this.connect(groupId, from, false, sdp); }

  private onSignal(groupId: number, from: number, kind: string, data: string): void {
    const plan = this.plans.get(groupId);
    if (kind === 'offer') {
      if (plan && plan.index > from) this.answer(groupId, from, data);
      else if (!plan) this.pendingOffers.set(`${groupId}/${from}`, data); // the offer beat the plan
    } else if (kind === 'answer') {
      void this.links.get(`${groupId}/${from}`)?.peer.setRemoteDescription({ type: 'answer', sdp: data }).catch(() => {});
    }
  }

  private onMessage(name: string, data: unknown): void {
    const b = data instanceof ArrayBuffer ? new Uint8Array(data) : data instanceof Uint8Array ? data : null;
    if (!b || b.length < 2 || b.length < 2 + b[0]) return;
    const key = new TextDecoder().decode(b.subarray(1, 1 + b[0]));
    this.wake(`${name}|${key}|${b[1 + b[0]]}`, b.subarray(2 + b[0]));
  }

  private closed(name: string, link: Link): void {
    link.closed = true;
    for (const slot of [...this.waiters.keys()]) if (slot.startsWith(`${name}|`)) this.wake(slot, null);
  }
}
