// The coordinator: global θ and its versions, rounds, outer optimizer, staleness, DyLU, validation.
//
// Pure logic: no I/O, no timers, no Date.now(). Every call that depends on time takes `now` (ms),
// so the server (wall clock), the simulator (virtual clock) and tests drive the same code.
//
// ── Durability contract (for whoever drives this: the server, the simulator) ──────────────────
// `submit()` validates a delta and answers at once, but its answer is NOT the ack:
//   • { ok: false }                → reject now: send AckMsg{status:'rejected', error}. Nothing changed.
//   • { ok: true, status:'pending' | 'applied' } → do NOT ack yet.
// Acks come from the event queue (`drainEvents()`, in order):
//   • 'update'   → 1. persist the new state (snapshot(), or θ + the update message),
//                  2. THEN ack every entry of `contributors` as applied (version = update.version)
//                     and every entry of `rejected` as rejected (deltas dropped when the round closed),
//                  3. broadcast `update` to the islands.
//   • 'rejected' → ack these as rejected (deltas dropped without an update, e.g. by ban()).
//   • 'assignment' → deliver to an island that was told to wait (nextAssignment returned null).
//   • 'island', 'round', 'done' → informational (dashboard, logs).
// Process events in order: an 'assignment' that follows an 'update' is based on that update, so it
// must not reach the island before the update is durable.
// ────────────────────────────────────────────────────────────────────────────────────────────────

import { CodecScratch, ErrorFeedback, decodeDelta, encodeWithFeedback, maxFrameBytes } from '../codec/index.ts';
import { type AtollError, type Result, err, ok } from '../result.ts';
import { streamId } from '../data/dataset.ts';
import {
  type Assignment, type DeltaMeta, type IslandCaps, type ModelSnapshotMsg, type TrainingMode, type UpdateMsg,
  ErrorCode, PROTOCOL_VERSION, validateDeltaMeta,
} from '../protocol.ts';
import {
  type CoordinatorConfig, type CoordinatorConfigPatch, DEFAULT_COORDINATOR_CONFIG, RUNTIME_KEYS,
  mergeConfig, stalenessWeight, validateCoordinatorConfig,
} from './config.ts';
import { dyluInnerSteps } from './dylu.ts';
import { hashParams } from './hash.ts';
import { OuterOptimizer, type OuterState, applyUpdate } from './outer.ts';

export type IslandStatus = 'online' | 'offline' | 'left' | 'banned';

/** What the coordinator knows about one island (copies are handed out; mutate nothing). */
export interface IslandRecord {
  id: string;
  name: string;
  /** The contributor's stable anonymous id (caps.contributorId), or the island id. */
  contributorId: string;
  engine: string;
  adapter: string;
  status: IslandStatus;
  joinedAt: number;
  lastSeen: number;
  /** Measured training throughput (EMA over deltas), tokens/s; the declared one until the first delta. */
  tokensPerSec: number | undefined;
  batchSize: number;
  /** Tokens of this island's deltas that made it into θ. */
  tokensContributed: number;
  /** Tokens of every delta it sent, accepted or not. */
  tokensSubmitted: number;
  accepted: number;
  rejected: Record<string, number>;
  lastBaseVersion: number;
  lastStaleness: number;
  /** Current assignment (undefined when it has none / is waiting). */
  roundId: number | undefined;
  assignedSteps: number;
  assignedAt: number;
  /** Waiting for the next round to open (sync) or for resume (paused). */
  waiting: boolean;
  /** Highest seq counted (replay guard). */
  lastSeq: number;
  /** Rounds it has a counted delta for (the last few; duplicate guard). */
  submittedRounds: number[];
  /** Data stream and next data step (batches never repeat across its rounds). */
  stream: number;
  dataSteps: number;
  /** Inner steps it has run in total (per-island lr warmup). */
  localSteps: number;
  caps: IslandCaps;
}

export interface DeltaSubmission {
  meta: DeltaMeta;
  /** The codec frame (core/codec). */
  frame: Uint8Array;
}

export interface SubmitAccepted {
  /** applied: in θ at `version` now. pending: waits for its round to close. (Ack only on the 'update' event.) */
  status: 'applied' | 'pending';
  version: number;
  roundId: number;
  staleness: number;
  /** ‖Δ‖₂ of the decoded delta. */
  norm: number;
}

/** One counted delta, as listed in an 'update' event (ack each with AckMsg{status:'applied'}). */
export interface Contribution {
  islandId: string;
  seq: number;
  roundId: number;
  baseVersion: number;
  staleness: number;
  tokens: number;
  /** Relative weight it had in the update. */
  weight: number;
}

export interface RejectedContribution extends Omit<Contribution, 'weight'> {
  error: AtollError;
}

/** Dashboard stats for one version. */
export interface VersionStats {
  version: number;
  time: number;
  /** Tokens this update added / in θ after it. */
  tokens: number;
  totalTokens: number;
  /** Token-weighted mean of the contributors' reported mean loss. */
  trainLoss: number;
  contributors: number;
  /** stalenessHist[τ] = contributors of staleness τ (last bucket: ≥ its index). */
  stalenessHist: number[];
  /** Deltas counted / rejected (by code) since the previous version. */
  accepted: number;
  rejected: Record<string, number>;
  /** Delta frame bytes received since the previous version (accepted or not), update frame bytes sent. */
  bytesIn: number;
  bytesOut: number;
  /** f32 bytes of the counted deltas / their frame bytes. */
  compressionRatio: number;
  /** Cumulative tokens in θ / tokens in every delta received. */
  goodput: number;
  /** ‖u‖₂ of the applied outer update. */
  updateNorm: number;
}

export type CoordinatorEvent =
  | { type: 'update'; update: UpdateMsg; contributors: Contribution[]; rejected: RejectedContribution[]; stats: VersionStats }
  | { type: 'rejected'; rejected: RejectedContribution[] }
  | { type: 'assignment'; islandId: string; result: Result<Assignment> }
  | { type: 'island'; islandId: string; status: IslandStatus; reason: string }
  | { type: 'round'; roundId: number; baseVersion: number; state: 'open' | 'closed'; members: number; time: number }
  | { type: 'done'; version: number; totalTokens: number };

export interface JoinRequest {
  caps: IslandCaps;
  protocolVersion?: number;
  /** Rejoin as this island (keeps its record); an unknown id creates an island with it. */
  resumeIslandId?: string;
}

