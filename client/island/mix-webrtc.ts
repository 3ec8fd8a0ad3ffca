// Butterfly mixing's data channels over WebRTC: one RTCPeerConnection per pair of islands, one
// ordered reliable data channel ('atoll-mix') on it, signalled through the server (`mix:signal`,
// non-trickle: the offer and answer carry every gathered candidate) the first time a group pairs
// them, kept across groups (at most MIX_LINKS_KEPT, least recently used closed first) and reused
// whenever a later plan lists the partner as `linked`; a link lost is reported (`mix:lost`). The page's main thread
// passes the browser's native RTCPeerConnection (its worker's island reaches it through mix-relay.ts); the Node island
// passes node-datachannel's (`node-datachannel/polyfill`, libdatachannel). No node: or DOM imports: the constructor
// comes in.
//
// A message on the channel: 1 byte key length, the key (UTF-8: which exchange, e.g. `g12` for a
// group's Δs, `d12@40` for version 40's pieces), 1 byte stage, then packPieces' bytes.

import { type PieceChannel, butterflyPartners, packPieces, unpackPieces } from '../../core/mix/butterfly.ts';
import { MIX_LINKS_KEPT } from '../../core/protocol.ts';
import type {
  GroupNet,
  LinkPlan,
  MemberPlanIce,
  RtcChannel,
  RtcPeer,
  RtcPeerConstructor,
  SignalPort,
} from './rtc-types.ts';

export type { GroupNet, LinkPlan, RtcChannel, RtcPeer, RtcPeerConstructor, SignalPort } from './rtc-types.ts';

/** The data channel to one other island. */
interface Link {
  peerId: string;
  /** The group whose signalling made it, and the peer's index there (where its signals go). */
  groupId: number;
  index: number;
  /** This side sent the offer. */
  offerer: boolean;
  /** The ready channel (both sides listening), or null: it never opened. */
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
/** Plans kept (the current group, earlier ones whose exchanges may still run, rings signalling new links). */
const PLANS_KEPT = 8;

interface Waiter {
  resolve(m: Uint8Array | null): void;
}

/**
 * Stage messages held before their exchange asks for them, at most (a group of 16 over log2 16 stages, pieces too,
 * needs far fewer).
 */
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
  const body = packPieces(pieces),
    k = new TextEncoder().encode(key);
  const msg = new Uint8Array(2 + k.length + body.length);
  msg[0] = k.length;
  msg.set(k, 1);
  msg[1 + k.length] = stage;
  msg.set(body, 2 + k.length);
  return msg;
}

function asBytes(data: unknown): Uint8Array | null {
  return data instanceof ArrayBuffer ? new Uint8Array(data) : data instanceof Uint8Array ? data : null;
}

/** A mailbox slot: group, sending island, exchange key, stage. */
const slotOf = (groupId: number, peerId: string, key: string, stage: number) => `${groupId}/${peerId}|${key}|${stage}`;

export class WebRtcPeerNet implements GroupNet {
  /** By peer island id, least recently used first. */
  private readonly links = new Map<string, Link>();
  private readonly mail = new Map<string, Uint8Array>();
  private readonly waiters = new Map<string, Waiter>();
  private readonly plans = new Map<number, LinkPlan>();
  private readonly pendingOffers = new Map<string, string>();
  private readonly linkWaiters = new Map<string, Array<(c: RtcChannel | null) => void>>();
  /** Groups left (done, or called off by the server), the last 64. */
  private readonly ended = new Set<number>();
  /** Resolved (null) when the group is left: a send waiting on a link that never opens stops there. */
  private readonly endings = new Map<number, { done: Promise<null>; end(): void }>();

  constructor(
    private readonly RTC: RtcPeerConstructor,
    private readonly signal: SignalPort,
    private readonly iceServers: MemberPlanIce[] = [],
    private readonly timeoutMs = 10_000,
  ) {
    signal.onSignal((g, from, kind, data) => this.onSignal(g, from, kind, data));
  }

  /** Islands with a link open or opening (tests, the page's log). */
  get linkCount(): number {
    return this.links.size;
  }

