// The server's side of butterfly mixing, pure of I/O: it matches islands whose rounds end close
// together into groups of k, then settles each group from what its members upload: the k fragments
// of the group's token-weighted mean, the sampled spot checks, and (on a mismatch) the replayed
// whole Δs that settle who lied. The host (server/mixing.ts live, server/simulate/ in virtual time)
// carries the messages and hands the result to the coordinator, one contribution per member.
//
// Islands are strangers: the weights are the tokens the server assigned (checkWork), never a
// member's claim; a fragment is used only if every member's fragment arrived, and a mismatch is
// settled from Δs that match the hashes their members committed to before the exchange.

import { type CodecOptions, decodeDelta, encodeDelta } from '../codec/index.ts';
import type { DeltaMeta } from '../protocol.ts';
import { canonicalFragment, fragmentRanges, gatherRanges, keptFragments, mixWeights, sentFragments, stagesOf, weighted } from './butterfly.ts';
import { sha256Hex } from './commit.ts';

export interface MixConfig {
  /** Members per group: a power of two ≥ 2. */
  k: number;
  /** A ready island waits at most this long for a group, then uploads directly (ms). */
  formWaitMs: number;
  /** Share of fragments a second member also uploads (the spot check), [0, 1]. */
  spotRate: number;
}

export interface ReadyMember {
  islandId: string;
  meta: DeltaMeta;
  /** SHA-256 (hex) of the member's encoded Δ frame, committed before the exchange. */
  frameHash: string;
  /** The tokens the server assigned this round (its weight): derived, not claimed. */
  tokens: number;
  readyAt: number;
}

export interface GroupPlan {
  groupId: number;
  /** In member-index order. */
  members: ReadyMember[];
  /** Fragment ranges of the n parameters. */
  ranges: Array<[number, number]>;
  /** a_m = fround(w_m / W). */
  weights: Float32Array;
}

/**
 * A fragment upload: the codec frame of the fragment, and a commitment to the uploader's transcript
 * (transcriptHash of the SHA-256 of each message it sent and received), revealed only in an audit.
 */
export interface FragmentUpload { frame: Uint8Array; transcript: string }

/** A spot check's upload: the recomputed fragment and the hashes of the pieces it was computed from. */
export interface CheckUpload extends FragmentUpload { received: string[] }

/** What an audit asks of a member: its whole Δ frame and the transcript its upload committed to. */
export interface Replay { frame: Uint8Array; sent: string[]; received: string[] }

/** The commitment to a transcript: SHA-256 of its hashes joined ('s' sent…, 'r' received…). */
export function transcriptHash(sent: string[], received: string[]): string {
  return sha256Hex(new TextEncoder().encode(`s${sent.join(',')}r${received.join(',')}`));
}

/** What the host fetches from members while a group settles; null: the member is gone or stalled. */
export interface GroupIO {
  fragment(index: number): Promise<FragmentUpload | null>;
  /** Member `checker` recomputes fragment j from the members' pieces and uploads it. */
  check(checker: number, j: number): Promise<CheckUpload | null>;
  /** The member's whole Δ frame and its transcript (an audit's replay). */
  replay(index: number): Promise<Replay | null>;
}

export interface Implicated { islandId: string; reason: string }

export type GroupOutcome =
  | {
    kind: 'mixed';
    /** The group's token-weighted mean Δ (n values) over `accepted`. */
    delta: Float32Array;
    accepted: ReadyMember[];
    /** The fragment each member uploaded, by member index (what the server received of it). */
    frames: Uint8Array[];
    implicated: Implicated[];
    /** Pairs whose accounts disagree and cannot be told apart: neither is counted against. */
    disputes: Array<[string, string]>;
    checks: number;
    audited: boolean;
  }
  | { kind: 'direct'; members: ReadyMember[]; reason: string };

/** Groups and fallbacks, in arrival order. */
export class MixBroker {
  private queue: ReadyMember[] = [];
  private serial = 0;

  constructor(readonly cfg: MixConfig, private readonly n: number, private readonly align: number, private readonly rand: () => number) {}

