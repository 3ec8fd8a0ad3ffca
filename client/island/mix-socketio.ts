// Butterfly mixing's link to the live server: the MixPort and the WebRTC signalling over the
// island's socket.io transport (docs/protocol.md, "Butterfly mixing"), for the Node island and the
// page alike (no node: or DOM imports: the data channels come in, as a GroupNet: the Node island's
// WebRtcPeerNet over node-datachannel, the page worker's RelayPeerNet to its main thread).
//
// `mixingTransport` wraps the island's transport in a MixMember when the server mixes
// (HelloAnswer.mixGroup ≥ 2); otherwise every `ready` answers null at once and the island uploads
// directly, as it does whenever a group does not form or falls apart.

import { type PieceChannel, mixWeights } from '../../core/mix/butterfly.ts';
import { type AckMsg, type DeltaMeta, type MixPlanMsg, type UpdateMsg, mixReadyMeta } from '../../core/protocol.ts';
import {
  type MemberHandlers,
  type MemberPlan,
  MixMember,
  type MixMemberStats,
  type MixPort,
  type PeerNet,
  type UpdatePiece,
} from './mix-member.ts';
import type { GroupNet, SignalPort } from './mix-webrtc.ts';
import { type SocketIoTransport, bytes } from './transport-socketio.ts';

type Verdict = AckMsg | 'direct' | 'regroup';
type SignalKind = 'offer' | 'answer' | 'candidate';
const SIGNAL_KINDS = new Set(['offer', 'answer', 'candidate']);

const isInt = (x: unknown): x is number => Number.isInteger(x) && (x as number) >= 0;

/** A ring that signals new links is left this long after its piece came (its exchange is over by then, or failed). */
const RING_LINKS_MS = 30_000;

/** The island's MixPort and SignalPort over its socket.io transport. */
export class SocketMixPort implements MixPort, SignalPort {
  /** The group whose data channels stay open (exchanging, then receiving pieces). */
  private current: number | null = null;
  /** The operator's ICE servers, from the last plan (a ring that signals new links uses them too). */
  private iceServers: NonNullable<MemberPlan['iceServers']> = [];
  /** The data channels, made on the first `ready` of a server that mixes (null: no WebRTC here). */
  net: GroupNet | null = null;
  private netMade: Promise<GroupNet | null> | null = null;

  constructor(
    private readonly t: SocketIoTransport,
    private readonly makeNet: (signal: SignalPort) => Promise<GroupNet | null>,
  ) {
    t.serve('mix:abort', (m: unknown) => {
      const g = (m as { groupId?: unknown } | null)?.groupId;
      if (isInt(g)) this.leave(g);
    });
  }

  get active(): boolean {
    return (this.t.island?.mixGroup ?? 0) >= 2;
  }

  async ready(meta: DeltaMeta, frameHash: string): Promise<MemberPlan | null> {
    if (!this.active) return null;
    this.netMade ??= this.makeNet(this).then(
      (net) => (this.net = net),
      () => null,
    );
    if (!(await this.netMade)) return null;
    const r = await this.t.request<MixPlanMsg | null>('mix:ready', { meta: mixReadyMeta(meta), frameHash }, 0);
    const p = r.ok ? toPlan(r.value) : null;
    if (!p) return null;
    this.iceServers = p.iceServers ?? [];
    await this.net?.join(p);
    // the server sends the last group no more pieces: its waits end (its links stay, for later groups)
    if (this.current !== null && this.current !== p.groupId) this.leave(this.current);
    this.current = p.groupId;
    return p;
  }

  async fragment(groupId: number, up: { frame: Uint8Array } | null): Promise<Verdict> {
    const r = await this.t.request<unknown>('mix:fragment', { groupId, frame: up?.frame ?? null }, 0);
    if (up) this.t.stats.bytesSent += up.frame.length;
    const v = r.ok ? r.value : 'direct';
    const verdict: Verdict = v === 'regroup' || v === 'direct' ? v : isAck(v) ? v : 'direct';
    // mixed: the group's links carry the pieces of later updates; else they are done with
    if (typeof verdict === 'string' || verdict.status !== 'applied') this.leave(groupId);
    return verdict;
  }

  serve(h: MemberHandlers): void {
    // mix:check's answer is { groupId, hash }, mix:replay's { groupId, frame } (null: cannot)
    const answer = <T>(event: string, field: 'hash' | 'frame', f: (g: number, j: number) => Promise<T | null>) =>
      this.t.serve(event, (m: unknown, ack: unknown) => {
        if (typeof ack !== 'function') return;
        const { groupId, j } = (m ?? {}) as { groupId?: unknown; j?: unknown };
        if (!isInt(groupId) || (event === 'mix:check' && !isInt(j)))
          return (ack as (a: unknown) => void)({ groupId: 0, [field]: null });
        void f(groupId, isInt(j) ? j : 0).then(
          (v) => {
            if (v instanceof Uint8Array) this.t.stats.bytesSent += v.length;
            (ack as (a: unknown) => void)({ groupId, [field]: v });
          },
          () => (ack as (a: unknown) => void)({ groupId, [field]: null }),
        );
      });
    answer('mix:check', 'hash', (g, j) => h.check(g, j));
    answer('mix:replay', 'frame', (g) => h.replay(g));
  }