  /**
   * Connects to a group's butterfly partners as soon as it is announced: a partner the plan lists
   * as linked over the open link to it (a link this side lost is offered afresh, whatever the
   * indices: the peer's answer replaces its own); any other, afresh (the lower index offers).
   * Returns whether every partner was linked already.
   */
  join(plan: LinkPlan): boolean {
    if (this.ended.has(plan.groupId)) return false; // called off before its plan was read: its exchange fails at once
    this.plans.set(plan.groupId, plan);
    for (const g of [...this.plans.keys()].slice(0, -PLANS_KEPT)) this.leave(g);
    const linked = new Set(plan.linked ?? []);
    let all = true;
    for (const j of butterflyPartners(plan.index, plan.members.length)) {
      const id = plan.members[j].islandId;
      const had = this.links.get(id);
      if (linked.has(j) && had && !had.closed) {
        this.touch(id, had);
        continue;
      }
      all = false;
      if (plan.index < j || linked.has(j)) {
        this.connect(id, plan.groupId, j, true);
        continue;
      }
      // the peer offers: a link left from before is done with (the server saw it lost, or forgot it)
      if (had) this.drop(had);
      const offer = this.pendingOffers.get(`${plan.groupId}/${j}`);
      if (offer !== undefined) {
        this.pendingOffers.delete(`${plan.groupId}/${j}`);
        this.connect(id, plan.groupId, j, false, offer);
      }
    }
    return all;
  }

  /** The group's exchanges are over (or called off): their waits end; the links stay for later groups. */
  leave(groupId: number): void {
    this.ended.add(groupId);
    if (this.ended.size > 64) this.ended.delete(this.ended.values().next().value!);
    this.plans.delete(groupId);
    this.endings.get(groupId)?.end();
    this.endings.delete(groupId);
    // a link this group was signalling and that is not open yet never will be (the server relays no more for it)
    for (const l of [...this.links.values()]) if (l.groupId === groupId && !l.ready) this.lost(l);
    for (const slot of [...this.waiters.keys()]) if (slot.startsWith(`${groupId}/`)) this.wake(slot, null);
    for (const k of [...this.mail.keys()]) if (k.startsWith(`${groupId}/`)) this.mail.delete(k);
    for (const k of [...this.pendingOffers.keys()]) if (k.startsWith(`${groupId}/`)) this.pendingOffers.delete(k);
  }

  /** Closes every link (the island is going away). */
  close(): void {
    for (const l of [...this.links.values()]) this.drop(l, true);
    for (const g of [...this.plans.keys()]) this.leave(g);
  }

  /** An exchange's channel among `members` (a group's, or a downlink ring's: no plan, links made by earlier groups). */
  channel(key: string, _index: number, members: string[]): PieceChannel {
    const groupId = groupOf(key);
    return {
      send: (to, stage, pieces) => this.sendWire(groupId, members[to], wireMessage(key, stage, pieces)),
      recv: async (from, stage) => {
        const m = await this.recvBody(groupId, key, members[from], stage);
        return m && unpackPieces(m);
      },
    };
  }

  /**
   * Sends a stage message (wireMessage's bytes) to island `id` in group or ring `groupId`, once their link is ready.
   */
  async sendWire(groupId: number, id: string | undefined, msg: Uint8Array): Promise<void> {
    // a ring has no plan, and nothing ends it but the link's wait
    const link = id === undefined || this.ended.has(groupId) ? null : this.channelTo(groupId, id);
    const ch = link && (this.plans.has(groupId) ? await Promise.race([link, this.ending(groupId)]) : await link);
    if (ch && ch.readyState === 'open') ch.send(msg);
  }

  /** Island `id`'s stage message of exchange `key`, its packPieces bytes (null: the peer or the group is gone). */
  recvBody(groupId: number, key: string, id: string | undefined, stage: number): Promise<Uint8Array | null> {
    if (id === undefined) return Promise.resolve(null);
    const slot = slotOf(groupId, id, key, stage);
    const m = this.mail.get(slot);
    if (m) {
      this.mail.delete(slot);
      return Promise.resolve(m);
    }
    if (this.ended.has(groupId) || this.links.get(id)?.closed) return Promise.resolve(null);
    // no link yet: the partner's offer is on its way (the timeout covers one that never comes)
    return new Promise((resolve) => {
      this.waiters.set(slot, { resolve });
      setTimeout(() => this.wake(slot, null), this.timeoutMs);
    });
  }

  private ending(groupId: number): Promise<null> {
    let e = this.endings.get(groupId);
    if (!e) {
      let end = () => {};
      const done = new Promise<null>((r) => (end = () => r(null)));
      this.endings.set(groupId, (e = { done, end }));
    }
    return e.done;
  }