  /** An island is ready (committed): a group when k are waiting, else null (it waits up to formWaitMs). */
  offer(m: ReadyMember): GroupPlan | null {
    this.queue = this.queue.filter((q) => q.islandId !== m.islandId);
    this.queue.push(m);
    if (this.queue.length < this.cfg.k) return null;
    const members = this.queue.splice(0, this.cfg.k);
    return { groupId: ++this.serial, members, ranges: fragmentRanges(this.n, this.cfg.k, this.align), weights: mixWeights(members.map((x) => x.tokens)) };
  }

  /** Members that waited formWaitMs without a group: they upload directly. */
  expire(now: number): ReadyMember[] {
    const due = (q: ReadyMember) => q.readyAt + this.cfg.formWaitMs <= now;
    const out = this.queue.filter(due);
    this.queue = this.queue.filter((q) => !due(q));
    return out;
  }

  /** A waiting island left: it no longer waits. */
  drop(islandId: string): void { this.queue = this.queue.filter((q) => q.islandId !== islandId); }

  nextDeadline(): number { return this.queue.length ? Math.min(...this.queue.map((q) => q.readyAt + this.cfg.formWaitMs)) : Infinity; }

  get waiting(): number { return this.queue.length; }

  /** Settles a group from its uploads (see the file comment). `codec`: the run's uplink, which fragments use too. */
  async settle(plan: GroupPlan, io: GroupIO, codec: CodecOptions): Promise<GroupOutcome> {
    const k = plan.members.length;
    const ups = await Promise.all(plan.members.map((_, j) => io.fragment(j)));
    if (ups.some((u) => u === null)) return { kind: 'direct', members: plan.members.filter((_, j) => ups[j] !== null), reason: 'a member dropped or stalled' };
    const frags = ups as FragmentUpload[];
    const parts = frags.map((u, j) => decodeDelta(u.frame, plan.ranges[j][1] - plan.ranges[j][0]));
    let mismatch = parts.some((p) => !p.ok);
    const checkers: Array<{ checker: number; j: number; up: CheckUpload; received: string[] }> = [];
    for (let j = 0; j < k && !mismatch; j++) {
      if (this.rand() >= this.cfg.spotRate) continue;
      const checker = (j + 1 + Math.floor(this.rand() * (k - 1))) % k;
      const up = await io.check(checker, j);
      if (!up) continue; // the checker left: this fragment goes unchecked this time
      checkers.push({ checker, j, up, received: up.received });
      if (!sameBytes(up.frame, frags[j].frame)) mismatch = true;
    }
    if (!mismatch) {
      const delta = new Float32Array(this.n);
      parts.forEach((p, j) => { if (p.ok) delta.set(p.value, plan.ranges[j][0]); });
      return { kind: 'mixed', delta, accepted: plan.members, frames: frags.map((u) => u.frame), implicated: [], disputes: [], checks: checkers.length, audited: false };
    }
    return this.audit(plan, io, codec, frags, checkers);
  }

  /** Replays every member's Δ (checked against its commitment), recomputes, and attributes each wrong upload. */
  private async audit(plan: GroupPlan, io: GroupIO, codec: CodecOptions, frags: FragmentUpload[], checks: Array<{ checker: number; j: number; up: CheckUpload; received: string[] }>): Promise<GroupOutcome> {
    const k = plan.members.length;
    const implicated = new Map<number, string>();
    const disputes: Array<[string, string]> = [];
    const logs: Array<{ sent: string[]; received: string[] }> = plan.members.map(() => ({ sent: [], received: [] }));
    const uploads = [...frags, ...checks.map((c) => c.up)];
    const uploader = [...frags.map((_, j) => j), ...checks.map((c) => c.checker)];
    const xs: Array<Float32Array | null> = await Promise.all(plan.members.map(async (m, j) => {
      const r = await io.replay(j);
      if (!r || sha256Hex(r.frame) !== m.frameHash) { implicated.set(j, r ? 'replayed Δ does not match its commitment' : 'no replay'); return null; }
      const own = uploads.filter((_, u) => uploader[u] === j);
      for (const up of own) {
        // the transcript of its fragment (or of its spot check) must be the one it committed to
        const t = up === frags[j] ? transcriptHash(r.sent, r.received) : up.transcript;
        if (t !== up.transcript) { implicated.set(j, 'revealed transcript does not match its commitment'); return null; }
      }
      logs[j] = { sent: r.sent, received: r.received };
      const d = decodeDelta(r.frame, this.n);
      if (!d.ok) { implicated.set(j, `committed Δ does not decode: ${d.error.code}`); return null; }
      return d.value.slice();
    }));
    if (xs.every((x) => x !== null)) attributeLies(plan, codec, xs as Float32Array[], frags, checks, logs, implicated, disputes);
    // the group's mean over the members whose Δ the server holds and who are not implicated
    const accepted = plan.members.filter((_, j) => xs[j] && !implicated.has(j));
    const tokens = plan.members.map((m, j) => (accepted.includes(m) ? m.tokens : 0));
    const a = mixWeights(tokens);
    const delta = accepted.length ? canonicalFragment(xs.map((x, j) => (tokens[j] ? x : null)), a, [0, this.n]) : new Float32Array(this.n);
    return {
      kind: 'mixed', delta, accepted, frames: frags.map((u) => u.frame), disputes, checks: checks.length, audited: true,
      implicated: [...implicated].map(([j, reason]) => ({ islandId: plan.members[j].islandId, reason })),
    };
  }
}

