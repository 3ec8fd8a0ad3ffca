// Butterfly mixing's data channels over WebRTC: one RTCPeerConnection per peer of a group, one
// ordered reliable data channel ('atoll-mix') on it, signalled through the server (`mix:signal`,
// non-trickle: the offer and answer carry every gathered candidate). The page's main thread passes
// the browser's native RTCPeerConnection (its worker's island reaches it through mix-relay.ts); the
// Node island passes node-datachannel's (`node-datachannel/polyfill`, libdatachannel). No node: or
// DOM imports: the constructor comes in.
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
  readonly connectionState: string;
  addEventListener(type: 'icegatheringstatechange' | 'connectionstatechange' | 'datachannel', l: (e: { channel?: RtcChannel }) => void): void;
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
  /** The ready channel (both sides listening), or null: the peer never came. */
  channel: Promise<RtcChannel | null>;
  open(c: RtcChannel | null): void;
  /** The current attempt's connection. */
  peer: RtcPeer | null;
  closed: boolean;
  ready: boolean;
  attempts: number;
}

/** A connection not ready this long is tried again (opens take ~20 ms, or ~1 s after a retransmit). */
const RETRY_MS = 2500;
const MAX_ATTEMPTS = 4;

interface Waiter { resolve(m: Uint8Array | null): void }

/** Stage messages held before their exchange asks for them, at most (a group of 16 over log2 16 stages, pieces too, needs far fewer). */
const MAIL_KEPT = 256;

/** The link handshake: a key length of 0 marks a control message (1: hello, 2: ack). */
const HELLO = Uint8Array.of(0, 1);
const ACK = Uint8Array.of(0, 2);

/** The group an exchange key names (`g12`, `d12@40`: group 12). */
export function groupOf(key: string): number {
  return Number(/^[a-z](\d+)/.exec(key)?.[1] ?? NaN);
}

/** A stage message: 1 byte key length, the key, 1 byte stage, then packPieces' bytes. */
export function wireMessage(key: string, stage: number, pieces: Map<number, Uint8Array>): Uint8Array {
  const body = packPieces(pieces), k = new TextEncoder().encode(key);
  const msg = new Uint8Array(2 + k.length + body.length);
  msg[0] = k.length; msg.set(k, 1); msg[1 + k.length] = stage; msg.set(body, 2 + k.length);
  return msg;
}

function asBytes(data: unknown): Uint8Array | null {
  return data instanceof ArrayBuffer ? new Uint8Array(data) : data instanceof Uint8Array ? data : null;
}

/** WebRTC data channels to the peers of this island's groups. */
/** A member's data channels to its groups' peers: joined per plan (reusing the last group's links when it can), left when done. */
export interface GroupNet extends PeerNet {
  /** Connects to a group's peers; resolves whether the previous group's open links were reused. */
  join(plan: MemberPlan): boolean | Promise<boolean>;
  leave(groupId: number): void;
}

export class WebRtcPeerNet implements GroupNet {
  private readonly links = new Map<string, Link>();
  private readonly mail = new Map<string, Uint8Array>();
  private readonly waiters = new Map<string, Waiter>();
  private readonly plans = new Map<number, MemberPlan>();
  private readonly pendingOffers = new Map<string, string>();
  private readonly linkWaiters = new Map<string, Array<(c: RtcChannel | null) => void>>();
  /** Groups left (done, or called off by the server), the last 64. */
  private readonly ended = new Set<number>();

  constructor(private readonly RTC: RtcPeerConstructor, private readonly signal: SignalPort, private readonly iceServers: MemberPlanIce[] = [], private readonly timeoutMs = 10_000) {
    signal.onSignal((g, from, kind, data) => this.onSignal(g, from, kind, data));
  }

  /**
   * Connects to every peer of a group as soon as it is announced (the lower index offers), or, when
   * the plan reuses the previous group (same members, same order) whose links are all open, takes
   * those links over without signalling. Returns whether it reused them.
   */
  join(plan: MemberPlan): boolean {
    if (this.ended.has(plan.groupId)) return false; // called off before its plan was read: its exchange fails at once
    this.plans.set(plan.groupId, plan);
    const peers = plan.members.map((_, j) => j).filter((j) => j !== plan.index);
    const old = plan.reuse;
    if (old !== undefined && peers.every((j) => { const l = this.links.get(`${old}/${j}`); return l && l.ready && !l.closed; })) {
      for (const j of peers) this.links.set(`${plan.groupId}/${j}`, this.links.get(`${old}/${j}`)!);
      // keep the previous group's names (its last pieces may still be on their way), forget older ones
      for (const [k, l] of [...this.links]) if (!k.startsWith(`${old}/`) && !k.startsWith(`${plan.groupId}/`) && peers.some((j) => this.links.get(`${old}/${j}`) === l)) this.links.delete(k);
      for (const g of [...this.plans.keys()]) if (g !== old && g !== plan.groupId) this.plans.delete(g);
      return true;
    }
    for (let j = 0; j < plan.members.length; j++) {
      if (j === plan.index) continue;
      if (plan.index < j) this.connect(plan.groupId, j, true);
      else {
        const offer = this.pendingOffers.get(`${plan.groupId}/${j}`);
        if (offer !== undefined) { this.pendingOffers.delete(`${plan.groupId}/${j}`); this.answer(plan.groupId, j, offer); }
      }
    }
    return false;
  }

