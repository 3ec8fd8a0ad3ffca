// A group member's side of butterfly mixing, as a Transport around the island's own: submitDelta
// commits to the Δ's hash, waits to be grouped, runs the reduce-scatter with its peers and uploads
// its fragment; any failure (no group formed, a peer dropped or stalled, the server fell back)
// ends in the plain direct upload of the same (meta, frame), so nothing is lost and the seq keeps
// it from counting twice. Pushed update pieces are all-gathered from the group and checked against
// the update's hash before the runtime sees them; a wrong piece means fetching the update whole.
// No node: imports: the browser, the Node island and the simulator run it with their own MixPort.

import { type CodecOptions, decodeDelta, encodeDelta } from '../../core/codec/index.ts';
import { type CheckUpload, type FragmentUpload, type GroupPlan, type Replay, transcriptHash } from '../../core/mix/broker.ts';
import { type PeerChannel, type PieceChannel, allGather, reduceScatter, treeSum, weighted } from '../../core/mix/butterfly.ts';
import { sha256Hex } from '../../core/mix/commit.ts';
import type { AckMsg, Assignment, DeltaMeta, HelloMsg, ModelSnapshotMsg, UpdateMsg } from '../../core/protocol.ts';
import { type Result, ok } from '../../core/result.ts';
import type { HelloResult, Transport } from './transport.ts';

/** Updates kept for catch-up (fetchUpdates) after they were delivered. */
const RECENT_KEPT = 16;

/** The stage tag of spot-check pieces for fragment j (reduce-scatter stages are 0..log2 k − 1). */
export const CHECK_STAGE = 64;

/** A pushed piece of an update: the update without its frame, the frame's SHA-256, and this member's byte piece. */
export interface UpdatePiece {
  update: Omit<UpdateMsg, 'frame'>;
  frameHash: string;
  groupId: number;
  index: number;
  /** The group's island ids in member order. */
  members: string[];
  piece: Uint8Array;
}

/** The member's group as the server announced it. */
export interface MemberPlan extends GroupPlan { index: number }

/** The member's link to the server for mixing (signalling + fragments); socket.io live, in-process in the simulator. */
export interface MixPort {
  /** Commits (frame hash) and waits to be grouped: the plan, or null to upload directly. */
  ready(meta: DeltaMeta, frameHash: string): Promise<MemberPlan | null>;
  /** Uploads this member's fragment (null: its exchange failed). The ack of its own Δ, or 'direct' to upload directly. */
  fragment(groupId: number, up: FragmentUpload | null): Promise<AckMsg | 'direct'>;
  /** The server's requests to this member while its group settles. */
  serve(handlers: MemberHandlers): void;
  onPiece(listener: (p: UpdatePiece) => void): void;
}

/** What the server may ask of a member while its group settles. */
export interface MemberHandlers {
  /** Recompute fragment j from every member's piece and upload it (a spot check). */
  check(groupId: number, j: number): Promise<CheckUpload | null>;
  /** Send this member's weighted piece of fragment j to the checker. */
  piece(groupId: number, j: number, checker: number): Promise<void>;
  /** Upload the whole Δ frame committed to, and the exchange's transcript (an audit). */
  replay(groupId: number): Promise<Replay | null>;
}

/** The member's data channels to the peers of a group (WebRTC live, in-process links in the simulator). */
export interface PeerNet {
  channel(plan: MemberPlan): PeerChannel;
  pieces(key: string, index: number, members: string[]): PieceChannel;
}

export interface MixMemberOptions {
  /** Rewrites the fragment before it is encoded (the simulator's lying member; honest: absent). */
  tamper?: (fragment: Float32Array) => void;
  /** Counts of what happened (the simulator's report). */
  stats?: MixMemberStats;
}

export interface MixMemberStats { mixed: number; direct: number; piecesOk: number; piecesRefetched: number }

export class MixMember implements Transport {
  private codec: CodecOptions | null = null;
  private readonly held = new Map<number, { x: Float32Array; frame: Uint8Array; plan: MemberPlan; sent: string[]; received: string[] }>();
  /** Updates seen lately (pushed whole or all-gathered), and all-gathers in flight, by version. */
  private readonly recent = new Map<number, UpdateMsg>();
  private readonly gathering = new Map<number, Promise<void>>();
  private readonly listeners = new Set<(m: UpdateMsg) => void>();
  readonly stats: MixMemberStats;