export interface JoinResult {
  islandId: string;
  /** null: wait for an 'assignment' event (sync round in progress is not joinable / paused). */
  assignment: Assignment | null;
}

/** Running totals since start. */
export interface CoordinatorTotals {
  version: number;
  tokensApplied: number;
  tokensSubmitted: number;
  accepted: number;
  rejected: Record<string, number>;
  bytesIn: number;
  bytesOut: number;
  goodput: number;
}

/** A delta waiting for its sync round to close. */
interface PendingDelta extends Contribution {
  delta: Float32Array;
  /** ‖Δ‖/√steps, the norm-bound statistic. */
  score: number;
  lossMean: number;
  arrivedAt: number;
}

interface RoundState {
  id: number;
  baseVersion: number;
  openedAt: number;
  /** Islands assigned to this round. */
  members: Set<string>;
  /** Members that have submitted, and how long after the open each did (ms). */
  returned: Map<string, number>;
  /** Members whose delta for this round was rejected: their turn is used, the round stops waiting for them. */
  failed: Set<string>;
  /** Everything that will be averaged at close: members' deltas and late ones folded in. */
  pending: PendingDelta[];
}

/** Accumulators reset at every version. */
interface PerVersion {
  accepted: number;
  rejected: Record<string, number>;
  bytesIn: number;
  rawBytesAccepted: number;
  frameBytesAccepted: number;
}

const newPerVersion = (): PerVersion => ({ accepted: 0, rejected: {}, bytesIn: 0, rawBytesAccepted: 0, frameBytesAccepted: 0 });
const STALENESS_BUCKETS = 17;
const SUBMITTED_ROUNDS_KEPT = 16;

/** Snapshot for exact resume: typed arrays (store as safetensors tensors) + JSON-safe metadata. */
export interface CoordinatorSnapshot {
  /** theta, outer.momentum, outer.buffer, downlink.residual, pending.<i>, update.<version> (U8 frame). */
  tensors: Record<string, Float32Array | Uint8Array>;
  meta: CoordinatorSnapshotMeta;
}

export interface CoordinatorSnapshotMeta {
  format: 'atoll-coordinator';
  formatVersion: 1;
  protocolVersion: number;
  config: CoordinatorConfig;
  paramCount: number;
  version: number;
  hash: string;
  paused: boolean;
  outer: { bufferCount: number; steps: number };
  islands: IslandRecord[];
  nextIslandSerial: number;
  assignSerial: number;
  round: { id: number; baseVersion: number; openedAt: number; members: string[]; returned: Array<[string, number]>; failed?: string[] };
  pending: Array<Omit<PendingDelta, 'delta'>>;
  normHistory: number[];
  totals: CoordinatorTotals;
  perVersion: PerVersion;
  updates: Array<Omit<UpdateMsg, 'frame'>>;
  history: VersionStats[];
  done: boolean;
}

export interface CoordinatorOptions {
  /** Initial θ (copied). */
  params: Float32Array;
  config?: CoordinatorConfigPatch;
  /** Start time, ms. */
  now?: number;
}

export class Coordinator {
  private cfg: CoordinatorConfig;
  readonly paramCount: number;
  private theta: Float32Array;
  private versionNum = 0;
  private hashHex: string;
  private outer: OuterOptimizer;
  /** Server-side error feedback of the downlink quantization. */
  private downlinkFb: ErrorFeedback;
  private islandsById = new Map<string, IslandRecord>();
  private nextIslandSerial = 1;
  private assignSerial = 0;
  private round: RoundState;
  private normHistory: number[] = [];
  private updates: UpdateMsg[] = [];
  private historyList: VersionStats[] = [];
  private events: CoordinatorEvent[] = [];
  private paused = false;
  private done = false;
  private totalsAcc: CoordinatorTotals;
  private perVersion: PerVersion = newPerVersion();
  // scratch, allocated once (no n-sized allocation per message on the hot path)
  private readonly decodeBuf: Float32Array;
  private readonly gBuf: Float32Array;
  private readonly accBuf: Float64Array;
  private readonly residualBackup: Float32Array;
  private readonly pool: Float32Array[] = [];
  private readonly codecScratch = new CodecScratch();

  constructor(opts: CoordinatorOptions) {
    const cfg = mergeConfig(DEFAULT_COORDINATOR_CONFIG, opts.config ?? {});
    const problems = validateCoordinatorConfig(cfg);
    if (problems.length) throw new RangeError(`${ErrorCode.BAD_CONFIG}: ${problems.join('; ')}`);
    this.cfg = cfg;
    const n = opts.params.length;
    this.paramCount = n;
    this.theta = opts.params.slice();
    this.hashHex = hashParams(this.theta);
    this.outer = new OuterOptimizer(n);
    this.downlinkFb = new ErrorFeedback(n);
    this.decodeBuf = new Float32Array(n);
    this.gBuf = new Float32Array(n);
    this.accBuf = new Float64Array(n);
    this.residualBackup = new Float32Array(n);
    const now = opts.now ?? 0;
    this.round = { id: 0, baseVersion: 0, openedAt: now, members: new Set(), returned: new Map(), failed: new Set(), pending: [] };
    this.totalsAcc = { version: 0, tokensApplied: 0, tokensSubmitted: 0, accepted: 0, rejected: {}, bytesIn: 0, bytesOut: 0, goodput: 1 };
  }

  // ── read-only views ─────────────────────────────────────────────────────────────────────────

  get version(): number { return this.versionNum; }
  get hash(): string { return this.hashHex; }
  get mode(): TrainingMode { return this.cfg.mode; }
  get isPaused(): boolean { return this.paused; }
  get isDone(): boolean { return this.done; }
  /** The current sync round id (async: the last assignment serial). */
  get roundId(): number { return this.cfg.mode === 'sync' ? this.round.id : this.assignSerial; }
  /** A copy of the config. */
  config(): CoordinatorConfig { return structuredClone(this.cfg); }
  /** θ at the current version, as a fresh copy (a fetchModel answer). */
  model(): ModelSnapshotMsg { return { version: this.versionNum, hash: this.hashHex, params: this.theta.slice() }; }
  /** θ itself, read-only by contract (no copy: for the server's checkpoint writer and evals). */
  params(): Readonly<Float32Array> { return this.theta; }
  /** Copies of the outer optimizer's state (tests compare these across rejected deltas). */
  outerState(): OuterState {
    const s = this.outer.state;
    return { momentum: s.momentum.slice(), buffer: s.buffer.slice(), bufferCount: s.bufferCount, steps: s.steps };
  }
  islands(): IslandRecord[] { return [...this.islandsById.values()].map((r) => structuredClone(r)); }
  island(id: string): IslandRecord | undefined { const r = this.islandsById.get(id); return r && structuredClone(r); }
  history(): readonly VersionStats[] { return this.historyList; }
  totals(): CoordinatorTotals { return structuredClone(this.totalsAcc); }
  /** Drains the event queue (see the durability contract at the top of this file). */
  drainEvents(): CoordinatorEvent[] { const e = this.events; this.events = []; return e; }
  /** The largest legal delta frame for this model (size socket.io's maxHttpBufferSize from it). */
  maxFrameBytes(): number { return maxFrameBytes(this.paramCount); }