  /** Closes a group's connections (its exchange and downlink are over). */
  leave(groupId: number): void {
    this.ended.add(groupId);
    if (this.ended.size > 64) this.ended.delete(this.ended.values().next().value!);
    for (const [k, l] of this.links) if (k.startsWith(`${groupId}/`)) { l.closed = true; l.peer?.close(); this.links.delete(k); l.open(null); }
    this.plans.delete(groupId);
    // an exchange still waiting on this group's peers ends now (the server called the group off)
    for (const slot of [...this.waiters.keys()]) if (slot.startsWith(`${groupId}/`)) this.wake(slot, null);
    for (const [k, l] of this.linkWaiters) if (k.startsWith(`${groupId}/`)) { this.linkWaiters.delete(k); for (const w of l) w(null); }
    for (const k of [...this.mail.keys()]) if (k.startsWith(`${groupId}/`)) this.mail.delete(k);
  }

  channel(key: string, _index: number, _members: string[]): PieceChannel {
    const groupId = groupOf(key);
    return {
      send: (to, stage, pieces) => this.sendWire(groupId, to, wireMessage(key, stage, pieces)),
      recv: async (from, stage) => {
        const m = await this.recvBody(groupId, key, from, stage);
        return m && unpackPieces(m);
      },
    };
  }

  /** Sends a stage message (wireMessage's bytes) to a group's peer, once their link is ready. */
  async sendWire(groupId: number, to: number, msg: Uint8Array): Promise<void> {
    const ch = await this.channelTo(`${groupId}/${to}`);
    if (ch && ch.readyState === 'open') ch.send(msg);
  }

  /** A peer's stage message of exchange `key`, its packPieces bytes (null: the peer or the group is gone). */
  recvBody(groupId: number, key: string, from: number, stage: number): Promise<Uint8Array | null> {
    return this.take(`${groupId}/${from}|${key}|${stage}`);
  }