  constructor(private readonly inner: Transport, private readonly port: MixPort, private readonly net: PeerNet, private readonly n: number, private readonly opts: MixMemberOptions = {}) {
    this.stats = opts.stats ?? { mixed: 0, direct: 0, piecesOk: 0, piecesRefetched: 0 };
    port.serve({ check: (g, j) => this.check(g, j), piece: (g, j, c) => this.sendCheckPiece(g, j, c), replay: async (g) => {
      const h = this.held.get(g);
      return h ? { frame: h.frame, sent: h.sent, received: h.received } : null;
    } });
    port.onPiece((p) => this.onPiece(p));
    inner.onUpdate((m) => this.deliver(m));
  }

  private see(a: Assignment | null): void { if (a) this.codec = a.codec; }

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

  fetchModel(): Promise<Result<ModelSnapshotMsg>> { return this.inner.fetchModel(); }
  /**
   * Catch-up: an update whose pieces are still being all-gathered is waited for, not fetched again
   * from the server (the runtime asks as soon as its assignment names a newer base version); the
   * server is asked only for what follows the updates held here.
   */
  async fetchUpdates(from: number): Promise<Result<UpdateMsg[]>> {
    await Promise.all([...this.gathering].filter(([v]) => v > from).map(([, p]) => p));
    const held: UpdateMsg[] = [];
    for (let v = from + 1; this.recent.has(v); v++) held.push(this.recent.get(v)!);
    const r = await this.inner.fetchUpdates(from + held.length);
    return r.ok ? ok([...held, ...r.value]) : held.length ? ok(held) : r;
  }
  close(reason: string): Promise<void> { return this.inner.close(reason); }

  onUpdate(listener: (m: UpdateMsg) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    const codec = this.codec;
    const x = decodeDelta(frame, this.n);
    const plan = codec && x.ok ? await this.port.ready(meta, sha256Hex(frame)) : null;
    if (!plan || !codec || !x.ok) return this.direct(meta, frame);
    const h = { x: x.value.slice(), frame, plan, sent: [] as string[], received: [] as string[] };
    this.held.set(plan.groupId, h);
    try {
      const rs = await reduceScatter(plan.index, plan.members.length, x.value, plan.weights, plan.ranges, this.net.channel(plan));
      let up: FragmentUpload | null = null;
      if (rs) {
        this.opts.tamper?.(rs.fragment);
        h.sent = rs.log.sent.map((v) => sha256Hex(v));
        h.received = rs.log.received.map((v) => sha256Hex(v));
        up = { frame: encodeDelta(rs.fragment, codec), transcript: transcriptHash(h.sent, h.received) };
      }
      const ack = await this.port.fragment(plan.groupId, up);
      if (ack === 'direct') return this.direct(meta, frame);
      this.stats.mixed++;
      return ok(ack);
    } finally {
      this.held.delete(plan.groupId);
    }
  }

  private direct(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    this.stats.direct++;
    return this.inner.submitDelta(meta, frame);
  }

  /** A spot check: fragment j recomputed from every member's weighted piece (the butterfly's tree order). */
  private async check(groupId: number, j: number): Promise<CheckUpload | null> {
    const h = this.held.get(groupId);
    if (!h || !this.codec) return null;
    const { plan, x } = h;
    const ch = this.net.channel(plan);
    const [lo, hi] = plan.ranges[j];
    const mine = weighted(x.subarray(lo, hi), plan.weights[plan.index]);
    const pieces = await Promise.all(plan.members.map((_, m) => (m === plan.index ? Promise.resolve(mine) : ch.recv(m, CHECK_STAGE + j))));
    if (pieces.some((p) => !p || p.length !== hi - lo)) return null;
    const received = pieces.map((p) => sha256Hex(p!));
    const sum = treeSum(pieces.map((p) => p!.slice()));
    this.opts.tamper?.(sum);
    return { frame: encodeDelta(sum, this.codec), transcript: '', received };
  }

  /** Another member checks fragment j: send it this member's weighted piece. */
  private async sendCheckPiece(groupId: number, j: number, checker: number): Promise<void> {
    const h = this.held.get(groupId);
    if (!h) return;
    const [lo, hi] = h.plan.ranges[j];
    await this.net.channel(h.plan).send(checker, CHECK_STAGE + j, weighted(h.x.subarray(lo, hi), h.plan.weights[h.plan.index]));
  }

  private deliver(m: UpdateMsg): void {
    this.recent.set(m.version, m);
    this.recent.delete(m.version - RECENT_KEPT);
    for (const l of this.listeners) l(m);
  }

  private onPiece(p: UpdatePiece): void {
    const v = p.update.version;
    if (this.recent.has(v) || this.gathering.has(v)) return;
    const done = this.gather(p).finally(() => this.gathering.delete(v));
    this.gathering.set(v, done);
  }

  private async gather(p: UpdatePiece): Promise<void> {
    const k = p.members.length;
    const whole = await allGather(p.index, k, p.piece, this.net.pieces(`${p.groupId}@${p.update.version}`, p.index, p.members));
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