  /**
   * The update messages from `fromVersion` to now, for catch-up. E_TOO_OLD when some are no longer
   * kept (fetch the snapshot), E_FUTURE_VERSION when fromVersion is ahead of the server.
   */
  updatesSince(fromVersion: number): Result<UpdateMsg[]> {
    if (fromVersion > this.versionNum) return err(ErrorCode.FUTURE_VERSION, `version ${fromVersion} is ahead of the server's ${this.versionNum}`);
    if (fromVersion === this.versionNum) return ok([]);
    const first = this.updates.length ? this.updates[0].prevVersion : this.versionNum;
    if (fromVersion < first) return err(ErrorCode.TOO_OLD, `updates from version ${fromVersion} are no longer kept (oldest ${first}): fetch the snapshot`);
    return ok(this.updates.slice(fromVersion - first));
  }

  /**
   * When `tick` next needs to run (ms): a grace window or round timeout ending, an island timing out.
   * Infinity when nothing is scheduled.
   */
  nextDeadline(): number {
    let t = Infinity;
    for (const isl of this.islandsById.values()) {
      if (isl.status === 'online') t = Math.min(t, isl.lastSeen + this.cfg.islandTimeoutMs);
    }
    if (this.cfg.mode === 'sync' && this.round.pending.length > 0 && !this.paused) {
      t = Math.min(t, this.round.openedAt + this.cfg.roundTimeoutMs);
      if (this.quorumMet()) t = Math.min(t, this.graceDeadline());
    }
    return t;
  }

  // ── islands ─────────────────────────────────────────────────────────────────────────────────

  /** Registers an island (or re-registers a known id) and gives it work when there is some. */
  join(req: JoinRequest, now: number): Result<JoinResult> {
    if (req.protocolVersion !== undefined && req.protocolVersion !== PROTOCOL_VERSION) {
      return err(ErrorCode.PROTOCOL_VERSION, `island speaks protocol ${req.protocolVersion}, server ${PROTOCOL_VERSION}`);
    }
    const caps = req.caps;
    let isl = req.resumeIslandId !== undefined ? this.islandsById.get(req.resumeIslandId) : undefined;
    if (isl) {
      if (isl.status === 'banned') return err(ErrorCode.BANNED, `island ${isl.id} is banned`);
      isl.caps = structuredClone(caps);
      if (caps.contributorId) isl.contributorId = caps.contributorId;
      if (caps.tokensPerSec !== undefined && isl.tokensPerSec === undefined) isl.tokensPerSec = caps.tokensPerSec;
      isl.batchSize = this.batchSizeFor(caps);
    } else {
      const id = req.resumeIslandId ?? `island-${this.nextIslandSerial++}`;
      isl = {
        id, name: (caps.name ?? id).slice(0, 64), contributorId: (caps.contributorId ?? id).slice(0, 64), engine: caps.engine, adapter: caps.adapter ?? '', status: 'online',
        joinedAt: now, lastSeen: now, tokensPerSec: caps.tokensPerSec, batchSize: this.batchSizeFor(caps),
        tokensContributed: 0, tokensSubmitted: 0, accepted: 0, rejected: {}, lastBaseVersion: -1, lastStaleness: 0,
        roundId: undefined, assignedSteps: 0, assignedAt: now, waiting: false, lastSeq: -1, submittedRounds: [],
        stream: streamId(id), dataSteps: 0, localSteps: 0, caps: structuredClone(caps),
      };
      this.islandsById.set(id, isl);
    }
    this.setStatus(isl, 'online', 'joined');
    isl.lastSeen = now;
    const a = this.assignOrWait(isl, now);
    if (!a.ok) return a;
    return ok({ islandId: isl.id, assignment: a.value });
  }

  /** Marks an island alive (any message from it counts too). */
  heartbeat(islandId: string, now: number): Result<void> {
    const isl = this.islandsById.get(islandId);
    if (!isl) return err(ErrorCode.UNKNOWN_ISLAND, `no island ${islandId}`);
    if (isl.status === 'banned') return err(ErrorCode.BANNED, `island ${islandId} is banned`);
    this.touch(isl, now);
    return ok(undefined);
  }

  /** The island said bye (or its socket closed): it stops counting for quorum. Its record stays. */
  leave(islandId: string, now: number): Result<void> {
    const isl = this.islandsById.get(islandId);
    if (!isl) return err(ErrorCode.UNKNOWN_ISLAND, `no island ${islandId}`);
    if (isl.status !== 'banned') this.setStatus(isl, 'left', 'left');
    isl.waiting = false;
    isl.roundId = undefined;
    this.round.members.delete(islandId);
    this.maybeCloseRound(now);
    return ok(undefined);
  }

  /** Bans an island: its deltas are rejected from now on, including ones pending in the open round. */
  ban(islandId: string, now: number, reason = 'banned by admin'): Result<void> {
    const isl = this.islandsById.get(islandId);
    if (!isl) return err(ErrorCode.UNKNOWN_ISLAND, `no island ${islandId}`);
    this.setStatus(isl, 'banned', reason);
    isl.waiting = false;
    isl.roundId = undefined;
    this.round.members.delete(islandId);
    const dropped: RejectedContribution[] = [];
    this.round.pending = this.round.pending.filter((p) => {
      if (p.islandId !== islandId) return true;
      dropped.push(this.rejectedFrom(p, ErrorCode.BANNED, `island ${islandId} was banned`));
      this.release(p.delta);
      return false;
    });
    this.round.returned.delete(islandId);
    this.round.failed.delete(islandId);
    if (dropped.length) this.events.push({ type: 'rejected', rejected: dropped });
    this.maybeCloseRound(now);
    return ok(undefined);
  }

