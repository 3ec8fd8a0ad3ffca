// The coordinator: global θ and its versions, rounds, outer optimizer, staleness, DyLU, validation.
//
// Pure logic: no I/O, no timers, no Date.now(). Every call that depends on time takes `now` (ms),
// so the server (wall clock), the simulator (virtual clock) and tests drive the same code.
//
// Beside it: types (and the durability contract: how to ack from the events), validate, aggregate
// (norm bound, robust means), rounds (sync rounds, async merge windows, sizing), outer-step (θ, the
// outer optimizer and the downlink, stepped here or by a host's worker threads), stats, snapshot.

import { decodeDelta, maxFrameBytes } from '../codec/index.ts';
import { type Result, err, ok } from '../result.ts';
import {
  type Assignment, type IslandCaps, type ModelSnapshotMsg, type TrainingMode, type UpdateMsg,
  ErrorCode, PROTOCOL_VERSION, validateDeltaMeta,
} from '../protocol.ts';
import { NormHistory, combineDeltas, isWeightedMean, l2, weighDeltas } from './aggregate.ts';
import {
  type CoordinatorConfig, type CoordinatorConfigPatch, DEFAULT_COORDINATOR_CONFIG, RUNTIME_KEYS,
  mergeConfig, validateCoordinatorConfig,
} from './config.ts';
import { hashParams } from './hash.ts';
import type { OuterState } from './outer.ts';
import { OuterStep, type StepTaken } from './outer-step.ts';
import {
  assignmentMessage, graceDeadline, hold, newRound, outerStepOf, quorumMet, roundShouldClose, sizeAssignment, usesTurn,
  windowDeadline, windowShouldClose,
} from './rounds.ts';
import { countAccepted, countRejection, meanLoss, versionStats } from './stats.ts';
import { type CoordinatorState, type SnapshotAlloc, readSnapshot, writeSnapshot } from './snapshot.ts';
import {
  type Contribution, type CoordinatorEvent, type CoordinatorOptions, type CoordinatorSnapshot, type CoordinatorTotals,
  type DeltaSubmission, type IslandRecord, type IslandStatus, type JoinRequest, type JoinResult, type OuterOffload,
  type OuterStepDone, type OuterStepRequest, type PendingDelta, type PerVersion, type RejectedContribution, type RoundState,
  type SubmitAccepted, type VersionStats,
  makeRoom, newIslandRecord, newPerVersion,
} from './types.ts';
import { checkDeltaPlace, checkWork, rememberWork } from './validate.ts';

export type * from './types.ts';
export { trimmedMean } from './aggregate.ts';

/** A round whose outer step is in flight (offload), or being taken here. */
interface Closing {
  now: number;
  kept: PendingDelta[];
  rejected: RejectedContribution[];
}

export class Coordinator {
  private cfg: CoordinatorConfig;
  readonly paramCount: number;
  private readonly outerStep: OuterStep;
  private versionNum = 0;
  private hashHex: string;
  private islandsById = new Map<string, IslandRecord>();
  private nextIslandSerial = 1;
  private assignSerial = 0;
  private round: RoundState;
  private norms = new NormHistory();
  private historyList: VersionStats[] = [];
  private events: CoordinatorEvent[] = [];
  private paused = false;
  private done = false;
  private totalsAcc: CoordinatorTotals;
  private perVersion: PerVersion = newPerVersion();
  // scratch, allocated once (no n-sized allocation per message on the hot path)
  private readonly decodeBuf: Float32Array;
  private readonly accBuf: Float64Array;
  private readonly pool: Float32Array[] = [];
  /** The round whose outer step a host is taking (useOffload). */
  private closing: Closing | null = null;