  /** The open channel to a peer; the answerer's link exists only once the offer arrived, so wait for it. */
  private channelTo(name: string): Promise<RtcChannel | null> {
    const link = this.links.get(name);
    if (link) return link.channel;
    if (this.ended.has(Number(name.slice(0, name.indexOf('/'))))) return Promise.resolve(null);
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
    if (this.ended.has(Number(slot.slice(0, slot.indexOf('/'))))) return Promise.resolve(null);
    // no link yet: the partner's offer is on its way (the timeout covers one that never comes)
    if (this.links.get(slot.slice(0, slot.indexOf('|')))?.closed) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.waiters.set(slot, { resolve });
      setTimeout(() => this.wake(slot, null), this.timeoutMs);
    });
  }

  private wake(slot: string, m: Uint8Array | null): void {
    const w = this.waiters.get(slot);
    if (w) { this.waiters.delete(slot); w.resolve(m); } else if (m) {
      // a peer's messages nobody waits for yet (it ran ahead): kept, but a peer cannot fill memory with them
      this.mail.set(slot, m);
      if (this.mail.size > MAIL_KEPT) this.mail.delete(this.mail.keys().next().value!);
    }
  }

  /** The link to a group's peer: one per pair, whatever attempts its connection takes. */
  private link(groupId: number, peer: number): Link {
    const name = `${groupId}/${peer}`;
    const had = this.links.get(name);
    if (had) return had;
    let resolve: (c: RtcChannel | null) => void = () => {};
    const link: Link = { peer: null, closed: false, ready: false, attempts: 0, channel: new Promise((r) => (resolve = r)), open: () => {} };
    link.open = (c) => { if (!link.ready) { link.ready = c !== null; resolve(c); } };
    this.links.set(name, link);
    for (const w of this.linkWaiters.get(name) ?? []) void link.channel.then(w);
    this.linkWaiters.delete(name);
    setTimeout(() => link.open(null), this.timeoutMs);
    return link;
  }

  /**
   * One attempt at a pair's connection. libdatachannel on loopback leaves a few connections of a
   * group never open (or closing by themselves): the offerer starts over with a fresh connection
   * and offer when one is not ready within RETRY_MS or fails, up to MAX_ATTEMPTS; the answerer
   * answers each new offer with a fresh connection.
   */
  private connect(groupId: number, peer: number, offerer: boolean, remoteOffer?: string): void {
    const name = `${groupId}/${peer}`;
    const link = this.link(groupId, peer);
    if (link.ready || link.closed) return;
    link.peer?.close();
    const pc = new this.RTC({ iceServers: this.plans.get(groupId)?.iceServers ?? this.iceServers });
    link.peer = pc;
    const attempt = ++link.attempts;
    const current = () => link.peer === pc && !link.closed;
    const retry = () => {
      if (offerer && current() && !link.ready && attempt === link.attempts && attempt < MAX_ATTEMPTS) this.connect(groupId, peer, true);
    };
    // Open is not enough: a message that reaches a side before its 'message' listener is attached
    // (the answerer's channel comes in an event) is lost (node-datachannel#25). So each side says
    // hello until it hears the other's hello or ack: then both listen, and the link is ready.
    const wire = (ch: RtcChannel) => {
      ch.binaryType = 'arraybuffer';
      let ready = false, timer: ReturnType<typeof setInterval> | null = null;
      const hello = () => { try { if (ch.readyState === 'open') ch.send(HELLO); } catch { /* closing */ } };
      const greet = () => {
        if (timer || ready) return;
        hello();
        timer = setInterval(hello, 100);
        setTimeout(() => { if (timer) clearInterval(timer); }, this.timeoutMs);
      };
      ch.addEventListener('open', greet);
      ch.addEventListener('close', () => {
        if (timer) clearInterval(timer);
        if (!current()) return;
        if (link.ready) this.closed(link); else retry();
      });
      ch.addEventListener('message', (e) => {
        const b = asBytes(e.data);
        if (b && b.length === 2 && b[0] === 0) {
          if (b[1] === HELLO[1]) try { ch.send(ACK); } catch { /* closing */ }
          if (!ready && current()) { ready = true; if (timer) clearInterval(timer); link.open(ch); }
          return;
        }
        if (b && current()) this.onMessage(peer, b);
      });
      if (ch.readyState === 'open') greet();
    };
    const gathered = new Promise<void>((resolve) => {
      if (pc.iceGatheringState === 'complete') resolve();
      pc.addEventListener('icegatheringstatechange', () => { if (pc.iceGatheringState === 'complete') resolve(); });
    });
    pc.addEventListener('connectionstatechange', () => { if (pc.connectionState === 'failed' || pc.connectionState === 'closed') retry(); });
    if (offerer) setTimeout(retry, RETRY_MS);
    void (async () => {
      try {
        if (offerer) {
          wire(pc.createDataChannel('atoll-mix', { ordered: true }));
          await pc.setLocalDescription(await pc.createOffer());
          await gathered;
          if (current()) this.signal.send(groupId, peer, 'offer', pc.localDescription!.sdp);
        } else {
          pc.addEventListener('datachannel', (e) => { if (e.channel) wire(e.channel); });
          await pc.setRemoteDescription({ type: 'offer', sdp: remoteOffer });
          await pc.setLocalDescription(await pc.createAnswer());
          await gathered;
          if (current()) this.signal.send(groupId, peer, 'answer', pc.localDescription!.sdp);
        }
      } catch {
        if (offerer) retry(); else if (current()) this.closed(link);
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
      void this.links.get(`${groupId}/${from}`)?.peer?.setRemoteDescription({ type: 'answer', sdp: data }).catch(() => {});
    }
  }

  /** A stage message from the peer at index `peer`: its slot names the exchange's group (a reused link carries several). */
  private onMessage(peer: number, b: Uint8Array): void {
    if (b.length < 2 || b[0] === 0 || b.length < 2 + b[0]) return;
    const key = new TextDecoder().decode(b.subarray(1, 1 + b[0]));
    const groupId = /^[a-z](\d+)/.exec(key)?.[1];
    if (groupId !== undefined) this.wake(`${groupId}/${peer}|${key}|${b[1 + b[0]]}`, b.subarray(2 + b[0]));
  }

  /** A link closed: every exchange waiting on it, under any of its names, ends. */
  private closed(link: Link): void {
    link.closed = true;
    const names = [...this.links].filter(([, l]) => l === link).map(([k]) => `${k}|`);
    for (const slot of [...this.waiters.keys()]) if (names.some((n) => slot.startsWith(n))) this.wake(slot, null);
  }
}