  /**
   * The next assignment after a submit. null: wait — an 'assignment' event will bring it (sync: when
   * the round closes; paused: on resume). E_DONE when the run reached its token budget.
   */
  nextAssignment(islandId: string, now: number): Result<Assignment | null> {
    const isl = this.islandsById.get(islandId);
    if (!isl) return err(ErrorCode.UNKNOWN_ISLAND, `no island ${islandId}`);
    if (isl.status === 'banned') return err(ErrorCode.BANNED, `island ${islandId} is banned`);
    this.touch(isl, now);
    return this.assignOrWait(isl, now);
  }

  // ── deltas ──────────────────────────────────────────────────────────────────────────────────

  /**
   * Validates and counts one delta. Never throws on input. A rejection changes neither θ nor the
   * optimizer state (only counters). See the durability contract at the top: ack from events.
   */
  submit(sub: DeltaSubmission, now: number): Result<SubmitAccepted> {
    const r = this.validateAndCount(sub, now);
    if (!r.ok && this.cfg.mode === 'sync') {
      // a member's rejected delta uses its turn: the round no longer waits for it (no stall on a bad island)
      const m = sub.meta;
      const code = r.error.code;
      if (m && typeof m.islandId === 'string' && m.roundId === this.round.id && this.round.members.has(m.islandId)
        && code !== ErrorCode.PAUSED && code !== ErrorCode.DUPLICATE && code !== ErrorCode.DONE && !this.round.returned.has(m.islandId)) {
        this.round.failed.add(m.islandId);
        this.maybeCloseRound(now);
      }
    }
    return r;
  }

  private validateAndCount(sub: DeltaSubmission, now: number): Result<SubmitAccepted> {
    const m = sub.meta;
    const frameBytes = sub.frame?.length ?? 0;
    this.perVersion.bytesIn += frameBytes;
    this.totalsAcc.bytesIn += frameBytes;
    const metaProblem = validateDeltaMeta(m);
    if (metaProblem) return this.reject(undefined, 0, ErrorCode.BAD_REQUEST, metaProblem);
    if (!(sub.frame instanceof Uint8Array)) return this.reject(undefined, 0, ErrorCode.BAD_REQUEST, 'frame must be bytes');
    const isl = this.islandsById.get(m.islandId);
    if (!isl) return this.reject(undefined, m.tokens, ErrorCode.UNKNOWN_ISLAND, `no island ${m.islandId}`);
    if (isl.status === 'banned') return this.reject(isl, m.tokens, ErrorCode.BANNED, `island ${isl.id} is banned`);
    this.touch(isl, now);
    if (this.paused) return this.reject(isl, 0, ErrorCode.PAUSED, 'training is paused: resubmit after resume');
    if (this.done) return this.reject(isl, m.tokens, ErrorCode.DONE, `the run reached its budget of ${this.cfg.totalTokens} tokens`);
    if (m.seq <= isl.lastSeq) return this.reject(isl, 0, ErrorCode.DUPLICATE, `seq ${m.seq} was already counted (last ${isl.lastSeq})`);
    if (isl.submittedRounds.includes(m.roundId)) return this.reject(isl, 0, ErrorCode.DUPLICATE, `a delta for round ${m.roundId} was already counted`);
    if (m.baseVersion > this.versionNum) return this.reject(isl, m.tokens, ErrorCode.FUTURE_VERSION, `base version ${m.baseVersion} is ahead of ${this.versionNum}`);
    const sync = this.cfg.mode === 'sync';
    if (sync && m.roundId > this.round.id) return this.reject(isl, m.tokens, ErrorCode.FUTURE_VERSION, `round ${m.roundId} has not opened (current ${this.round.id})`);
    if (!sync && m.roundId > this.assignSerial) return this.reject(isl, m.tokens, ErrorCode.FUTURE_VERSION, `assignment ${m.roundId} was never issued`);
    const tau = this.versionNum - m.baseVersion;
    const late = sync && (m.roundId < this.round.id || m.baseVersion < this.round.baseVersion);
    if (late && this.cfg.lateDeltas === 'drop') return this.reject(isl, m.tokens, ErrorCode.STALE, `round ${m.roundId} already closed`);
    if (tau > this.cfg.maxStaleness) return this.reject(isl, m.tokens, ErrorCode.STALE, `staleness ${tau} exceeds ${this.cfg.maxStaleness}`);

    const decoded = decodeDelta(sub.frame, this.paramCount, this.decodeBuf);
    if (!decoded.ok) return this.reject(isl, m.tokens, decoded.error.code, decoded.error.message);
    const delta = decoded.value;
    const norm = l2(delta);
    const score = norm / Math.sqrt(Math.max(1, m.steps));
    const bound = this.normLimit();
    if (score > bound) {
      return this.reject(isl, m.tokens, ErrorCode.NORM_BOUND, `‖Δ‖/√steps = ${score.toPrecision(4)} exceeds ${this.cfg.normBound.factor} × median ${(bound / this.cfg.normBound.factor).toPrecision(4)}`);
    }

    // counted from here on
    isl.lastSeq = m.seq;
    isl.submittedRounds.push(m.roundId);
    if (isl.submittedRounds.length > SUBMITTED_ROUNDS_KEPT) isl.submittedRounds.shift();
    isl.lastBaseVersion = m.baseVersion;
    isl.lastStaleness = tau;
    isl.tokensSubmitted += m.tokens;
    isl.localSteps += m.steps;
    if (m.elapsedMs > 0 && m.tokens > 0) {
      const v = (1000 * m.tokens) / m.elapsedMs;
      isl.tokensPerSec = isl.tokensPerSec === undefined || isl.accepted === 0 ? v : 0.5 * isl.tokensPerSec + 0.5 * v;
    }
    if (isl.roundId === m.roundId) isl.roundId = undefined;
    this.totalsAcc.tokensSubmitted += m.tokens;
    this.perVersion.accepted += 1;
    this.perVersion.rawBytesAccepted += 4 * this.paramCount;
    this.perVersion.frameBytesAccepted += frameBytes;
    this.totalsAcc.accepted += 1;

    const base: Contribution = { islandId: isl.id, seq: m.seq, roundId: m.roundId, baseVersion: m.baseVersion, staleness: tau, tokens: m.tokens, weight: 0 };
    if (!sync) {
      // async: apply on arrival. weight = s(τ) · min(cap, tokens / expected); scale 1/N (N active islands)
      const expected = this.expectedTokens();
      const w = stalenessWeight(this.cfg.staleness, tau) * Math.min(this.cfg.maxTokenWeight, m.tokens / Math.max(1, expected));
      const n = this.activeCount();
      const period = this.cfg.outer.dnPeriod > 0 ? this.cfg.outer.dnPeriod : n;
      const c: Contribution = { ...base, weight: w };
      isl.accepted += 1;
      const applied = this.commitUpdate(delta, w / n, period, now, [c], [], [{ tokens: m.tokens, loss: m.lossMean }]);
      if (!applied.ok) {
        // the combined update overflowed: undo the counting, report it as non-finite
        isl.accepted -= 1;
        this.perVersion.accepted -= 1;
        this.totalsAcc.accepted -= 1;
        return this.reject(isl, 0, applied.error.code, applied.error.message);
      }
      this.pushNorm(score);
      return ok({ status: 'applied', version: this.versionNum, roundId: m.roundId, staleness: tau, norm });
    }

    // sync: hold it until the round closes
    const buf = this.take();
    buf.set(delta);
    this.round.pending.push({ ...base, delta: buf, score, lossMean: m.lossMean, arrivedAt: now });
    if (!late && this.round.members.has(isl.id)) this.round.returned.set(isl.id, now - this.round.openedAt);
    isl.accepted += 1;
    const roundBefore = this.round.id;
    this.maybeCloseRound(now);
    const closed = this.round.id !== roundBefore;
    return ok({ status: closed ? 'applied' : 'pending', version: this.versionNum, roundId: m.roundId, staleness: tau, norm });
  }