  /** The open channel to a peer; the answerer's link exists only once the offer arrived, so wait for it. */
  private channelTo(groupId: number, id: string): Promise<RtcChannel | null> {
    const link = this.links.get(id);
    if (link) return link.channel;
    if (this.ended.has(groupId)) return Promise.resolve(null);
    return new Promise((resolve) => {
      const list = this.linkWaiters.get(id) ?? [];
      list.push(resolve);
      this.linkWaiters.set(id, list);
      setTimeout(() => resolve(null), this.timeoutMs);
    });
  }

  private wake(slot: string, m: Uint8Array | null): void {
    const w = this.waiters.get(slot);
    if (w) {
      this.waiters.delete(slot);
      w.resolve(m);
    } else if (m) {
      // a peer's messages nobody waits for yet (it ran ahead): kept, but a peer cannot fill memory with them
      this.mail.set(slot, m);
      if (this.mail.size > MAIL_KEPT) this.mail.delete(this.mail.keys().next().value!);
    }
  }

  /** Most recently used last; beyond MIX_LINKS_KEPT the least recently used link closes. */
  private touch(id: string, link: Link): void {
    this.links.delete(id);
    this.links.set(id, link);
    while (this.links.size > MIX_LINKS_KEPT) {
      const oldest = this.links.values().next().value!;
      this.drop(oldest, true);
      this.signal.lost?.(oldest.peerId, oldest.groupId);
    }
  }

  /**
   * Closes a link deliberately, reporting nothing: replaced by a new link to the same peer (whose
   * waits go on), or evicted or closing down (`endWaits`: the waits on the peer end now).
   */
  private drop(link: Link, endWaits = false): void {
    link.closed = true;
    if (this.links.get(link.peerId) === link) this.links.delete(link.peerId);
    link.peer?.close();
    link.open(null);
    if (endWaits) this.endWaits(link.peerId);
  }

  /** A link closed or never opened by itself: every exchange waiting on it ends, and the server hears of it. */
  private lost(link: Link): void {
    if (link.closed) return;
    link.closed = true;
    link.open(null);
    this.endWaits(link.peerId);
    if (this.links.get(link.peerId) === link) this.signal.lost?.(link.peerId, link.groupId);
  }

  private endWaits(peerId: string): void {
    for (const slot of [...this.waiters.keys()]) if (slot.includes(`/${peerId}|`)) this.wake(slot, null);
  }