/**
 * Who lied, from the committed Δs and the revealed transcripts. A wrong message is pinned on the
 * member that sent it only if everything it had received before was right (an error it merely
 * passed on is its sender's); a member that logs a right message its partner logs as wrong is a
 * dispute, counted against neither; an upload (fragment or spot check) is pinned on its uploader
 * only if every message it received was right.
 */
function attributeLies(
  plan: GroupPlan, codec: CodecOptions, x: Float32Array[], frags: FragmentUpload[],
  checks: Array<{ checker: number; j: number; up: CheckUpload; received: string[] }>,
  logs: Array<{ sent: string[]; received: string[] }>, implicated: Map<number, string>, disputes: Array<[string, string]>,
): void {
  const k = x.length;
  const truth = correctTranscripts(x, plan);
  const receivedRight = (m: number, before: number) => logs[m].received.slice(0, before).every((h, s) => h === truth[m ^ (1 << s)][s]);
  for (let s = 0; s < stagesOf(k); s++) {
    for (let p = 0; p < k; p++) {
      const q = p ^ (1 << s);
      if (logs[p].sent[s] !== truth[p][s] && receivedRight(p, s)) implicated.set(p, `sent a wrong partial sum at stage ${s}`);
      else if (logs[p].sent[s] === truth[p][s] && logs[q].received[s] !== truth[p][s]) disputes.push([plan.members[q].islandId, plan.members[p].islandId]);
    }
  }
  for (let j = 0; j < k; j++) {
    const [lo, hi] = plan.ranges[j];
    const right = encodeDelta(canonicalFragment(x, plan.weights, plan.ranges[j]), codec);
    if (!sameBytes(right, frags[j].frame) && receivedRight(j, stagesOf(k))) implicated.set(j, 'uploaded a wrong fragment');
    for (const c of checks.filter((c) => c.j === j && !sameBytes(right, c.up.frame))) {
      const pieces = x.map((xm, m) => sha256Hex(weighted(xm.subarray(lo, hi), plan.weights[m])));
      const bad = c.received.findIndex((h, m) => h !== pieces[m]);
      if (bad < 0) implicated.set(c.checker, 'uploaded a wrong spot check');
      else disputes.push([plan.members[c.checker].islandId, plan.members[bad].islandId]);
    }
  }
}

/** SHA-256 of what each member should have sent at each stage, from the replayed Δs. */
function correctTranscripts(xs: Float32Array[], plan: GroupPlan): string[][] {
  const k = xs.length;
  const acc = xs.map((x, m) => weighted(x, plan.weights[m]));
  const out: string[][] = xs.map(() => []);
  for (let s = 0; s < stagesOf(k); s++) {
    const msgs = acc.map((v, i) => gatherRanges(v, sentFragments(i, s, k), plan.ranges));
    for (let i = 0; i < k; i++) out[i].push(sha256Hex(msgs[i]));
    const before = acc.map((v) => v.slice());
    for (let i = 0; i < k; i++) {
      const p = i ^ (1 << s);
      for (const j of keptFragments(i, s, k)) {
        const [lo, hi] = plan.ranges[j];
        for (let t = lo; t < hi; t++) acc[i][t] = before[i][t] + before[p][t];
      }
    }
  }
  return out;
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