  /** Advances time: island timeouts, grace windows and round timeouts. Call at nextDeadline() or periodically. */
  tick(now: number): void {
    for (const isl of this.islandsById.values()) {
      if (isl.status === 'online' && now - isl.lastSeen >= this.cfg.islandTimeoutMs) {
        this.setStatus(isl, 'offline', `unseen for ${now - isl.lastSeen} ms`);
        isl.waiting = false;
      }
    }
    this.maybeCloseRound(now);
  }

  // ── admin ───────────────────────────────────────────────────────────────────────────────────

  pause(): void { this.paused = true; }

  /** Resumes: islands left waiting get their assignments as events. */
  resume(now: number): void {
    if (!this.paused) return;
    this.paused = false;
    this.maybeCloseRound(now);
    this.releaseWaiting(now);
  }

  /** Changes runtime knobs (validated; mode, seqLen and dataSeed are fixed for a run). */
  setConfig(patch: CoordinatorConfigPatch): Result<CoordinatorConfig> {
    for (const k of Object.keys(patch)) {
      if (!RUNTIME_KEYS.includes(k as keyof CoordinatorConfig)) return err(ErrorCode.BAD_CONFIG, `${k} cannot change during a run`);
    }
    const next = mergeConfig(this.cfg, patch);
    const problems = validateCoordinatorConfig(next);
    if (problems.length) return err(ErrorCode.BAD_CONFIG, problems.join('; '));
    this.cfg = next;
    if (this.cfg.totalTokens <= 0 || this.totalsAcc.tokensApplied < this.cfg.totalTokens) this.done = false;
    return ok(this.config());
  }

  // ── snapshot / restore ──────────────────────────────────────────────────────────────────────

  /** Everything needed to resume exactly. The arrays are copies. */
  snapshot(): CoordinatorSnapshot {
    const tensors: Record<string, Float32Array | Uint8Array> = {
      theta: this.theta.slice(),
      'outer.momentum': this.outer.state.momentum.slice(),
      'outer.buffer': this.outer.state.buffer.slice(),
      'downlink.residual': this.downlinkFb.residual.slice(),
    };
    this.round.pending.forEach((p, i) => { tensors[`pending.${i}`] = p.delta.slice(); });
    for (const u of this.updates) tensors[`update.${u.version}`] = u.frame.slice();
    const meta: CoordinatorSnapshotMeta = {
      format: 'atoll-coordinator', formatVersion: 1, protocolVersion: PROTOCOL_VERSION,
      config: structuredClone(this.cfg), paramCount: this.paramCount, version: this.versionNum, hash: this.hashHex,
      paused: this.paused,
      outer: { bufferCount: this.outer.state.bufferCount, steps: this.outer.state.steps },
      islands: this.islands(), nextIslandSerial: this.nextIslandSerial, assignSerial: this.assignSerial,
      round: {
        id: this.round.id, baseVersion: this.round.baseVersion, openedAt: this.round.openedAt,
        members: [...this.round.members], returned: [...this.round.returned], failed: [...this.round.failed],
      },
      pending: this.round.pending.map(({ delta: _d, ...rest }) => structuredClone(rest)),
      normHistory: this.normHistory.slice(),
      totals: structuredClone(this.totalsAcc), perVersion: structuredClone(this.perVersion),
      updates: this.updates.map(({ frame: _f, ...rest }) => structuredClone(rest)),
      // VersionStats entries are never mutated once pushed: a shallow copy is a snapshot
      history: this.historyList.slice(),
      done: this.done,
    };
    return { tensors, meta };
  }

  /** Rebuilds a coordinator from `snapshot()`; checks sizes and θ's hash. */
  static restore(s: CoordinatorSnapshot): Result<Coordinator> {
    const m = s.meta;
    if (m?.format !== 'atoll-coordinator' || m.formatVersion !== 1) return err(ErrorCode.BAD_REQUEST, 'not an atoll coordinator snapshot (v1)');
    const f32 = (name: string): Float32Array | null => {
      const t = s.tensors[name];
      return t instanceof Float32Array && t.length === m.paramCount ? t : null;
    };
    const theta = f32('theta'), mom = f32('outer.momentum'), buf = f32('outer.buffer'), res = f32('downlink.residual');
    if (!theta || !mom || !buf || !res) return err(ErrorCode.WRONG_SIZE, `snapshot tensors are missing or not ${m.paramCount} f32 elements`);
    if (hashParams(theta) !== m.hash) return err(ErrorCode.HASH_MISMATCH, 'snapshot θ does not match its hash');
    let c: Coordinator;
    try {
      c = new Coordinator({ params: theta, config: m.config, now: m.round.openedAt });
    } catch (e) {
      return err(ErrorCode.BAD_CONFIG, e instanceof Error ? e.message : String(e));
    }
    c.versionNum = m.version;
    c.hashHex = m.hash;
    c.paused = m.paused;
    c.done = m.done;
    c.outer.state.momentum.set(mom);
    c.outer.state.buffer.set(buf);
    c.outer.state.bufferCount = m.outer.bufferCount;
    c.outer.state.steps = m.outer.steps;
    c.downlinkFb.residual.set(res);
    for (const isl of m.islands) c.islandsById.set(isl.id, structuredClone(isl));
    c.nextIslandSerial = m.nextIslandSerial;
    c.assignSerial = m.assignSerial;
    c.round = {
      id: m.round.id, baseVersion: m.round.baseVersion, openedAt: m.round.openedAt,
      members: new Set(m.round.members), returned: new Map(m.round.returned), failed: new Set(m.round.failed ?? []), pending: [],
    };
    for (let i = 0; i < m.pending.length; i++) {
      const d = f32(`pending.${i}`);
      if (!d) return err(ErrorCode.WRONG_SIZE, `pending.${i} is missing`);
      const b = c.take();
      b.set(d);
      c.round.pending.push({ ...structuredClone(m.pending[i]), delta: b });
    }
    c.normHistory = m.normHistory.slice();
    c.totalsAcc = structuredClone(m.totals);
    c.perVersion = structuredClone(m.perVersion);
    for (const u of m.updates) {
      const frame = s.tensors[`update.${u.version}`];
      if (!(frame instanceof Uint8Array)) return err(ErrorCode.BAD_REQUEST, `update.${u.version} frame is missing`);
      c.updates.push({ ...structuredClone(u), frame: frame.slice() });
    }
    c.historyList = structuredClone(m.history);
    return ok(c);
  }

