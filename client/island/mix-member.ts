// A group member's side of butterfly mixing, as a Transport around the island's own: submitDelta
// commits to its Δ frame's hash, waits to be grouped, swaps frames with its peers along the
// butterfly (each checked against its sender's commitment), reduces its fragment of the group's
// token-weighted mean and uploads it. Any failure (no group formed, a peer dropped, stalled or sent
// a frame that fails its commitment, the server called the group off) ends in the plain direct
// upload of the same (meta, frame): nothing is lost, and the seq keeps it from counting twice.
// Pushed update pieces are exchanged the same way and checked against the update's hash before the
// runtime sees them; a wrong or missing piece means fetching the update whole from the server.
// No node: imports: the browser, the Node island and the simulator run it with their own MixPort.

import { type CodecOptions, decodeDelta, encodeDelta } from '../../core/codec/index.ts';
import type { FragmentUpload } from '../../core/mix/broker.ts';
import { type PieceChannel, canonicalFragment, exchange, joinPieces } from '../../core/mix/butterfly.ts';
import { sha256Hex } from '../../core/mix/commit.ts';
import type {
  AckMsg,
  Assignment,
  DeltaMeta,
  HelloMsg,
  MixPieceMsg,
  MixPlanMsg,
  ModelSnapshotMsg,
  UpdateMsg,
} from '../../core/protocol.ts';
import { type Result, ok } from '../../core/result.ts';
import type { HelloResult, Transport } from './transport.ts';

/** Updates kept for catch-up (fetchUpdates) after they were delivered. */
const RECENT_KEPT = 16;

/** A pushed piece of an update (the `mix:piece` message). */
export type UpdatePiece = MixPieceMsg;

/** The member's group as the server announced it (a MixPlanMsg, its weights computed). */
export type MemberPlan = Pick<MixPlanMsg, 'groupId' | 'index' | 'members' | 'ranges' | 'linked'> &
  Partial<Pick<MixPlanMsg, 'iceServers'>> & {
    /** a_m = fround(w_m / W) (butterfly.ts mixWeights). */
    weights: Float32Array;
  };

/** The member's link to the server for mixing (signalling + fragments); socket.io live, in-process in the simulator. */
export interface MixPort {
  /** The server mixes (live: HelloAnswer.mixGroup ≥ 2): false skips the commitment and the update cache. */
  readonly active: boolean;
  /** Commits (frame hash) and waits to be grouped: the plan, or null to upload directly. */
  ready(meta: DeltaMeta, frameHash: string): Promise<MemberPlan | null>;
  /**
   * Uploads this member's fragment (null: its exchange failed). The ack of its own Δ; 'direct' to
   * upload directly; 'regroup' when its group was called off (a member dropped): ready again, once.
   */
  fragment(groupId: number, up: FragmentUpload | null): Promise<AckMsg | 'direct' | 'regroup'>;
  /** The server's requests to this member while its group settles. */
  serve(handlers: MemberHandlers): void;
  onPiece(listener: (p: UpdatePiece) => void): void;
}

/** What the server may ask of a member while its group settles. */
export interface MemberHandlers {
  /** Recompute fragment j from the frames held: the SHA-256 (hex) of its frame (a spot check). */
  check(groupId: number, j: number): Promise<string | null>;
  /** Upload the whole Δ frame committed to (an audit). */
  replay(groupId: number): Promise<Uint8Array | null>;
}

/**
 * The member's data channels to a group's peers (WebRTC live, in-process links in the simulator); `key` names the
 * exchange.
 */
export interface PeerNet {
  channel(key: string, index: number, members: string[]): PieceChannel;
}

export interface MixMemberOptions {
  /** Rewrites the fragment before it is encoded (the simulator's lying member; honest: absent). */
  tamper?: (fragment: Float32Array) => void;
  /** Counts of what happened (the simulator's report). */
  stats?: MixMemberStats;
}

export interface MixMemberStats {
  mixed: number;
  direct: number;
  piecesOk: number;
  piecesRefetched: number;
}

export class MixMember implements Transport {
  private codec: CodecOptions | null = null;
  /** The latest assignment's base version: the runtime catches up to it (and no further) before training. */
  private base = -1;
  /** Groups this member is in: the frames it holds, until the server settled the group. */
  private readonly held = new Map<number, { xs: Float32Array[]; frame: Uint8Array; plan: MemberPlan }>();
  /** Updates seen lately (pushed whole or exchanged in pieces), and piece exchanges in flight, by version. */
  private readonly recent = new Map<number, UpdateMsg>();
  private readonly gathering = new Map<number, Promise<void>>();
  private readonly listeners = new Set<(m: UpdateMsg) => void>();
  readonly stats: MixMemberStats;

  constructor(
    private readonly inner: Transport,
    private readonly port: MixPort,
    private readonly net: PeerNet,
    private readonly n: number,
    private readonly opts: MixMemberOptions = {},
  ) {
    this.stats = opts.stats ?? { mixed: 0, direct: 0, piecesOk: 0, piecesRefetched: 0 };
    port.serve({ check: async (g, j) => this.check(g, j), replay: async (g) => this.held.get(g)?.frame ?? null });
    port.onPiece((p) => this.onPiece(p));
    inner.onUpdate((m) => this.deliver(m));
  }

  private see(a: Assignment | null): void {
    if (!a) return;
    this.codec = a.codec;
    this.base = a.baseVersion;
  }

