// The server's side of butterfly mixing, pure of I/O: it matches islands whose rounds end close
// together into groups of k, then settles each group from what its members upload: the k fragments
// of the group's token-weighted mean, the sampled spot checks, and (on a mismatch) the replayed
// whole Δs that settle who lied. The host (server/mixing.ts live, instruments/simulate/ in virtual time)
// carries the messages and hands the result to the coordinator, one contribution per member.
//
// Islands are strangers: the weights are the tokens the server assigned (checkWork), never a
// member's claim; a fragment is used only if every member's fragment arrived, and a mismatch is
// settled from Δs that match the hashes their members committed to before the exchange.

import { type CodecOptions, decodeDelta, encodeDelta } from '../codec/index.ts';
import type { DeltaMeta } from '../protocol.ts';
import { canonicalFragment, fragmentRanges, mixWeights } from './butterfly.ts';
import { sha256Hex } from './commit.ts';

export interface MixConfig {
  /** Members per group: a power of two ≥ 2. */
  k: number;
  /**
   * A ready island waits this long for a group of k; one then left alone waits as long again for a partner, then
   * uploads directly (ms).
   */
  formWaitMs: number;
  /**
   * > 0: the wait is instead max(formWaitMs, this × the median of the islands' recent round periods,
   * the time between an island's consecutive readies), at most maxFormWaitMs: rounds that last half a
   * minute end seconds apart, more than a fixed wait holds.
   */
  formWaitFraction?: number;
  maxFormWaitMs?: number;
  /** Share of fragments a second member also recomputes, sending its hash (the spot check), [0, 1]. */
  spotRate: number;
  /** A group whose fragments are not all in this long after it formed falls back to direct uploads (ms). */
  exchangeTimeoutMs: number;
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

/**
 * An island with a round in progress (its assignment's round), as the host's records have it
 * (Coordinator.roundsInProgress).
 */
export interface BusyIsland {
  islandId: string;
  roundId: number;
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

/** A fragment upload: the codec frame of the fragment. */
export interface FragmentUpload {
  frame: Uint8Array;
}

/** What the host fetches from members while a group settles; null: the member is gone or stalled. */
export interface GroupIO {
  fragment(index: number): Promise<FragmentUpload | null>;
  /** Member `checker` recomputes fragment j from the frames it holds: the SHA-256 (hex) of its frame. */
  check(checker: number, j: number): Promise<string | null>;
  /** The member's whole Δ frame (an audit's replay). */
  replay(index: number): Promise<Uint8Array | null>;
}

export interface Implicated {
  islandId: string;
  reason: string;
}

export type GroupOutcome =
  | {
      kind: 'mixed';
      /** The group's token-weighted mean Δ (n values) over `accepted`. */
      delta: Float32Array;
      accepted: ReadyMember[];
      /** The fragment each member uploaded, by member index (what the server received of it). */
      frames: Uint8Array[];
      implicated: Implicated[];
      checks: number;
      audited: boolean;
    }
  | { kind: 'direct'; members: ReadyMember[]; reason: string };

/** Round periods the adaptive wait takes its median of. */
const PERIODS_KEPT = 32;

/** Groups and fallbacks, in arrival order. */
export class MixBroker {
  private queue: ReadyMember[] = [];
  private serial = 0;
  /**
   * The members of groups called off (a member dropped or stalled), by island, until formWaitMs after:
   * those still there mix again among themselves as soon as they are ready again (survivors).
   */
  private readonly calledOff = new Map<string, { ids: string[]; gone: Set<string>; until: number }>();
  /** Islands that left (drop) since they were last ready. */
  private readonly left = new Set<string>();
  /**
   * The round each island was last ready with (`offer`; an island still on it is in an exchange or
   * uploading, not working), and when (the round periods of formWaitFraction).
   */
  private readonly lastReady = new Map<string, { roundId: number; at: number }>();
  /** The oldest waiting island, while its group short of k waits for islands due soon (expire). */
  private holding: string | null = null;
  /** The latest round periods (formWaitFraction). */
  private readonly periods: number[] = [];
  private waitMs: number;