  // ── internals ───────────────────────────────────────────────────────────────────────────────

  private batchSizeFor(caps: IslandCaps): number {
    const cap = Math.min(this.cfg.maxBatchSize, caps.maxBatch ?? Infinity);
    return Math.max(1, Math.min(cap, caps.batchSize ?? this.cfg.batchSize));
  }

  private touch(isl: IslandRecord, now: number): void {
    isl.lastSeen = Math.max(isl.lastSeen, now);
    if (isl.status === 'offline' || isl.status === 'left') this.setStatus(isl, 'online', 'seen again');
  }

  private setStatus(isl: IslandRecord, status: IslandStatus, reason: string): void {
    if (isl.status === status && reason !== 'joined') return;
    isl.status = status;
    this.events.push({ type: 'island', islandId: isl.id, status, reason });
  }

  /** Islands that are online and hold work (or wait for it): the N of async scaling and DN's period. */
  private activeCount(): number {
    let n = 0;
    for (const isl of this.islandsById.values()) if (isl.status === 'online') n++;
    return Math.max(1, n);
  }

  /** Mean assigned tokens per round over online islands: async's "expected" contribution. */
  private expectedTokens(): number {
    let sum = 0, n = 0;
    for (const isl of this.islandsById.values()) {
      if (isl.status !== 'online' || isl.assignedSteps <= 0) continue;
      sum += isl.assignedSteps * isl.batchSize * this.cfg.seqLen;
      n++;
    }
    return n > 0 ? sum / n : this.cfg.innerSteps * this.cfg.batchSize * this.cfg.seqLen;
  }

  private assignOrWait(isl: IslandRecord, now: number): Result<Assignment | null> {
    if (this.done) return err(ErrorCode.DONE, `the run reached its budget of ${this.cfg.totalTokens} tokens`);
    if (isl.status !== 'online') this.setStatus(isl, 'online', 'seen again');
    const r = this.round;
    // sync: an island whose delta for the open round is in waits for the round to close
    const waitForRound = this.cfg.mode === 'sync' && (r.returned.has(isl.id) || r.failed.has(isl.id));
    if (this.paused || waitForRound) {
      isl.waiting = true;
      isl.roundId = undefined;
      return ok(null);
    }
    return ok(this.makeAssignment(isl, now));
  }

  private makeAssignment(isl: IslandRecord, now: number): Assignment {
    const cfg = this.cfg;
    const sync = cfg.mode === 'sync';
    let roundId: number;
    let remainingMs: number | undefined;
    if (sync) {
      roundId = this.round.id;
      this.round.members.add(isl.id);
      if (cfg.targetRoundMs > 0) remainingMs = Math.max(0, cfg.targetRoundMs - (now - this.round.openedAt));
    } else {
      roundId = ++this.assignSerial;
    }
    let fastest: number | undefined;
    for (const o of this.islandsById.values()) {
      if (o.status === 'online' && o.tokensPerSec !== undefined) fastest = Math.max(fastest ?? 0, o.tokensPerSec);
    }
    const B = isl.batchSize;
    const T = cfg.seqLen;
    const stepsDyLU = cfg.dylu
      ? dyluInnerSteps({
        tokensPerSec: isl.tokensPerSec, fastestTokensPerSec: fastest, batchSize: B, seqLen: T, innerSteps: cfg.innerSteps,
        minInnerSteps: cfg.minInnerSteps, maxInnerSteps: cfg.maxInnerSteps, targetRoundMs: cfg.targetRoundMs, remainingMs,
      })
      : cfg.innerSteps;
    let steps = stepsDyLU;
    // never plan past the token budget: split what is left over the online islands
    if (cfg.totalTokens > 0) {
      let online = 0;
      for (const o of this.islandsById.values()) if (o.status === 'online') online++;
      const left = Math.max(0, cfg.totalTokens - this.totalsAcc.tokensApplied);
      steps = Math.max(1, Math.min(steps, Math.ceil(left / (Math.max(1, online) * B * T))));
    }
    // Run tokens that pass per step of this island: (all islands' tokens/s) × (this island's step time),
    // or N × B × T when speeds are unknown.
    let agg = 0, allKnown = true, n = 0;
    for (const o of this.islandsById.values()) {
      if (o.status !== 'online') continue;
      n++;
      if (o.tokensPerSec === undefined) allKnown = false; else agg += o.tokensPerSec;
    }
    const tokensPerStep = allKnown && isl.tokensPerSec
      ? (agg * B * T) / isl.tokensPerSec
      : Math.max(1, n) * B * T;
    isl.roundId = roundId;
    isl.assignedSteps = steps;
    isl.assignedAt = now;
    isl.waiting = false;
    const dataStart = isl.dataSteps;
    isl.dataSteps += steps;
    return {
      islandId: isl.id,
      mode: cfg.mode,
      roundId,
      baseVersion: this.versionNum,
      baseHash: this.hashHex,
      innerSteps: steps,
      batchSize: B,
      seqLen: T,
      lr: {
        maxLr: cfg.innerLr.maxLr, minLr: cfg.innerLr.minLr, warmupTokens: cfg.innerLr.warmupTokens,
        totalTokens: cfg.totalTokens, tokensStart: this.totalsAcc.tokensApplied, tokensPerStep,
        localWarmupSteps: cfg.innerLr.localWarmupSteps, localStepsDone: isl.localSteps,
      },
      gradClip: cfg.gradClip,
      data: { seed: cfg.dataSeed, stream: isl.stream, stepStart: dataStart },
      codec: structuredClone(cfg.uplink),
      maxFrameBytes: maxFrameBytes(this.paramCount),
      maxStaleness: cfg.maxStaleness,
      targetRoundMs: cfg.targetRoundMs,
      issuedAt: now,
      minSeq: isl.lastSeq + 1,
    };
  }