  constructor(opts: CoordinatorOptions) {
    const cfg = mergeConfig(DEFAULT_COORDINATOR_CONFIG, opts.config ?? {});
    const problems = validateCoordinatorConfig(cfg);
    if (problems.length) throw new RangeError(`${ErrorCode.BAD_CONFIG}: ${problems.join('; ')}`);
    this.cfg = cfg;
    const n = opts.params.length;
    this.paramCount = n;
    this.outerStep = new OuterStep(opts.params);
    this.hashHex = hashParams(this.outerStep.theta);
    this.decodeBuf = new Float32Array(n);
    this.accBuf = new Float64Array(n);
    const now = opts.now ?? 0;
    this.round = newRound(0, 0, now);
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
  model(): ModelSnapshotMsg { return { version: this.versionNum, hash: this.hashHex, params: this.outerStep.theta.slice() }; }
  /** θ itself, read-only by contract (no copy: for the server's checkpoint writer and evals). */
  params(): Readonly<Float32Array> { return this.outerStep.theta; }
  /** Copies of the outer optimizer's state (tests compare these across rejected deltas). */
  outerState(): OuterState { return this.outerStep.outerState(); }
  islands(): IslandRecord[] { return [...this.islandsById.values()].map((r) => structuredClone(r)); }
  island(id: string): IslandRecord | undefined { const r = this.islandsById.get(id); return r && structuredClone(r); }
  history(): readonly VersionStats[] { return this.historyList; }
  totals(): CoordinatorTotals { return structuredClone(this.totalsAcc); }
  /** A copy of the downlink's error-feedback residual. */
  downlinkResidual(): Float32Array { return this.outerStep.state().residual.slice(); }
  /** True while an offloaded outer step is in flight: then only reads, heartbeats and renames may be called. */
  get stepping(): boolean { return this.closing !== null; }
  /** Drains the event queue (see the durability contract in types.ts). */
  drainEvents(): CoordinatorEvent[] { const e = this.events; this.events = []; return e; }
  /** The largest legal delta frame for this model (size socket.io's maxHttpBufferSize from it). */
  maxFrameBytes(): number { return maxFrameBytes(this.paramCount); }

  /**
   * The update messages from `fromVersion` to now, for catch-up. E_TOO_OLD when some are no longer
   * kept or together outweigh θ (fetch the snapshot), E_FUTURE_VERSION when fromVersion is ahead.
   */
  updatesSince(fromVersion: number): Result<UpdateMsg[]> { return this.outerStep.downlink.since(fromVersion, this.versionNum, 4 * this.paramCount); }

  /**
   * When `tick` next needs to run (ms): a grace window or round timeout ending, an island timing out.
   * Infinity when nothing is scheduled.
   */
  nextDeadline(): number {
    let t = Infinity;
    for (const isl of this.islandsById.values()) {
      if (isl.status === 'online') t = Math.min(t, isl.lastSeen + this.cfg.islandTimeoutMs);
    }
    if (this.round.pending.length > 0 && !this.paused) {
      if (this.cfg.mode === 'async') t = Math.min(t, windowDeadline(this.round, this.cfg.asyncWindow));
      else {
        t = Math.min(t, this.round.openedAt + this.cfg.roundTimeoutMs);
        if (quorumMet(this.round, this.islandsById, this.cfg)) t = Math.min(t, graceDeadline(this.round, this.cfg.grace));
      }
    }
    return t;
  }

  // ── islands ─────────────────────────────────────────────────────────────────────────────────

  /** Registers an island (or re-registers a known id) and gives it work when there is some. */
  join(req: JoinRequest, now: number): Result<JoinResult> {
    this.idle();
    if (req.protocolVersion !== undefined && req.protocolVersion !== PROTOCOL_VERSION) {
      return err(ErrorCode.PROTOCOL_VERSION, `island speaks protocol ${req.protocolVersion}, server ${PROTOCOL_VERSION}`);
    }
    const caps = req.caps;
    let isl = req.resumeIslandId !== undefined ? this.islandsById.get(req.resumeIslandId) : undefined;
    if (isl) {
      if (isl.status === 'banned') return err(ErrorCode.BANNED, `island ${isl.id} is banned`);
      isl.caps = structuredClone(caps);
      if (caps.contributorId) isl.contributorId = caps.contributorId;
      if (caps.name) isl.name = caps.name.slice(0, 64);
      if (caps.tokensPerSec !== undefined && isl.tokensPerSec === undefined) isl.tokensPerSec = caps.tokensPerSec;
      isl.batchSize = this.batchSizeFor(caps);
    } else {
      if (!makeRoom(this.islandsById, this.cfg.maxIslandRecords)) return err(ErrorCode.FULL, `the server holds its ${this.cfg.maxIslandRecords} island records: retry later`);
      const id = req.resumeIslandId ?? `island-${this.nextIslandSerial++}`;
      isl = newIslandRecord(id, caps, this.batchSizeFor(caps), now);
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
    const isl = this.lookup(islandId, true);
    if (!isl.ok) return isl;
    this.touch(isl.value, now);
    return ok(undefined);
  }

  /** A new display name for a known island (a volunteer saved one while connected). */
  rename(islandId: string, name: string): Result<void> {
    const found = this.lookup(islandId, false);
    if (!found.ok) return found;
    found.value.name = found.value.caps.name = name.slice(0, 64);
    return ok(undefined);
  }

  /** The island said bye (or its socket closed): it stops counting for quorum. Its record stays. */
  leave(islandId: string, now: number): Result<void> {
    this.idle();
    const found = this.lookup(islandId, false);
    if (!found.ok) return found;
    const isl = found.value;
    if (isl.status !== 'banned') this.setStatus(isl, 'left', 'left');
    isl.waiting = false;
    isl.roundId = undefined;
    this.round.members.delete(islandId);
    this.maybeCloseRound(now);
    return ok(undefined);
  }

  /** Bans an island: its deltas are rejected from now on, including ones pending in the open round. */
  ban(islandId: string, now: number, reason = 'banned by admin'): Result<void> {
    this.idle();
    const found = this.lookup(islandId, false);
    if (!found.ok) return found;
    const isl = found.value;
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

  /** A validator's verdict on one of the island's deltas (audit.ts); returns its counts. */
  recordAudit(islandId: string, passed: boolean): Result<{ passed: number; failed: number }> {
    const found = this.lookup(islandId, false);
    if (!found.ok) return found;
    const a = (found.value.audits ??= { passed: 0, failed: 0 });
    if (passed) a.passed++; else a.failed++;
    return ok({ ...a });
  }

  /**
   * The next assignment after a submit. null: wait — an 'assignment' event will bring it (sync: when
   * the round closes; paused: on resume). E_DONE when the run reached its token budget.
   */
  nextAssignment(islandId: string, now: number): Result<Assignment | null> {
    this.idle();
    const isl = this.lookup(islandId, true);
    if (!isl.ok) return isl;
    this.touch(isl.value, now);
    return this.assignOrWait(isl.value, now);
  }

  // ── deltas ──────────────────────────────────────────────────────────────────────────────────

  /**
   * Validates and counts one delta. Never throws on input. A rejection changes neither θ nor the
   * optimizer state (only counters). See the durability contract in types.ts: ack from events.
   */
  submit(sub: DeltaSubmission, now: number): Result<SubmitAccepted> {
    this.idle();
    const r = this.validateAndCount(sub, now);
    // sync: a member's rejected delta uses its turn, so the round no longer waits for it (no stall on a bad island)
    if (!r.ok && this.cfg.mode === 'sync' && usesTurn(this.round, sub.meta, r.error.code)) {
      this.round.failed.add(sub.meta.islandId);
      this.maybeCloseRound(now);
    }
    return r;
  }

  private validateAndCount(sub: DeltaSubmission, now: number): Result<SubmitAccepted> {
    const frameBytes = sub.frame?.length ?? 0;
    this.perVersion.bytesIn += frameBytes;
    this.totalsAcc.bytesIn += frameBytes;
    const metaProblem = validateDeltaMeta(sub.meta);
    if (metaProblem) return this.reject(undefined, 0, ErrorCode.BAD_REQUEST, metaProblem);
    if (!(sub.frame instanceof Uint8Array)) return this.reject(undefined, 0, ErrorCode.BAD_REQUEST, 'frame must be bytes');
    // a buffer decoded by the host is ours now: kept as the pending delta, or given back
    const held = sub.decoded?.ok ? sub.decoded.value.delta : null;
    const r = this.validateAndHold(sub, now, held);
    if (held && !r.kept) this.release(held);
    return r.result;
  }

  private validateAndHold(sub: DeltaSubmission, now: number, held: Float32Array | null): { result: Result<SubmitAccepted>; kept: boolean } {
    const no = (r: Result<never>) => ({ result: r, kept: false });
    const isl = this.islandsById.get(sub.meta.islandId);
    if (!isl) return no(this.reject(undefined, 0, ErrorCode.UNKNOWN_ISLAND, `no island ${sub.meta.islandId}`));
    if (isl.status === 'banned') return no(this.reject(isl, 0, ErrorCode.BANNED, `island ${isl.id} is banned`));
    this.touch(isl, now);
    // from here on, tokens, steps and speed are the server's figures (validate.ts)
    const work = checkWork(sub.meta, isl, this.cfg, now);
    if (!work.ok) return no(this.reject(isl, 0, work.code, work.message));
    const m = work.meta;
    const place = checkDeltaPlace(m, isl, {
      cfg: this.cfg, version: this.versionNum, paused: this.paused, done: this.done,
      roundId: this.round.id, roundBaseVersion: this.round.baseVersion, assignSerial: this.assignSerial,
    });
    if (!place.ok) return no(this.reject(isl, place.tokens, place.code, place.message));
    const { tau, late } = place;
    const sync = this.cfg.mode === 'sync';

    const decoded = sub.decoded ?? this.decodeHere(sub.frame);
    if (!decoded.ok) return no(this.reject(isl, m.tokens, decoded.error.code, decoded.error.message));
    const { delta, norm } = decoded.value;
    const steps = work.assignedSteps;
    const score = norm / Math.sqrt(Math.max(1, steps));
    // once a history exists, against history ∪ this window, as at close: the window shares this
    // delta's learning rate and residual carry-over, where early, smaller deltas alone would reject
    // honest ones (and each rejection, put back into the residual, grows the next delta)
    const nb = this.cfg.normBound;
    const bound = this.norms.scores.length < nb.minHistory ? Infinity : this.norms.limiter(nb, this.round.pending)(steps);
    if (score > bound) {
      this.norms.push({ score, steps }, nb.window);
      return no(this.reject(isl, m.tokens, ErrorCode.NORM_BOUND, `‖Δ‖/√steps = ${score.toPrecision(4)} exceeds its bound ${bound.toPrecision(4)} (${nb.factor} × the median, for ${steps} steps)`));
    }

    // counted from here on
    countAccepted(isl, m, tau, this.perVersion, this.totalsAcc, { raw: 4 * this.paramCount, frame: sub.frame.length });

    const base: Contribution = { islandId: isl.id, seq: m.seq, roundId: m.roundId, baseVersion: m.baseVersion, staleness: tau, tokens: m.tokens, weight: 0 };
    // hold it until the round (sync) or the merge window (async) closes
    const buf = held ?? this.take();
    if (!held) buf.set(delta);
    hold(this.round, { ...base, delta: buf, score, steps, lossMean: m.lossMean, arrivedAt: now }, isl, sync, late, now);
    isl.accepted += 1;
    const roundBefore = this.round.id;
    this.maybeCloseRound(now);
    return { result: ok({ status: this.round.id !== roundBefore ? 'applied' : 'pending', version: this.versionNum, roundId: m.roundId, staleness: tau, norm }), kept: true };
  }

  /** Δ decoded into the scratch buffer, and ‖Δ‖. */
  private decodeHere(frame: Uint8Array): Result<{ delta: Float32Array; norm: number }> {
    const d = decodeDelta(frame, this.paramCount, this.decodeBuf);
    return d.ok ? ok({ delta: d.value, norm: l2(d.value) }) : d;
  }

  /** Advances time: island timeouts, grace windows and round timeouts. Call at nextDeadline() or periodically. */
  tick(now: number): void {
    this.idle();
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
    this.idle();
    if (!this.paused) return;
    this.paused = false;
    this.maybeCloseRound(now);
    this.releaseWaiting(now);
  }

  /** Changes runtime knobs (validated; mode, seqLen and dataSeed are fixed for a run). */
  setConfig(patch: CoordinatorConfigPatch): Result<CoordinatorConfig> {
    this.idle();
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

  /** Everything needed to resume exactly. The arrays are copies (writeSnapshot: `alloc` lends those of the optimizer state and pending deltas). */
  snapshot(alloc?: SnapshotAlloc): CoordinatorSnapshot {
    this.idle();
    const { outer, residual } = this.outerStep.state();
    return writeSnapshot({
      config: this.cfg, theta: this.outerStep.theta, version: this.versionNum, hash: this.hashHex, paused: this.paused, done: this.done,
      outer, downlinkResidual: residual, islands: [...this.islandsById.values()],
      nextIslandSerial: this.nextIslandSerial, assignSerial: this.assignSerial, round: this.round,
      normHistory: this.norms.scores, normSteps: this.norms.steps, totals: this.totalsAcc, perVersion: this.perVersion, updates: this.outerStep.downlink.updates, history: this.historyList,
    }, alloc);
  }

  /** Rebuilds a coordinator from `snapshot()`; checks sizes and θ's hash. */
  static restore(snap: CoordinatorSnapshot): Result<Coordinator> {
    const r = readSnapshot(snap);
    if (!r.ok) return r;
    const s: CoordinatorState = r.value;
    let c: Coordinator;
    try {
      c = new Coordinator({ params: s.theta, config: s.config, now: s.round.openedAt });
    } catch (e) {
      return err(ErrorCode.BAD_CONFIG, e instanceof Error ? e.message : String(e));
    }
    c.versionNum = s.version; c.hashHex = s.hash; c.paused = s.paused; c.done = s.done;
    c.outerStep.restore(s.outer, s.downlinkResidual, s.updates);
    for (const isl of s.islands) c.islandsById.set(isl.id, isl);
    c.nextIslandSerial = s.nextIslandSerial; c.assignSerial = s.assignSerial;
    c.round = s.round; c.norms.restore(s.normHistory, s.normSteps);
    c.totalsAcc = s.totals; c.perVersion = s.perVersion; c.historyList = s.history;
    return ok(c);
  }

  // ── the outer step elsewhere ────────────────────────────────────────────────────────────────

  /**
   * From now on the outer step's numerics run in the host (server/outer/offload.ts): θ moves into
   * `o.theta` (shared), g is written into `o.g`. The host must hold the optimizer's and downlink's
   * state as `outerState()` and `downlinkResidual()` give it now.
   */
  useOffload(o: OuterOffload): void {
    this.outerStep.useOffload(o, this.round.pending);
    this.pool.length = 0; // deltas live in the host's buffers from now on
  }

  /** The outer step the host must take now (offload only; see `completeStep`), or null. */
  pendingStep(): OuterStepRequest | null { return this.outerStep.request; }

  /** Offloaded steps whose optimizer and downlink state is still only in the host (0: none). */
  get outerStateStale(): number { return this.outerStep.stale; }

  /** The host's optimizer and downlink state after the last step (views; snapshots copy them). */
  syncOuterState(outer: OuterState, residual: Float32Array): void {
    this.outerStep.sync(outer, residual);
  }

  /** The host took the step (θ moved) or failed to (nothing moved): the round closes with it. */
  completeStep(res: Result<OuterStepDone>): void {
    const c = this.closing;
    if (!c) throw new Error('coordinator: no outer step is in flight');
    this.closing = null;
    this.finishClose(c, this.outerStep.complete(res, c.kept));
  }

  /** Calls that change rounds wait for an offloaded step in flight (the host serialises them). */
  private idle(): void {
    if (this.closing) throw new Error('coordinator: called while an outer step is in flight');
  }

  // ── internals ───────────────────────────────────────────────────────────────────────────────

  /** The island's record; E_UNKNOWN_ISLAND, or E_BANNED when `live` and it is banned. */
  private lookup(islandId: string, live: boolean): Result<IslandRecord> {
    const isl = this.islandsById.get(islandId);
    if (!isl) return err(ErrorCode.UNKNOWN_ISLAND, `no island ${islandId}`);
    if (live && isl.status === 'banned') return err(ErrorCode.BANNED, `island ${islandId} is banned`);
    return ok(isl);
  }

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

  private assignOrWait(isl: IslandRecord, now: number): Result<Assignment | null> {
    if (this.done) return err(ErrorCode.DONE, `the run reached its budget of ${this.cfg.totalTokens} tokens`);
    if (isl.status !== 'online') this.setStatus(isl, 'online', 'seen again');
    const r = this.round;
    // an island whose delta is in the open round (or merge window) waits for it to close: it then starts on time (τ = 0)
    const waitForRound = r.returned.has(isl.id) || r.failed.has(isl.id);
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
    const roundId = sync ? this.round.id : ++this.assignSerial;
    // a round nobody trains in starts again with its first member: an island joining an idle or a
    // fresh server gets a whole round, not the time left of an empty one
    const r = this.round;
    if (sync && r.members.size === 0 && r.pending.length === 0) r.openedAt = now;
    if (sync) r.members.add(isl.id);
    // a late joiner of a sync round gets the time left in it (not an island back after its ack's round trip)
    const late = now - r.openedAt;
    const remainingMs = sync && cfg.targetRoundMs > 0 && late > 0.25 * cfg.targetRoundMs ? Math.max(0, cfg.targetRoundMs - late) : undefined;
    const size = sizeAssignment(isl, this.islandsById.values(), cfg, this.totalsAcc.tokensApplied, remainingMs);
    const a = assignmentMessage(isl, cfg, size, {
      roundId, baseVersion: this.versionNum, baseHash: this.hashHex, tokensApplied: this.totalsAcc.tokensApplied, paramCount: this.paramCount, now,
    });
    Object.assign(isl, { roundId, assignedSteps: size.steps, assignedAt: now, waiting: false, dataSteps: isl.dataSteps + size.steps });
    rememberWork(isl, a);
    return a;
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
    countRejection(this.perVersion, this.totalsAcc, isl, code, tokens);
    return err(code, message);
  }

  private rejectedFrom(p: PendingDelta, code: string, message: string): RejectedContribution {
    const { delta: _d, score: _s, lossMean: _l, arrivedAt: _a, weight: _w, ...c } = p;
    const isl = this.islandsById.get(p.islandId);
    if (isl) isl.accepted -= 1;
    countRejection(this.perVersion, this.totalsAcc, isl, code, 0);
    this.perVersion.accepted -= 1;
    this.totalsAcc.accepted -= 1;
    return { ...c, error: { code, message } };
  }

  private take(): Float32Array { return this.outerStep.offload?.buffer() ?? this.pool.pop() ?? new Float32Array(this.paramCount); }
  private release(b: Float32Array): void {
    if (this.outerStep.offload) this.outerStep.offload.release(b);
    else if (this.pool.length < 64) this.pool.push(b);
  }

  // ── sync rounds and async merge windows ─────────────────────────────────────────────────────────────────────────────

  private maybeCloseRound(now: number): void {
    if (this.paused || this.closing) return;
    const close = this.cfg.mode === 'sync'
      ? roundShouldClose(this.round, this.islandsById, this.cfg, now)
      : windowShouldClose(this.round, this.islandsById.values(), this.cfg.asyncWindow, now);
    if (close) this.closeRound(now);
  }

  private closeRound(now: number): void {
    const r = this.round;
    const cfg = this.cfg;
    // close-time norm bound: against history ∪ this round (catches a bad delta in the first round)
    const bound = this.norms.limiter(cfg.normBound, r.pending);
    const limit = (p: PendingDelta) => bound(p.steps);
    const kept = r.pending.filter((p) => p.score <= limit(p));
    const rejected = r.pending.filter((p) => p.score > limit(p)).map((p) => {
      this.norms.push(p, cfg.normBound.window); // a rejected score enters the history too (aggregate.ts)
      this.release(p.delta);
      return this.rejectedFrom(p, ErrorCode.NORM_BOUND, `‖Δ‖/√steps = ${p.score.toPrecision(4)} exceeds the round's bound ${limit(p).toPrecision(4)} for ${p.steps} steps`);
    });
    this.events.push({ type: 'round', roundId: r.id, baseVersion: r.baseVersion, state: 'closed', members: r.members.size, time: now });
    const c: Closing = { now, kept, rejected };
    if (kept.length === 0) return this.finishClose(c, null);
    // with an offload, the host's workers take the weighted mean (and each delta's agreement with it)
    const inHost = this.outerStep.offload !== null && isWeightedMean(kept.length, cfg);
    if (inHost) weighDeltas(kept, cfg, this.versionNum);
    else combineDeltas(kept, cfg, this.versionNum, this.outerStep.g, this.accBuf);
    const taken = this.outerStep.begin(cfg, kept, inHost, outerStepOf(cfg, kept, this.islandsById.values()));
    if (taken) this.finishClose(c, taken);
    else this.closing = c; // the host takes it: completeStep
  }

  /** The round's step taken (or failed, or none: null): record it, then open the next round on the (new) version. */
  private finishClose(c: Closing, taken: Result<StepTaken> | null): void {
    if (taken?.ok) {
      this.recordUpdate(taken.value, c);
      for (const p of c.kept) this.norms.push(p, this.cfg.normBound.window);
    } else {
      if (taken) for (const p of c.kept) c.rejected.push(this.rejectedFrom(p, taken.error.code, taken.error.message));
      if (c.rejected.length) this.events.push({ type: 'rejected', rejected: c.rejected });
    }
    for (const p of c.kept) this.release(p.delta);
    // everyone waiting joins the next round
    this.round = newRound(this.round.id + 1, this.versionNum, c.now);
    this.events.push({ type: 'round', roundId: this.round.id, baseVersion: this.versionNum, state: 'open', members: 0, time: c.now });
    this.releaseWaiting(c.now);
  }

  // ── the outer step ──────────────────────────────────────────────────────────────────────────

  /** The new version: counters, credit, the update message, history; emits the 'update' event. */
  private recordUpdate(step: StepTaken, c: Closing): void {
    const cfg = this.cfg;
    const now = c.now, rejected = c.rejected;
    const contributors: Contribution[] = c.kept.map(({ islandId, seq, roundId, baseVersion, staleness, tokens, weight, cosine, normRatio }) => ({ islandId, seq, roundId, baseVersion, staleness, tokens, weight, cosine, normRatio }));
    const frame = step.frame;
    const prevVersion = this.versionNum, prevHash = this.hashHex;
    this.versionNum += 1;
    this.hashHex = step.hash;
    const tokens = contributors.reduce((a, k) => a + k.tokens, 0);
    this.totalsAcc.tokensApplied += tokens;
    this.totalsAcc.version = this.versionNum;
    this.totalsAcc.bytesOut += frame.length;
    this.totalsAcc.goodput = this.totalsAcc.tokensApplied / Math.max(1, this.totalsAcc.tokensSubmitted);
    const trainLoss = meanLoss(c.kept.map((p) => ({ tokens: p.tokens, loss: p.lossMean })));
    for (const k of contributors) {
      const isl = this.islandsById.get(k.islandId);
      if (isl) isl.tokensContributed += k.tokens;
    }
    const update: UpdateMsg = {
      version: this.versionNum, prevVersion, prevHash, hash: this.hashHex, frame, time: now,
      tokens, totalTokens: this.totalsAcc.tokensApplied, contributors: contributors.length, trainLoss,
    };
    this.outerStep.downlink.keep(update, cfg.keepUpdates);
    const stats = versionStats(
      { version: this.versionNum, time: now, tokens, trainLoss, bytesOut: frame.length, updateNorm: step.updateNorm },
      contributors, this.perVersion, this.totalsAcc,
    );
    this.perVersion = newPerVersion();
    this.historyList.push(stats);
    if (this.historyList.length > cfg.historyLimit) this.historyList.splice(0, this.historyList.length - cfg.historyLimit);
    this.events.push({ type: 'update', update, contributors, rejected, stats });
    if (cfg.totalTokens > 0 && this.totalsAcc.tokensApplied >= cfg.totalTokens && !this.done) {
      this.done = true;
      this.events.push({ type: 'done', version: this.versionNum, totalTokens: this.totalsAcc.tokensApplied });
    }
  }
}