  /**
   * One attempt at a pair's connection (a new link replaces the pair's old one). libdatachannel on
   * loopback leaves a few connections never open (or closing by themselves): the offerer starts
   * over with a fresh connection and offer when one is not ready within RETRY_MS or fails, up to
   * MAX_ATTEMPTS; the answerer answers each new offer with a fresh connection.
   */
  private connect(
    id: string,
    groupId: number,
    index: number,
    offerer: boolean,
    remoteOffer?: string,
    link?: Link,
  ): void {
    if (!link) {
      const old = this.links.get(id);
      if (old) this.drop(old);
      let resolve: (c: RtcChannel | null) => void = () => {};
      const made: Link = {
        peerId: id,
        groupId,
        index,
        offerer,
        peer: null,
        closed: false,
        ready: false,
        attempts: 0,
        channel: new Promise((r) => (resolve = r)),
        open: () => {},
      };
      made.open = (c) => {
        if (!made.ready) {
          made.ready = c !== null;
          resolve(c);
        }
      };
      link = made;
      this.touch(id, made);
      for (const w of this.linkWaiters.get(id) ?? []) void made.channel.then(w);
      this.linkWaiters.delete(id);
      setTimeout(() => {
        if (!made.ready) this.lost(made);
      }, this.timeoutMs);
    }
    const l = link;
    if (l.ready || l.closed) return;
    l.peer?.close();
    const pc = new this.RTC({ iceServers: this.plans.get(groupId)?.iceServers ?? this.iceServers });
    l.peer = pc;
    const attempt = ++l.attempts;
    const current = () => l.peer === pc && !l.closed;
    const retry = () => {
      if (offerer && current() && !l.ready && attempt === l.attempts && attempt < MAX_ATTEMPTS)
        this.connect(id, groupId, index, true, undefined, l);
    };
    // Open is not enough: a message that reaches a side before its 'message' listener is attached
    // (the answerer's channel comes in an event) is lost (node-datachannel#25). So each side says
    // hello until it hears the other's hello or ack: then both listen, and the link is ready.
    const wire = (ch: RtcChannel) => {
      ch.binaryType = 'arraybuffer';
      let ready = false,
        timer: ReturnType<typeof setInterval> | null = null;
      const hello = () => {
        try {
          if (ch.readyState === 'open') ch.send(HELLO);
        } catch {
          /* closing */
        }
      };
      const greet = () => {
        if (timer || ready) return;
        hello();
        timer = setInterval(hello, 100);
        setTimeout(() => {
          if (timer) clearInterval(timer);
        }, this.timeoutMs);
      };
      ch.addEventListener('open', greet);
      ch.addEventListener('close', () => {
        if (timer) clearInterval(timer);
        if (!current()) return;
        if (l.ready) this.lost(l);
        else retry();
      });
      ch.addEventListener('message', (e) => {
        const b = asBytes(e.data);
        if (b && b.length === 2 && b[0] === 0) {
          if (b[1] === HELLO[1])
            try {
              ch.send(ACK);
            } catch {
              /* closing */
            }
          if (!ready && current()) {
            ready = true;
            if (timer) clearInterval(timer);
            l.open(ch);
          }
          return;
        }
        if (b && current()) this.onMessage(id, b);
      });
      if (ch.readyState === 'open') greet();
    };
    const gathered = new Promise<void>((resolve) => {
      if (pc.iceGatheringState === 'complete') resolve();
      pc.addEventListener('icegatheringstatechange', () => {
        if (pc.iceGatheringState === 'complete') resolve();
      });
    });
    pc.addEventListener('connectionstatechange', () => {
      if (pc.connectionState !== 'failed' && pc.connectionState !== 'closed') return;
      if (l.ready && current()) this.lost(l);
      else retry();
    });
    if (offerer) setTimeout(retry, RETRY_MS);
    void (async () => {
      try {
        if (offerer) {
          wire(pc.createDataChannel('atoll-mix', { ordered: true }));
          await pc.setLocalDescription(await pc.createOffer());
          await gathered;
          if (current()) this.signal.send(groupId, index, 'offer', pc.localDescription!.sdp);
        } else {
          pc.addEventListener('datachannel', (e) => {
            if (e.channel) wire(e.channel);
          });
          await pc.setRemoteDescription({ type: 'offer', sdp: remoteOffer });
          await pc.setLocalDescription(await pc.createAnswer());
          await gathered;
          if (current()) this.signal.send(groupId, index, 'answer', pc.localDescription!.sdp);
        }
      } catch {
        if (offerer) retry();
        else if (current()) this.lost(l);
      }
    })();
  }

  /**
   * A partner's offer replaces the pair's link (the partner had none), except while this side, the
   * lower index, is itself offering for the pair: the partner answers that one instead. A new offer
   * for a link this side is answering and that is not open yet is a retry: same link, new connection.
   */
  private onSignal(groupId: number, from: number, kind: string, data: string): void {
    const plan = this.plans.get(groupId);
    const id = plan?.members[from]?.islandId;
    if (kind === 'offer') {
      if (!plan) {
        if (!this.ended.has(groupId)) this.pendingOffers.set(`${groupId}/${from}`, data);
        return;
      } // the offer beat the plan
      if (id === undefined || from === plan.index) return;
      const mine = this.links.get(id);
      const opening = mine && !mine.ready && !mine.closed;
      if (plan.index < from && opening && mine.offerer) return;
      // the offerer's retry of a link still opening: the same link (sends may be waiting on it), a fresh connection
      this.connect(
        id,
        groupId,
        from,
        false,
        data,
        opening && !mine.offerer && mine.groupId === groupId ? mine : undefined,
      );
    } else if (kind === 'answer' && id !== undefined) {
      const l = this.links.get(id);
      if (l?.offerer && !l.ready) void l.peer?.setRemoteDescription({ type: 'answer', sdp: data }).catch(() => {});
    }
  }

  /** A stage message from island `peerId`: its key names the exchange and its group (one link carries many groups'). */
  private onMessage(peerId: string, b: Uint8Array): void {
    if (b.length < 2 || b[0] === 0 || b.length < 2 + b[0]) return;
    const key = new TextDecoder().decode(b.subarray(1, 1 + b[0]));
    const groupId = groupOf(key);
    if (Number.isInteger(groupId) && !this.ended.has(groupId))
      this.wake(slotOf(groupId, peerId, key, b[1 + b[0]]), b.subarray(2 + b[0]));
  }
}