  /** Emits assignment events for every island told to wait. */
  private releaseWaiting(now: number): void {
    if (this.paused) return;
    for (const isl of this.islandsById.values()) {
      if (!isl.waiting || isl.status !== 'online') continue;
      isl.waiting = false;
      const result: Result<Assignment> = this.done
        ? err(ErrorCode.DONE, `the run reached its budget of ${this.cfg.totalTokens} tokens`)
        : ok(this.makeAssignment(isl, now));
      this.events.push({ type: 'assignment', islandId: isl.id, result });
    }
  }

  private reject(isl: IslandRecord | undefined, tokens: number, code: string, message: string): Result<never> {
    this.perVersion.rejected[code] = (this.perVersion.rejected[code] ?? 0) + 1;
    this.totalsAcc.rejected[code] = (this.totalsAcc.rejected[code] ?? 0) + 1;
    if (isl) {
      isl.rejected[code] = (isl.rejected[code] ?? 0) + 1;
      isl.tokensSubmitted += tokens;
    }
    this.totalsAcc.tokensSubmitted += tokens;
    this.totalsAcc.goodput = this.totalsAcc.tokensApplied / Math.max(1, this.totalsAcc.tokensSubmitted);
    return err(code, message);
  }

  private rejectedFrom(p: PendingDelta, code: string, message: string): RejectedContribution {
    const { delta: _d, score: _s, lossMean: _l, arrivedAt: _a, weight: _w, ...c } = p;
    const isl = this.islandsById.get(p.islandId);
    if (isl) {
      isl.accepted -= 1;
      isl.rejected[code] = (isl.rejected[code] ?? 0) + 1;
    }
    this.perVersion.rejected[code] = (this.perVersion.rejected[code] ?? 0) + 1;
    this.totalsAcc.rejected[code] = (this.totalsAcc.rejected[code] ?? 0) + 1;
    this.perVersion.accepted -= 1;
    this.totalsAcc.accepted -= 1;
    return { ...c, error: { code, message } };
  }

  /** The norm-bound limit on ‖Δ‖/√steps now (Infinity when off or without enough history). */
  private normLimit(extra?: number[]): number {
    const nb = this.cfg.normBound;
    if (nb.factor <= 0) return Infinity;
    const xs = extra ? this.normHistory.concat(extra) : this.normHistory;
    if (xs.length < nb.minHistory) return Infinity;
    return nb.factor * median(xs);
  }

  private pushNorm(score: number): void {
    this.normHistory.push(score);
    const w = this.cfg.normBound.window;
    if (this.normHistory.length > w) this.normHistory.splice(0, this.normHistory.length - w);
  }

  private take(): Float32Array { return this.pool.pop() ?? new Float32Array(this.paramCount); }
  private release(b: Float32Array): void { if (this.pool.length < 64) this.pool.push(b); }

  // ── sync rounds ─────────────────────────────────────────────────────────────────────────────

  private liveMembers(): number {
    let live = 0;
    for (const id of this.round.members) {
      const isl = this.islandsById.get(id);
      if (this.round.returned.has(id) || (isl && isl.status === 'online' && !this.round.failed.has(id))) live++;
    }
    return live;
  }

  private quorumMet(): boolean {
    const returned = this.round.returned.size;
    const need = Math.max(this.cfg.minContributors, Math.ceil(this.cfg.quorum * this.liveMembers()));
    return returned >= need;
  }

  /** openedAt + clamp(factor × median return time of this round so far, floor, cap). */
  private graceDeadline(): number {
    const g = this.cfg.grace;
    const times = [...this.round.returned.values()];
    const med = times.length ? median(times) : 0;
    return this.round.openedAt + Math.min(g.capMs, Math.max(g.floorMs, g.factor * med));
  }

  private maybeCloseRound(now: number): void {
    if (this.cfg.mode !== 'sync' || this.paused) return;
    const r = this.round;
    if (r.pending.length < this.cfg.minContributors) return;
    const live = this.liveMembers();
    const allIn = live > 0 && r.returned.size >= live;
    const byGrace = this.quorumMet() && now >= this.graceDeadline();
    const byTimeout = now >= r.openedAt + this.cfg.roundTimeoutMs;
    // late deltas alone, with no member left to wait for
    const orphans = live === 0;
    if (allIn || byGrace || byTimeout || orphans) this.closeRound(now);
  }

  private closeRound(now: number): void {
    const r = this.round;
    const cfg = this.cfg;
    // close-time norm bound: against history ∪ this round (catches a bad delta in the first round)
    const scores = r.pending.map((p) => p.score);
    const limit = this.normLimit(scores);
    const rejected: RejectedContribution[] = [];
    const kept: PendingDelta[] = [];
    for (const p of r.pending) {
      if (p.score > limit) {
        rejected.push(this.rejectedFrom(p, ErrorCode.NORM_BOUND, `‖Δ‖/√steps = ${p.score.toPrecision(4)} exceeds the round's bound ${limit.toPrecision(4)}`));
        this.release(p.delta);
      } else kept.push(p);
    }
    this.events.push({ type: 'round', roundId: r.id, baseVersion: r.baseVersion, state: 'closed', members: r.members.size, time: now });
    if (kept.length > 0) {
      // weights: tokens × s(τ), τ relative to the version being replaced
      let wsum = 0;
      for (const p of kept) {
        p.staleness = this.versionNum - p.baseVersion;
        p.weight = p.tokens * stalenessWeight(cfg.staleness, p.staleness);
        wsum += p.weight;
      }
      for (const p of kept) p.weight = wsum > 0 ? p.weight / wsum : 1 / kept.length;
      const g = this.gBuf;
      const t = Math.floor(cfg.trimFraction * kept.length);
      if (t > 0 && kept.length - 2 * t >= 1) trimmedMean(kept.map((p) => p.delta), t, g);
      else {
        const acc = this.accBuf;
        acc.fill(0);
        for (const p of kept) {
          const d = p.delta, w = p.weight;
          for (let i = 0; i < d.length; i++) acc[i] += w * d[i];
        }
        for (let i = 0; i < g.length; i++) g[i] = acc[i];
      }
      const contributors: Contribution[] = kept.map(({ islandId, seq, roundId, baseVersion, staleness, tokens, weight }) => ({ islandId, seq, roundId, baseVersion, staleness, tokens, weight }));
      const res = this.commitUpdate(g, 1, 1, now, contributors, rejected, kept.map((p) => ({ tokens: p.tokens, loss: p.lossMean })));
      if (res.ok) for (const p of kept) this.pushNorm(p.score);
      else {
        for (const p of kept) rejected.push(this.rejectedFrom(p, res.error.code, res.error.message));
        this.events.push({ type: 'rejected', rejected });
      }
    } else if (rejected.length) {
      this.events.push({ type: 'rejected', rejected });
    }
    for (const p of kept) this.release(p.delta);
    // open the next round on the (new) version; everyone waiting joins it
    this.round = { id: r.id + 1, baseVersion: this.versionNum, openedAt: now, members: new Set(), returned: new Map(), failed: new Set(), pending: [] };
    this.events.push({ type: 'round', roundId: this.round.id, baseVersion: this.versionNum, state: 'open', members: 0, time: now });
    this.releaseWaiting(now);
  }