  onPiece(listener: (p: UpdatePiece) => void): void {
    this.t.serve('mix:piece', (m: unknown) => {
      const p = toPiece(m);
      if (!p) return;
      this.t.stats.bytesReceived += p.piece.length;
      if (!p.linked || !this.net) return listener(p);
      // a ring with new links: connect them as for a group's plan, then exchange at once (the exchange
      // waits for the links; the page's relay reads the join before the exchange's messages). Not
      // after the join: an update the member is gathering is waited for, not asked of the server
      const net = this.net;
      void Promise.resolve(
        net.join({
          groupId: p.groupId,
          index: p.index,
          members: p.members.map((islandId) => ({ islandId })),
          linked: p.linked,
          iceServers: this.iceServers,
        }),
      ).catch(() => false);
      listener(p);
      setTimeout(() => net.leave(p.groupId), RING_LINKS_MS).unref?.();
    });
  }

  send(groupId: number, to: number, kind: SignalKind, data: string): void {
    void this.t.request('mix:signal', { groupId, to, kind, data }, 10_000);
  }

  onSignal(l: (groupId: number, from: number, kind: SignalKind, data: string) => void): void {
    this.t.serve('mix:signal', (m: unknown) => {
      const s = (m ?? {}) as { groupId?: unknown; from?: unknown; kind?: unknown; data?: unknown };
      if (
        isInt(s.groupId) &&
        isInt(s.from) &&
        typeof s.kind === 'string' &&
        SIGNAL_KINDS.has(s.kind) &&
        typeof s.data === 'string'
      )
        l(s.groupId, s.from, s.kind as SignalKind, s.data);
    });
  }

  lost(peer: string, groupId: number): void {
    void this.t.request('mix:lost', { peer, groupId }, 10_000);
  }

  private leave(groupId: number): void {
    this.net?.leave(groupId);
    if (this.current === groupId) this.current = null;
  }
}

/**
 * The island's transport as a group member over WebRTC data channels. `makeNet` gives the
 * platform's data channels, signalling through the port it is handed (null: no WebRTC here), asked
 * only once the server turns out to mix.
 */
export function mixingTransport(
  t: SocketIoTransport,
  makeNet: (signal: SignalPort) => Promise<GroupNet | null>,
  paramCount: number,
  stats?: MixMemberStats,
): MixMember {
  const port = new SocketMixPort(t, makeNet);
  const none: PieceChannel = { send: async () => {}, recv: async () => null };
  const peers: PeerNet = { channel: (key, index, members) => port.net?.channel(key, index, members) ?? none };
  return new MixMember(t, port, peers, paramCount, { stats });
}

function isAck(v: unknown): v is AckMsg {
  const a = v as AckMsg | null;
  return (
    !!a &&
    typeof a === 'object' &&
    typeof a.islandId === 'string' &&
    isInt(a.seq) &&
    (a.status === 'applied' || a.status === 'rejected')
  );
}

/** The server's plan, checked for shape (the server is trusted; a malformed one means: upload directly). */
function toPlan(v: MixPlanMsg | null): MemberPlan | null {
  if (!v || typeof v !== 'object' || !Array.isArray(v.members) || !Array.isArray(v.ranges)) return null;
  const k = v.members.length;
  if (k < 2 || (k & (k - 1)) !== 0 || v.ranges.length !== k || !isInt(v.groupId) || !isInt(v.index) || v.index >= k)
    return null;
  const members = v.members.map((m) => ({
    islandId: String(m.islandId),
    tokens: Number(m.tokens),
    frameHash: String(m.frameHash),
  }));
  if (members.some((m) => !(m.tokens > 0))) return null;
  return {
    groupId: v.groupId,
    index: v.index,
    members,
    ranges: v.ranges,
    weights: mixWeights(members.map((m) => m.tokens)),
    iceServers: Array.isArray(v.iceServers) ? v.iceServers : [],
    linked: Array.isArray(v.linked) ? v.linked.filter((j) => isInt(j) && j < k) : [],
  };
}

function toPiece(m: unknown): UpdatePiece | null {
  const p = m as UpdatePiece | null;
  const piece = p && typeof p === 'object' ? bytes(p.piece) : null;
  if (
    !piece ||
    !p!.update ||
    typeof p!.update !== 'object' ||
    !isInt(p!.groupId) ||
    !isInt(p!.index) ||
    !Array.isArray(p!.members) ||
    typeof p!.frameHash !== 'string'
  )
    return null;
  const u = p!.update as Omit<UpdateMsg, 'frame'>;
  if (!isInt(u.version) || !isInt(u.prevVersion) || typeof u.hash !== 'string') return null;
  const k = p!.members.length;
  if (k < 2 || (k & (k - 1)) !== 0 || p!.index >= k) return null;
  const linked = Array.isArray(p!.linked) ? p!.linked.filter((j) => isInt(j) && j < k) : undefined;
  return {
    ...p!,
    piece,
    members: p!.members.map(String),
    linked,
    update: { ...u, trainLoss: typeof u.trainLoss === 'number' ? u.trainLoss : NaN },
  };
}
