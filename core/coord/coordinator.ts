// The coordinator: global θ and its versions, rounds, outer optimizer, staleness, DyLU, validation.
//
// Pure logic: no I/O, no timers, no Date.now(). Every call that depends on time takes `now` (ms),
// so the server (wall clock), the simulator (virtual clock) and tests drive the same code.
//
// Beside it: types (and the durability contract: how to ack from the events), islands (the island
// records), validate (the checks before decoding), aggregate (norm bound, robust means), rounds (sync
// rounds, async merge windows, assignments), outer-step (θ, the outer optimizer and the downlink,
// stepped here or by a host's worker threads), stats (the Ledger: totals, per-version figures,
// history), snapshot.

import { decodeDelta, maxFrameBytes } from '../codec/index.ts';
import { type Result, err, ok } from '../result.ts';
import {
  type Assignment,
  type ModelSnapshotMsg,
  type TrainingMode,
  type UpdateMsg,
  ErrorCode,
  PROTOCOL_VERSION,
  validateDeltaMeta,
} from '../protocol.ts';
import { NormHistory, combineDeltas, isWeightedMean, l2, weighDeltas } from './aggregate.ts';
import {
  type CoordinatorConfig,
  type CoordinatorConfigPatch,
  DEFAULT_COORDINATOR_CONFIG,
  mergeConfig,
  patchConfig,
  validateCoordinatorConfig,
} from './config.ts';
import { hashParams } from './hash.ts';
import { IslandBook } from './island-book.ts';
import type { OuterState } from './outer.ts';
import { OuterStep, type StepTaken } from './outer-step.ts';
import {
  assignWork,
  dropPending,
  hold,
  leaveRound,
  newRound,
  outerStepOf,
  roundDeadline,
  roundShouldClose,
  usesTurn,
  windowShouldClose,
} from './rounds.ts';
import { Ledger } from './ledger.ts';
import { type CoordinatorState, type SnapshotAlloc, readSnapshot, writeSnapshot } from './snapshot.ts';
import type {
  AssignedWork,
  Closing,
  Contribution,
  CoordinatorEvent,
  CoordinatorOptions,
  CoordinatorSnapshot,
  CoordinatorTotals,
  DeltaSubmission,
  IslandRecord,
  JoinRequest,
  JoinResult,
  OuterOffload,
  OuterStepDone,
  OuterStepRequest,
  PendingDelta,
  RejectedContribution,
  RoundState,
  SubmitAccepted,
  VersionStats,
} from './types.ts';
import { checkDelta, frameEncoding, rebaseWork } from './validate.ts';

export type * from './types.ts';
export { trimmedMean } from './aggregate.ts';