  async hello(m: HelloMsg): Promise<Result<HelloResult>> {
    const r = await this.inner.hello(m);
    if (r.ok) this.see(r.value.assignment);
    return r;
  }

  async nextAssignment(): Promise<Result<Assignment>> {
    const r = await this.inner.nextAssignment();
    if (r.ok) this.see(r.value);
    return r;
  }

  fetchModel(): Promise<Result<ModelSnapshotMsg>> {
    return this.inner.fetchModel();
  }
  close(reason: string): Promise<void> {
    return this.inner.close(reason);
  }

  /**
   * Catch-up: an update whose pieces are still being exchanged is waited for, not fetched again from
   * the server (the runtime asks as soon as its assignment names a newer base version); the server
   * is asked only for what follows the updates held here, and not at all when they reach the
   * assignment's base version.
   */
  async fetchUpdates(from: number): Promise<Result<UpdateMsg[]>> {
    await Promise.all([...this.gathering].filter(([v]) => v > from).map(([, p]) => p));
    const held: UpdateMsg[] = [];
    for (let v = from + 1; this.recent.has(v); v++) held.push(this.recent.get(v)!);
    if (held.length > 0 && from + held.length >= this.base) return ok(held);
    const r = await this.inner.fetchUpdates(from + held.length);
    return r.ok ? ok([...held, ...r.value]) : held.length ? ok(held) : r;
  }

  onUpdate(listener: (m: UpdateMsg) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    const codec = this.codec;
    if (!codec || !peekable(frame) || !this.port.active) return this.direct(meta, frame);
    const frameHash = sha256Hex(frame);
    for (let attempt = 0; attempt < 2; attempt++) {
      const plan = await this.port.ready(meta, frameHash);
      if (!plan) break;
      const ack = await this.mix(plan, frame, codec);
      if (ack === 'direct') break;
      if (ack === 'regroup') continue;
      this.stats.mixed++;
      return ok(ack);
    }
    return this.direct(meta, frame);
  }

  /** One group: swap frames, reduce and upload this member's fragment; the server's verdict. */
  private async mix(plan: MemberPlan, frame: Uint8Array, codec: CodecOptions): Promise<AckMsg | 'direct' | 'regroup'> {
    let up: FragmentUpload | null = null;
    const ids = plan.members.map((m) => m.islandId);
    const frames = await exchange(
      plan.index,
      ids.length,
      frame,
      this.net.channel(`g${plan.groupId}`, plan.index, ids),
      (j, b) => sha256Hex(b) === plan.members[j].frameHash,
    );
    const xs = frames?.map((f) => decodeDelta(f, this.n));
    if (xs?.every((x) => x.ok)) {
      const decoded = xs.map((x) => (x.ok ? x.value.slice() : new Float32Array(0)));
      this.held.set(plan.groupId, { xs: decoded, frame, plan });
      up = { frame: this.fragmentFrame(decoded, plan, plan.index, codec) };
    }
    try {
      return await this.port.fragment(plan.groupId, up);
    } finally {
      this.held.delete(plan.groupId);
    }
  }

  /** Fragment j of the group's mean from the frames held, encoded with the run's uplink codec. */
  private fragmentFrame(xs: Float32Array[], plan: MemberPlan, j: number, codec: CodecOptions): Uint8Array {
    const f = canonicalFragment(xs, plan.weights, plan.ranges[j]);
    this.opts.tamper?.(f);
    return encodeDelta(f, codec);
  }

  private direct(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    this.stats.direct++;
    return this.inner.submitDelta(meta, frame);
  }

  /** A spot check: the hash of fragment j recomputed from the frames this member holds. */
  private check(groupId: number, j: number): string | null {
    const h = this.held.get(groupId);
    return h && this.codec ? sha256Hex(this.fragmentFrame(h.xs, h.plan, j, this.codec)) : null;
  }

  private deliver(m: UpdateMsg): void {
    if (this.port.active) {
      this.recent.set(m.version, m);
      this.recent.delete(m.version - RECENT_KEPT);
    }
    for (const l of this.listeners) l(m);
  }

  private onPiece(p: UpdatePiece): void {
    const v = p.update.version;
    if (this.gathering.has(v)) return;
    // an update this member has already (it caught up from the server first) still takes its part
    // in the ring's exchange: its peers need its piece
    if (this.recent.has(v)) {
      void exchange(p.index, p.members.length, p.piece, this.pieceChannel(p));
      return;
    }
    const done = this.gather(p).finally(() => this.gathering.delete(v));
    this.gathering.set(v, done);
  }

  private pieceChannel(p: UpdatePiece) {
    return this.net.channel(`d${p.groupId}@${p.update.version}`, p.index, p.members);
  }

  private async gather(p: UpdatePiece): Promise<void> {
    const pieces = await exchange(p.index, p.members.length, p.piece, this.pieceChannel(p));
    const whole = pieces && joinPieces(pieces);
    if (whole && sha256Hex(whole) === p.frameHash) {
      this.stats.piecesOk++;
      return this.deliver({ ...p.update, frame: whole });
    }
    // a piece was missing or wrong: the update from the server itself
    this.stats.piecesRefetched++;
    const r = await this.inner.fetchUpdates(p.update.prevVersion);
    if (r.ok) for (const u of r.value) if (u.version === p.update.version) this.deliver(u);
  }
}

/** A frame worth mixing: at least a header (the runtime's own frames always are). */
function peekable(frame: Uint8Array): boolean {
  return frame.length >= 32;
}