  constructor(
    readonly cfg: MixConfig,
    private readonly n: number,
    private readonly align: number,
    private readonly rand: () => number,
  ) {
    this.waitMs = cfg.formWaitMs;
  }

  /** How long a ready island waits for a group of k now (formWaitMs, or its share of the measured round period). */
  formWait(): number {
    return this.waitMs;
  }

  /**
   * An island's ready after its previous round's: a round period (the last PERIODS_KEPT of all islands set the wait).
   */
  private notePeriod(ms: number): void {
    const f = this.cfg.formWaitFraction ?? 0;
    if (f <= 0) return;
    this.periods.push(ms);
    if (this.periods.length > PERIODS_KEPT) this.periods.shift();
    const sorted = [...this.periods].sort((a, b) => a - b);
    const med = sorted[sorted.length >> 1];
    this.waitMs = Math.min(this.cfg.maxFormWaitMs ?? Infinity, Math.max(this.cfg.formWaitMs, f * med));
  }

  /** An island is ready (committed): a group when k are waiting, else null (it waits up to formWaitMs). */
  offer(m: ReadyMember): GroupPlan | null {
    this.queue = this.queue.filter((q) => q.islandId !== m.islandId);
    this.queue.push(m);
    this.left.delete(m.islandId);
    const prev = this.lastReady.get(m.islandId);
    // a new round (a regroup is not one: it keeps its round's first ready)
    if (prev?.roundId !== m.meta.roundId) {
      if (prev) this.notePeriod(m.readyAt - prev.at);
      if (this.lastReady.size >= 4096 && !prev) this.lastReady.clear();
      this.lastReady.set(m.islandId, { roundId: m.meta.roundId, at: m.readyAt });
    }
    const survivors = this.survivorsOf(m);
    if (survivors) return survivors;
    if (this.queue.length < this.cfg.k) return null;
    return this.plan(this.queue.splice(0, this.cfg.k));
  }

  /**
   * A group called off regroups its survivors: once the largest power of two (≥ 2) of its members not
   * gone are ready again, they form a group at once, without waiting for others or formWaitMs.
   */
  private survivorsOf(m: ReadyMember): GroupPlan | null {
    const g = this.calledOff.get(m.islandId);
    if (!g) return null;
    this.calledOff.delete(m.islandId);
    if (g.until < m.readyAt) return null;
    const alive = g.ids.filter((id) => !g.gone.has(id)).length;
    const size = alive >= 2 ? 1 << Math.floor(Math.log2(alive)) : 0;
    const back = this.queue.filter((q) => g.ids.includes(q.islandId) && !this.calledOff.has(q.islandId));
    if (size < 2 || back.length < size) return null;
    const members = back.slice(0, size);
    this.queue = this.queue.filter((q) => !members.includes(q));
    // the rest of the survivors are not waited for: they group as any ready island does
    for (const id of g.ids) if (this.calledOff.get(id) === g) this.calledOff.delete(id);
    return this.plan(members);
  }

  /**
   * When the oldest waiting island has waited formWaitMs: the waiting islands form the largest group
   * of a power of two (≥ 2, ≤ k) they can, oldest first, unless enough `busy` islands (still working
   * on a round, islands that have mixed before) could make k: then the group waits for them until the
   * oldest has waited 2 × formWaitMs (a pair uploads half a Δ each, a group of 4 a quarter). One left
   * alone waits formWaitMs more for a partner (rounds that end a moment apart pair up), then uploads
   * directly. No island waits more than 2 × formWaitMs.
   */
  expire(now: number, busy: readonly BusyIsland[] = []): { groups: GroupPlan[]; direct: ReadyMember[] } {
    const groups: GroupPlan[] = [];
    const direct: ReadyMember[] = [];
    this.holding = null;
    const wait = this.waitMs;
    while (this.queue.length && this.queue[0].readyAt + wait <= now) {
      const last = this.queue[0].readyAt + 2 * wait;
      if (this.queue.length < 2) {
        if (last > now) break;
        direct.push(this.queue.shift()!);
        continue;
      }
      if (this.queue.length < this.cfg.k && last > now && this.queue.length + this.working(busy) >= this.cfg.k) {
        this.holding = this.queue[0].islandId;
        break;
      }
      const size = 1 << Math.floor(Math.log2(Math.min(this.queue.length, this.cfg.k)));
      groups.push(this.plan(this.queue.splice(0, size)));
    }
    return { groups, direct };
  }