export class Coordinator {
  private cfg: CoordinatorConfig;
  readonly paramCount: number;
  private readonly outerStep: OuterStep;
  private versionNum = 0;
  private hashHex: string;
  private readonly book = new IslandBook((e) => this.events.push(e));
  private assignSerial = 0;
  private round: RoundState;
  private norms = new NormHistory();
  private events: CoordinatorEvent[] = [];
  private paused = false;
  private done = false;
  private readonly ledger = new Ledger();
  // scratch, allocated once (no n-sized allocation per message on the hot path)
  private readonly decodeBuf: Float32Array;
  private readonly accBuf: Float64Array;
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
    this.round = newRound(0, 0, opts.now ?? 0);
  }

  // ── read-only views ─────────────────────────────────────────────────────────────────────────

  get version(): number {
    return this.versionNum;
  }
  get hash(): string {
    return this.hashHex;
  }
  get mode(): TrainingMode {
    return this.cfg.mode;
  }
  get isPaused(): boolean {
    return this.paused;
  }
  get isDone(): boolean {
    return this.done;
  }
  /** The current sync round id (async: the last assignment serial). */
  get roundId(): number {
    return this.cfg.mode === 'sync' ? this.round.id : this.assignSerial;
  }
  /** A copy of the config. */
  config(): CoordinatorConfig {
    return structuredClone(this.cfg);
  }
  /** θ at the current version, as a fresh copy (a fetchModel answer). */
  model(): ModelSnapshotMsg {
    return { version: this.versionNum, hash: this.hashHex, params: this.outerStep.theta.slice() };
  }
  /** θ itself, read-only by contract (no copy: for the server's checkpoint writer and evals). */
  params(): Readonly<Float32Array> {
    return this.outerStep.theta;
  }
  /** Copies of the outer optimizer's state (tests compare these across rejected deltas). */
  outerState(): OuterState {
    return this.outerStep.outerState();
  }
  islands(): IslandRecord[] {
    return [...this.book.byId.values()].map((r) => structuredClone(r));
  }
  island(id: string): IslandRecord | undefined {
    const r = this.book.byId.get(id);
    return r && structuredClone(r);
  }
  /** The online islands with a round in progress: ids and round ids only, no copies of the records (mixing asks per group wait). */
  roundsInProgress(): Array<{ islandId: string; roundId: number }> {
    return this.book.roundsInProgress();
  }
  history(): readonly VersionStats[] {
    return this.ledger.history;
  }
  totals(): CoordinatorTotals {
    return structuredClone(this.ledger.totals);
  }
  /** A copy of the downlink's error-feedback residual. */
  downlinkResidual(): Float32Array {
    return this.outerStep.state().residual.slice();
  }
  /** True while an offloaded outer step is in flight: then only reads, heartbeats and renames may be called. */
  get stepping(): boolean {
    return this.closing !== null;
  }
  /** Drains the event queue (see the durability contract in types.ts). */
  drainEvents(): CoordinatorEvent[] {
    const e = this.events;
    this.events = [];
    return e;
  }
  /** The largest legal delta frame for this model (size socket.io's maxHttpBufferSize from it). */
  maxFrameBytes(): number {
    return maxFrameBytes(this.paramCount);
  }

  /**
   * The update messages from `fromVersion` to now, for catch-up. E_TOO_OLD when some are no longer
   * kept or together outweigh θ (fetch the snapshot), E_FUTURE_VERSION when fromVersion is ahead.
   */
  updatesSince(fromVersion: number): Result<UpdateMsg[]> {
    return this.outerStep.downlink.since(fromVersion, this.versionNum, 4 * this.paramCount);
  }

  /**
   * When `tick` next needs to run (ms): a grace window or round timeout ending, an island timing out.
   * Infinity when nothing is scheduled.
   */
  nextDeadline(): number {
    const t = this.book.nextTimeout(this.cfg.islandTimeoutMs);
    return this.paused ? t : Math.min(t, roundDeadline(this.round, this.book.byId, this.cfg));
  }

  // ── islands ─────────────────────────────────────────────────────────────────────────────────

  /** Registers an island (or re-registers a known id) and gives it work when there is some. */
  join(req: JoinRequest, now: number): Result<JoinResult> {
    this.idle();
    if (req.protocolVersion !== undefined && req.protocolVersion !== PROTOCOL_VERSION) {
      return err(
        ErrorCode.PROTOCOL_VERSION,
        `island speaks protocol ${req.protocolVersion}, server ${PROTOCOL_VERSION}`,
      );
    }
    const isl = this.book.register(req, this.cfg, now);
    if (!isl.ok) return isl;
    const a = this.assignOrWait(isl.value, now);
    if (!a.ok) return a;
    return ok({ islandId: isl.value.id, assignment: a.value });
  }

  /** Marks an island alive (any message from it counts too). */
  heartbeat(islandId: string, now: number): Result<void> {
    return this.book.heartbeat(islandId, now);
  }

  /** A new display name for a known island (a volunteer saved one while connected). */
  rename(islandId: string, name: string): Result<void> {
    return this.book.rename(islandId, name);
  }

  /** The island said bye (or its socket closed): it stops counting for quorum. Its record stays. */
  leave(islandId: string, now: number): Result<void> {
    this.idle();
    const found = this.book.lookup(islandId, false);
    if (!found.ok) return found;
    const isl = found.value;
    if (isl.status !== 'banned') this.book.setStatus(isl, 'left', 'left');
    leaveRound(this.round, isl);
    this.maybeCloseRound(now);
    return ok(undefined);
  }

  /** Bans an island: its deltas are rejected from now on, including ones pending in the open round. */
  ban(islandId: string, now: number, reason = 'banned by admin'): Result<void> {
    this.idle();
    const found = this.book.lookup(islandId, false);
    if (!found.ok) return found;
    const isl = found.value;
    this.book.setStatus(isl, 'banned', reason);
    // its credit goes (what it put into θ stays until a revert: server/run/delta-archive.ts)
    isl.revokedTokens = (isl.revokedTokens ?? 0) + isl.tokensContributed;
    isl.tokensContributed = 0;
    leaveRound(this.round, isl);
    const dropped = dropPending(this.round, islandId).map((p) => {
      this.outerStep.release(p.delta);
      return this.rejectedFrom(p, ErrorCode.BANNED, `island ${islandId} was banned`);
    });
    if (dropped.length) this.events.push({ type: 'rejected', rejected: dropped });
    this.maybeCloseRound(now);
    return ok(undefined);
  }

  /** The host hands an assignment out on an older, durable base (async): deltas are checked against that one. */
  rebaseAssignment(islandId: string, roundId: number, baseVersion: number): void {
    const isl = this.book.byId.get(islandId);
    if (isl) rebaseWork(isl, roundId, baseVersion);
  }

  /** A validator's verdict on the island's delta `seq` (audit.ts); returns its counts. */
  recordAudit(
    islandId: string,
    passed: boolean,
    seq?: number,
  ): Result<{ passed: number; failed: number; lastPassedSeq?: number }> {
    return this.book.recordAudit(islandId, passed, seq);
  }

  /** A copy of the island's recorded assignment for `roundId` (what its delta must match), if held. */
  islandWork(islandId: string, roundId: number): AssignedWork | undefined {
    const w = this.book.byId.get(islandId)?.work?.find((x) => x.roundId === roundId);
    return w && structuredClone(w);
  }

  /**
   * The next assignment after a submit. null: wait — an 'assignment' event will bring it (sync: when
   * the round closes; paused: on resume). E_DONE when the run reached its token budget.
   */
  nextAssignment(islandId: string, now: number): Result<Assignment | null> {
    this.idle();
    const isl = this.book.lookup(islandId, true);
    if (!isl.ok) return isl;
    this.book.touch(isl.value, now);
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
    this.ledger.received(frameBytes);
    const metaProblem = validateDeltaMeta(sub.meta);
    if (metaProblem) return this.reject(undefined, 0, ErrorCode.BAD_REQUEST, metaProblem);
    if (!(sub.frame instanceof Uint8Array))
      return this.reject(undefined, 0, ErrorCode.BAD_REQUEST, 'frame must be bytes');
    // a buffer decoded by the host is ours now: kept as the pending delta, or given back
    const held = sub.decoded?.ok ? sub.decoded.value.delta : null;
    const r = this.validateAndHold(sub, now, held);
    if (held && !r.kept) this.outerStep.release(held);
    return r.result;
  }

  private validateAndHold(
    sub: DeltaSubmission,
    now: number,
    held: Float32Array | null,
  ): { result: Result<SubmitAccepted>; kept: boolean } {
    const no = (r: Result<never>) => ({ result: r, kept: false });
    const chk = checkDelta(
      sub.meta,
      frameEncoding(sub.frame), // byte 5 alone: the frame's encoding must be its assignment's
      this.book.byId,
      {
        cfg: this.cfg,
        version: this.versionNum,
        paused: this.paused,
        done: this.done,
        roundId: this.round.id,
        roundBaseVersion: this.round.baseVersion,
        assignSerial: this.assignSerial,
      },
      now,
      (isl) => this.book.touch(isl, now),
    );
    if (!chk.ok) return no(this.reject(chk.isl, chk.tokens, chk.code, chk.message));
    const { isl, m, steps, normSteps, tau, late } = chk;
    const sync = this.cfg.mode === 'sync';

    const decoded = sub.decoded ?? this.decodeHere(sub.frame);
    if (!decoded.ok) return no(this.reject(isl, m.tokens, decoded.error.code, decoded.error.message));
    const { delta, norm } = decoded.value;
    const { score, bound, over } = this.norms.judge(norm, steps, this.cfg.normBound, this.round.pending, normSteps);
    if (over)
      return no(
        this.reject(
          isl,
          m.tokens,
          ErrorCode.NORM_BOUND,
          `‖Δ‖/√normSteps = ${score.toPrecision(4)} exceeds its bound ${bound.toPrecision(4)} (${this.cfg.normBound.factor} × the median, for ${steps} steps at its learning rates, ${normSteps.toPrecision(3)} normSteps)`,
        ),
      );

    // counted from here on
    this.ledger.accept(isl, m, tau, { raw: 4 * this.paramCount, frame: sub.frame.length });

    const base: Contribution = {
      islandId: isl.id,
      seq: m.seq,
      roundId: m.roundId,
      baseVersion: m.baseVersion,
      staleness: tau,
      tokens: m.tokens,
      weight: 0,
    };
    // hold it until the round (sync) or the merge window (async) closes
    const buf = held ?? this.outerStep.take();
    if (!held) buf.set(delta);
    hold(this.round, { ...base, delta: buf, score, steps, lossMean: m.lossMean, arrivedAt: now }, isl, sync, late, now);
    isl.accepted += 1;
    const roundBefore = this.round.id;
    this.maybeCloseRound(now);
    return {
      result: ok({
        status: this.round.id !== roundBefore ? 'applied' : 'pending',
        version: this.versionNum,
        roundId: m.roundId,
        staleness: tau,
        norm,
        steps,
        score,
      }),
      kept: true,
    };
  }

  /** Δ decoded into the scratch buffer, and ‖Δ‖. */
  private decodeHere(frame: Uint8Array): Result<{ delta: Float32Array; norm: number }> {
    const d = decodeDelta(frame, this.paramCount, this.decodeBuf);
    return d.ok ? ok({ delta: d.value, norm: l2(d.value) }) : d;
  }

  /** Advances time: island timeouts, grace windows and round timeouts. Call at nextDeadline() or periodically. */
  tick(now: number): void {
    this.idle();
    this.book.timeOut(now, this.cfg.islandTimeoutMs);
    this.maybeCloseRound(now);
  }

  // ── admin ───────────────────────────────────────────────────────────────────────────────────

  pause(): void {
    this.paused = true;
  }

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
    const next = patchConfig(this.cfg, patch);
    if (!next.ok) return next;
    this.cfg = next.value;
    if (this.cfg.totalTokens <= 0 || this.ledger.totals.tokensApplied < this.cfg.totalTokens) this.done = false;
    return ok(this.config());
  }

  // ── snapshot / restore ──────────────────────────────────────────────────────────────────────

  /** Everything needed to resume exactly. The arrays are copies (writeSnapshot: `alloc` lends those of the optimizer state and pending deltas). */
  snapshot(alloc?: SnapshotAlloc): CoordinatorSnapshot {
    this.idle();
    const { outer, residual } = this.outerStep.state();
    return writeSnapshot(
      {
        config: this.cfg,
        theta: this.outerStep.theta,
        version: this.versionNum,
        hash: this.hashHex,
        paused: this.paused,
        done: this.done,
        outer,
        downlinkResidual: residual,
        islands: [...this.book.byId.values()],
        nextIslandSerial: this.book.nextSerial,
        assignSerial: this.assignSerial,
        round: this.round,
        normHistory: this.norms.scores,
        normSteps: this.norms.steps,
        totals: this.ledger.totals,
        perVersion: this.ledger.perVersion,
        updates: this.outerStep.downlink.updates,
        history: this.ledger.history,
      },
      alloc,
    );
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
    c.versionNum = s.version;
    c.hashHex = s.hash;
    c.paused = s.paused;
    c.done = s.done;
    c.outerStep.restore(s.outer, s.downlinkResidual, s.updates);
    for (const isl of s.islands) c.book.byId.set(isl.id, isl);
    c.book.nextSerial = s.nextIslandSerial;
    c.assignSerial = s.assignSerial;
    c.round = s.round;
    c.norms.restore(s.normHistory, s.normSteps);
    Object.assign(c.ledger, { totals: s.totals, perVersion: s.perVersion, history: s.history });
    return ok(c);
  }

  // ── revert (server/run/delta-archive.ts) ───────────────────────────────────────────────────────────────

  /**
   * Takes one recorded outer step again, with exactly `kept` (decoded deltas as they were held):
   * what closing a round with them does, here, its events dropped. For a coordinator restored from
   * a checkpoint to rebuild θ without some deltas; never on the live one.
   */
  replayStep(kept: Omit<PendingDelta, 'weight' | 'arrivedAt'>[], now: number): void {
    this.idle();
    if (this.outerStep.offload) throw new Error('coordinator: a replay takes its steps here (no offload)');
    this.round.pending = kept.map((k) => ({ ...k, weight: 0, arrivedAt: now }));
    this.closeRound(now);
    this.events = [];
  }

  /**
   * θ, the outer optimizer's and the downlink's state and the norm history of `rebuilt` (a replay)
   * replace this coordinator's, as a new version; `tokensRemoved` leave the token count. No update
   * message leads to it: replicas fetch θ (updatesSince answers E_TOO_OLD for older versions). With
   * an offload, the host imports the new state before the next step (OuterOffloadHost.importState).
   */
  adoptRebuilt(rebuilt: Coordinator, tokensRemoved: number): void {
    this.idle();
    const { outer, residual } = rebuilt.outerStep.state();
    this.outerStep.adopt(rebuilt.outerStep.theta, outer, residual);
    this.norms.restore(rebuilt.norms.scores.slice(), rebuilt.norms.steps.slice());
    this.versionNum += 1;
    this.hashHex = hashParams(this.outerStep.theta);
    this.ledger.totals.tokensApplied = Math.max(0, this.ledger.totals.tokensApplied - tokensRemoved);
    this.ledger.totals.version = this.versionNum;
  }

  // ── the outer step elsewhere ────────────────────────────────────────────────────────────────

  /**
   * From now on the outer step's numerics run in the host (server/outer/offload.ts): θ moves into
   * `o.theta` (shared), g is written into `o.g`. The host must hold the optimizer's and downlink's
   * state as `outerState()` and `downlinkResidual()` give it now.
   */
  useOffload(o: OuterOffload): void {
    this.outerStep.useOffload(o, this.round.pending);
  }

  /** The outer step the host must take now (offload only; see `completeStep`), or null. */
  pendingStep(): OuterStepRequest | null {
    return this.outerStep.request;
  }

  /** Offloaded steps whose optimizer and downlink state is still only in the host (0: none). */
  get outerStateStale(): number {
    return this.outerStep.stale;
  }

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

  private assignOrWait(isl: IslandRecord, now: number): Result<Assignment | null> {
    if (this.done) return err(ErrorCode.DONE, `the run reached its budget of ${this.cfg.totalTokens} tokens`);
    if (isl.status !== 'online') this.book.setStatus(isl, 'online', 'seen again');
    // an island whose delta is in the open round (or merge window) waits for it to close: it then starts on time (τ = 0)
    if (this.paused || this.round.returned.has(isl.id) || this.round.failed.has(isl.id)) {
      isl.waiting = true;
      isl.roundId = undefined;
      return ok(null);
    }
    return ok(this.makeAssignment(isl, now));
  }

  private makeAssignment(isl: IslandRecord, now: number): Assignment {
    const roundId = this.cfg.mode === 'sync' ? this.round.id : ++this.assignSerial;
    return assignWork(isl, this.round, this.cfg, this.book.byId.values(), {
      roundId,
      baseVersion: this.versionNum,
      baseHash: this.hashHex,
      tokensApplied: this.ledger.totals.tokensApplied,
      paramCount: this.paramCount,
      now,
    });
  }

  /** Emits assignment events for every island told to wait. */
  private releaseWaiting(now: number): void {
    if (this.paused) return;
    for (const isl of this.book.byId.values()) {
      if (!isl.waiting || isl.status !== 'online') continue;
      isl.waiting = false;
      const result: Result<Assignment> = this.done
        ? err(ErrorCode.DONE, `the run reached its budget of ${this.cfg.totalTokens} tokens`)
        : ok(this.makeAssignment(isl, now));
      this.events.push({ type: 'assignment', islandId: isl.id, result });
    }
  }

  private reject(isl: IslandRecord | undefined, tokens: number, code: string, message: string): Result<never> {
    this.ledger.reject(isl, code, tokens);
    return err(code, message);
  }

  private rejectedFrom(p: PendingDelta, code: string, message: string): RejectedContribution {
    return this.ledger.unaccept(p, this.book.byId.get(p.islandId), code, message);
  }

  // ── sync rounds and async merge windows ─────────────────────────────────────────────────────────────────────────────

  private maybeCloseRound(now: number): void {
    if (this.paused || this.closing) return;
    const close =
      this.cfg.mode === 'sync'
        ? roundShouldClose(this.round, this.book.byId, this.cfg, now)
        : windowShouldClose(this.round, this.book.byId.values(), this.cfg.asyncWindow, now);
    if (close) this.closeRound(now);
  }

  private closeRound(now: number): void {
    const r = this.round;
    const cfg = this.cfg;
    const { kept, over } = this.norms.split(r.pending, cfg.normBound);
    const rejected = over.map(({ p, limit }) => {
      this.outerStep.release(p.delta);
      return this.rejectedFrom(
        p,
        ErrorCode.NORM_BOUND,
        `‖Δ‖/√normSteps = ${p.score.toPrecision(4)} exceeds the round's bound ${limit.toPrecision(4)} for ${p.steps} steps`,
      );
    });
    this.events.push({
      type: 'round',
      roundId: r.id,
      baseVersion: r.baseVersion,
      state: 'closed',
      members: r.members.size,
      time: now,
    });
    const c: Closing = { now, kept, rejected };
    if (kept.length === 0) {
      this.finishClose(c, null);
      return;
    }
    // with an offload, the host's workers take the weighted mean (and each delta's agreement with it)
    const inHost = this.outerStep.offload !== null && isWeightedMean(kept.length, cfg);
    if (inHost) weighDeltas(kept, cfg, this.versionNum);
    else combineDeltas(kept, cfg, this.versionNum, this.outerStep.g, this.accBuf);
    const taken = this.outerStep.begin(cfg, kept, inHost, outerStepOf(cfg, kept, this.book.byId.values()));
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
    for (const p of c.kept) this.outerStep.release(p.delta);
    // everyone waiting joins the next round
    this.round = newRound(this.round.id + 1, this.versionNum, c.now);
    this.events.push({
      type: 'round',
      roundId: this.round.id,
      baseVersion: this.versionNum,
      state: 'open',
      members: 0,
      time: c.now,
    });
    this.releaseWaiting(c.now);
  }

  // ── the outer step ──────────────────────────────────────────────────────────────────────────

  /** The new version: counters, credit, history (the ledger), the update message; emits the 'update' event. */
  private recordUpdate(step: StepTaken, c: Closing): void {
    const cfg = this.cfg;
    const { update, contributors, stats } = this.ledger.closeVersion(
      c.kept,
      this.book.byId,
      {
        version: this.versionNum + 1,
        prevHash: this.hashHex,
        hash: step.hash,
        frame: step.frame,
        time: c.now,
        updateNorm: step.updateNorm,
      },
      cfg.historyLimit,
    );
    this.versionNum = update.version;
    this.hashHex = update.hash;
    this.outerStep.downlink.keep(update, cfg.keepUpdates);
    this.events.push({ type: 'update', update, contributors, rejected: c.rejected, stats });
    if (cfg.totalTokens > 0 && update.totalTokens >= cfg.totalTokens && !this.done) {
      this.done = true;
      this.events.push({ type: 'done', version: this.versionNum, totalTokens: update.totalTokens });
    }
  }
}