  // ── the outer step ──────────────────────────────────────────────────────────────────────────

  /**
   * θ ← θ − Q(u) with u the outer optimizer's update for pseudo-gradient `g` (scaled by `scale`),
   * Q the downlink codec with server-side error feedback. Emits the 'update' event.
   */
  private commitUpdate(
    g: Float32Array, scale: number, period: number, now: number,
    contributors: Contribution[], rejected: RejectedContribution[], losses: Array<{ tokens: number; loss: number }>,
  ): Result<void> {
    const cfg = this.cfg;
    if (!this.outer.propose(cfg.outer, g, scale, period)) return err(ErrorCode.NON_FINITE, 'the outer update overflowed');
    // error feedback: keep the residual's previous value, so a failure leaves it untouched
    const resBefore = this.residualBackup;
    resBefore.set(this.downlinkFb.residual);
    const q = encodeWithFeedback(this.outer.update, this.downlinkFb, { encoding: cfg.downlink.encoding, blockSize: cfg.downlink.blockSize }, this.codecScratch);
    if (!q.ok) {
      this.downlinkFb.residual.set(resBefore);
      return err(q.error.code, `the outer update could not be encoded: ${q.error.message}`);
    }
    this.outer.commit();
    applyUpdate(this.theta, q.value.decoded);
    const prevVersion = this.versionNum, prevHash = this.hashHex;
    this.versionNum += 1;
    this.hashHex = hashParams(this.theta);
    const tokens = contributors.reduce((a, c) => a + c.tokens, 0);
    this.totalsAcc.tokensApplied += tokens;
    this.totalsAcc.version = this.versionNum;
    this.totalsAcc.bytesOut += q.value.frame.length;
    this.totalsAcc.goodput = this.totalsAcc.tokensApplied / Math.max(1, this.totalsAcc.tokensSubmitted);
    let lw = 0, ls = 0;
    for (const l of losses) if (Number.isFinite(l.loss)) { lw += l.tokens; ls += l.tokens * l.loss; }
    const trainLoss = lw > 0 ? ls / lw : NaN;
    for (const c of contributors) {
      const isl = this.islandsById.get(c.islandId);
      if (isl) isl.tokensContributed += c.tokens;
    }
    const update: UpdateMsg = {
      version: this.versionNum, prevVersion, prevHash, hash: this.hashHex, frame: q.value.frame, time: now,
      tokens, totalTokens: this.totalsAcc.tokensApplied, contributors: contributors.length, trainLoss,
    };
    this.updates.push(update);
    if (this.updates.length > cfg.keepUpdates) this.updates.splice(0, this.updates.length - cfg.keepUpdates);
    const hist = new Array<number>(STALENESS_BUCKETS).fill(0);
    for (const c of contributors) hist[Math.min(STALENESS_BUCKETS - 1, c.staleness)]++;
    const pv = this.perVersion;
    const stats: VersionStats = {
      version: this.versionNum, time: now, tokens, totalTokens: this.totalsAcc.tokensApplied, trainLoss,
      contributors: contributors.length, stalenessHist: hist, accepted: pv.accepted, rejected: { ...pv.rejected },
      bytesIn: pv.bytesIn, bytesOut: q.value.frame.length,
      compressionRatio: pv.frameBytesAccepted > 0 ? pv.rawBytesAccepted / pv.frameBytesAccepted : 0,
      goodput: this.totalsAcc.goodput, updateNorm: l2(this.outer.update),
    };
    this.perVersion = newPerVersion();
    this.historyList.push(stats);
    if (this.historyList.length > cfg.historyLimit) this.historyList.splice(0, this.historyList.length - cfg.historyLimit);
    this.events.push({ type: 'update', update, contributors, rejected, stats });
    if (cfg.totalTokens > 0 && this.totalsAcc.tokensApplied >= cfg.totalTokens && !this.done) {
      this.done = true;
      this.events.push({ type: 'done', version: this.versionNum, totalTokens: this.totalsAcc.tokensApplied });
    }
    return ok(undefined);
  }
}

// ── small numeric helpers ─────────────────────────────────────────────────────────────────────

function l2(x: Float32Array): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i] * x[i];
  return Math.sqrt(s);
}

function median(xs: number[]): number {
  const a = xs.slice().sort((p, q) => p - q);
  const k = a.length >> 1;
  return a.length % 2 ? a[k] : 0.5 * (a[k - 1] + a[k]);
}

/** Coordinate-wise mean of `ds` after dropping the t smallest and t largest values per coordinate. */
export function trimmedMean(ds: Float32Array[], t: number, out: Float32Array): void {
  const k = ds.length;
  const col = new Float64Array(k);
  const n = out.length;
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < k; j++) {
      // insertion sort into col[0..j]
      const v = ds[j][i];
      let p = j - 1;
      while (p >= 0 && col[p] > v) { col[p + 1] = col[p]; p--; }
      col[p + 1] = v;
    }
    let s = 0;
    for (let j = t; j < k - t; j++) s += col[j];
    out[i] = s / (k - 2 * t);
  }
}