  /**
   * Busy islands still working: islands that have mixed before, not waiting, whose current round is
   * not the one they were last ready with (that one is in a group's exchange, or went directly).
   */
  private working(busy: readonly BusyIsland[]): number {
    let n = 0;
    for (const b of busy) {
      const last = this.lastReady.get(b.islandId)?.roundId;
      if (
        last !== undefined &&
        last !== b.roundId &&
        !this.left.has(b.islandId) &&
        !this.queue.some((q) => q.islandId === b.islandId)
      )
        n++;
    }
    return n;
  }

  /**
   * A fresh id from the groups' sequence (the downlink's rings are numbered with the groups: a member tells them apart
   * by id alone).
   */
  nextId(): number {
    return ++this.serial;
  }

  private plan(members: ReadyMember[]): GroupPlan {
    return {
      groupId: this.nextId(),
      members,
      ranges: fragmentRanges(this.n, members.length, this.align),
      weights: mixWeights(members.map((x) => x.tokens)),
    };
  }

  /** A waiting island left: it no longer waits (nor do its group's survivors wait for it). */
  drop(islandId: string): void {
    this.queue = this.queue.filter((q) => q.islandId !== islandId);
    if (this.left.size >= 4096) this.left.clear();
    this.left.add(islandId);
    this.lastReady.delete(islandId);
    for (const g of new Set(this.calledOff.values())) if (g.ids.includes(islandId)) g.gone.add(islandId);
  }

  nextDeadline(): number {
    // alone, or a short group waiting for islands due soon: nothing to form before
    if (this.queue.length === 1 || this.holding === this.queue[0]?.islandId)
      return this.queue[0].readyAt + 2 * this.waitMs;
    return this.queue.length ? Math.min(...this.queue.map((q) => q.readyAt + this.waitMs)) : Infinity;
  }

  get waiting(): number {
    return this.queue.length;
  }

  /** Settles a group from its uploads (see the file comment). `codec`: the run's uplink, which fragments use too. */
  async settle(plan: GroupPlan, io: GroupIO, codec: CodecOptions): Promise<GroupOutcome> {
    const k = plan.members.length;
    const ups = await allOrNull(plan.members.map((_, j) => io.fragment(j)));
    if (ups.some((u) => u === null)) {
      const g = {
        ids: plan.members.map((x) => x.islandId),
        gone: new Set(plan.members.map((x) => x.islandId).filter((id) => this.left.has(id))),
        until: Math.max(...plan.members.map((x) => x.readyAt)) + this.cfg.exchangeTimeoutMs + this.waitMs,
      };
      for (const id of g.ids) this.calledOff.set(id, g);
      return {
        kind: 'direct',
        members: plan.members.filter((_, j) => ups[j] !== null),
        reason: 'a member dropped or stalled',
      };
    }
    const frags = ups as FragmentUpload[];
    const parts = frags.map((u, j) => decodeDelta(u.frame, plan.ranges[j][1] - plan.ranges[j][0]));
    let mismatch = parts.some((p) => !p.ok);
    const checkers: SpotCheck[] = [];
    for (let j = 0; j < k && !mismatch; j++) {
      if (this.rand() >= this.cfg.spotRate) continue;
      const checker = (j + 1 + Math.floor(this.rand() * (k - 1))) % k;
      const hash = await io.check(checker, j);
      if (!hash) continue; // the checker left: this fragment goes unchecked this time
      checkers.push({ checker, j, hash });
      if (hash !== sha256Hex(frags[j].frame)) mismatch = true;
    }
    if (!mismatch) {
      const delta = new Float32Array(this.n);
      parts.forEach((p, j) => {
        if (p.ok) delta.set(p.value, plan.ranges[j][0]);
      });
      return {
        kind: 'mixed',
        delta,
        accepted: plan.members,
        frames: frags.map((u) => u.frame),
        implicated: [],
        checks: checkers.length,
        audited: false,
      };
    }
    return this.audit(plan, io, codec, frags, checkers);
  }

  /**
   * Replays every member's Δ (checked against its commitment) and recomputes the fragments: an upload
   * that differs is its uploader's lie, since an honest member reduces only frames that matched their
   * commitments. The group's mean is then the server's, over the members neither implicated nor silent.
   */
  private async audit(
    plan: GroupPlan,
    io: GroupIO,
    codec: CodecOptions,
    frags: FragmentUpload[],
    checks: SpotCheck[],
  ): Promise<GroupOutcome> {
    const implicated = new Map<number, string>();
    const xs: Array<Float32Array | null> = await Promise.all(
      plan.members.map(async (m, j) => {
        const f = await io.replay(j);
        if (!f || sha256Hex(f) !== m.frameHash) {
          implicated.set(j, f ? 'replayed Δ does not match its commitment' : 'no replay');
          return null;
        }
        const d = decodeDelta(f, this.n);
        if (!d.ok) {
          implicated.set(j, `committed Δ does not decode: ${d.error.code}`);
          return null;
        }
        return d.value.slice();
      }),
    );
    if (xs.every((x) => x !== null)) {
      plan.ranges.forEach((range, j) => {
        const right = encodeDelta(canonicalFragment(xs, plan.weights, range), codec);
        if (!sameBytes(right, frags[j].frame)) implicated.set(j, 'uploaded a wrong fragment');
        for (const c of checks)
          if (c.j === j && sha256Hex(right) !== c.hash) implicated.set(c.checker, 'sent a wrong spot check');
      });
    }
    const accepted = plan.members.filter((_, j) => xs[j] && !implicated.has(j));
    const tokens = plan.members.map((m) => (accepted.includes(m) ? m.tokens : 0));
    const delta = accepted.length
      ? canonicalFragment(
          xs.map((x, j) => (tokens[j] ? x : null)),
          mixWeights(tokens),
          [0, this.n],
        )
      : new Float32Array(this.n);
    return {
      kind: 'mixed',
      delta,
      accepted,
      frames: frags.map((u) => u.frame),
      checks: checks.length,
      audited: true,
      implicated: [...implicated].map(([j, reason]) => ({ islandId: plan.members[j].islandId, reason })),
    };
  }
}

/** Member `checker`'s hash of fragment j. */
interface SpotCheck {
  checker: number;
  j: number;
  hash: string;
}

/** All results, or as soon as one is null: that one null and the others as far as they came (null). */
function allOrNull<T>(ps: Array<Promise<T | null>>): Promise<Array<T | null>> {
  return new Promise((resolve) => {
    const out: Array<T | null> = ps.map(() => null);
    let left = ps.length;
    ps.forEach(
      (p, i) =>
        void p.then((v) => {
          out[i] = v;
          if (v === null) resolve(out.map((x, j) => (j === i ? null : x)));
          else if (--left === 0) resolve(out);
        }),
    );
  });
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * The norm each accepted member's contribution is judged by. The coordinator's norm bound scores
 * ‖Δ‖/√steps against its history; a group's mean is as long as a mix of Δs of its members' steps,
 * so member j's copy is judged as ‖mean‖ · √steps_j / Σ_m a_m √steps_m (a_m its token share; equal
 * steps: ‖mean‖ itself). Judged by ‖mean‖, a page of 3 steps grouped with servers of 40 was refused
 * (E_NORM_BOUND) for the servers' longer Δs.
 */
export function memberNorms(norm: number, members: readonly ReadyMember[]): number[] {
  const a = mixWeights(members.map((m) => m.tokens));
  const mixed = members.reduce((t, m, i) => t + a[i] * Math.sqrt(Math.max(1, m.meta.steps)), 0);
  return members.map((m) => (norm * Math.sqrt(Math.max(1, m.meta.steps))) / Math.max(1e-12, mixed));
}
