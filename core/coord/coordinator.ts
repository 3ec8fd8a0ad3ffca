// The coordinator: global θ and its versions, rounds, outer optimizer, staleness, DyLU, validation.
//
// Pure logic: no I/O, no timers, no Date.now(). Every call that depends on time takes `now` (ms),
// so the server (wall clock), the simulator (virtual clock) and tests drive the same code.
//
// This class is the facade over one state (state.ts) and the jobs that change it: submit.ts (the
// submit pipeline), close.ts (assignments, closing rounds, the outer step here or in a host),
// restore.ts (snapshot and restore), replay.ts (a revert's replay). Beside them: types (and the
// durability contract: how to ack from the events), island-book (the island records), validate
// (the checks before decoding), aggregate (norm bound, robust means), rounds (sync rounds, async
// merge windows, assignments), outer-step (θ, the outer optimizer and the downlink), ledger.

import { maxFrameBytes } from '../codec/index.ts';
import { type Result, err, ok } from '../result.ts';
import { type Assignment, ErrorCode, type ModelSnapshotMsg, PROTOCOL_VERSION } from '../protocol.ts';
import type { TrainingMode, UpdateMsg } from '../protocol.ts';
import { type CoordinatorConfig, type CoordinatorConfigPatch, patchConfig } from './config.ts';
import { assignOrWait, banned, leaveAs, maybeCloseRound, releaseGoneRanges, releaseWaiting } from './close.ts';
import { DataRanges, type DataRangesStatus } from './data-ranges.ts';
import type { OuterState } from './outer.ts';
import { adoptRebuilt, replayStep } from './replay.ts';
import { restoreState, snapshotOf } from './restore.ts';
import { roundDeadline } from './rounds.ts';
import type { SnapshotAlloc } from './snapshot.ts';
import { type CoordState, checkedConfig, newState, takeEvents } from './state.ts';
import { submitDelta } from './submit.ts';
import type {
  AssignedWork,
  CoordinatorEvent,
  CoordinatorOptions,
  CoordinatorSnapshot,
  CoordinatorTotals,
  DeltaSubmission,
  IslandRecord,
  JoinRequest,
  JoinResult,
  OuterOffload,
  PendingDelta,
  SubmitAccepted,
  VersionStats,
} from './types.ts';
import { rebaseWork } from './validate.ts';

export type * from './types.ts';
export { trimmedMean } from './aggregate.ts';

/** Calls that change rounds while a host takes an outer step are refused with this code (wait: whenIdle). */
export const STEP_IN_FLIGHT = 'E_BUSY';

export class Coordinator {
  private readonly s: CoordState;

  /** A new run on `opts.params` (copied), or the state `restore` rebuilt. */
  constructor(opts: CoordinatorOptions | CoordState) {
    this.s =
      'book' in opts
        ? opts
        : newState(opts.params, checkedConfig(opts.config), opts.now ?? 0, {
            ranges: opts.ranges ? new DataRanges(opts.ranges) : null,
          });
  }

  // ── read-only views ──────────────────────────────

  get paramCount(): number {
    return this.s.paramCount;
  }
  get version(): number {
    return this.s.version;
  }
  get hash(): string {
    return this.s.hash;
  }
  get mode(): TrainingMode {
    return this.s.cfg.mode;
  }
  get isPaused(): boolean {
    return this.s.paused;
  }
  get isDone(): boolean {
    return this.s.done;
  }
  /** The current sync round id (async: the last assignment serial). */
  get roundId(): number {
    return this.s.cfg.mode === 'sync' ? this.s.round.id : this.s.assignSerial;
  }
  /** A copy of the config. */
  config(): CoordinatorConfig {
    return structuredClone(this.s.cfg);
  }
  /** θ at the current version, as a fresh copy (a fetchModel answer). */
  model(): ModelSnapshotMsg {
    return { version: this.s.version, hash: this.s.hash, params: this.s.outerStep.theta.slice() };
  }
  /** θ itself, read-only by contract (no copy: for the server's checkpoint writer and evals). */
  params(): Readonly<Float32Array> {
    return this.s.outerStep.theta;
  }
  /** Copies of the outer optimizer's state (tests compare these across rejected deltas). */
  outerState(): OuterState {
    return this.s.outerStep.outerState();
  }
  islands(): IslandRecord[] {
    return [...this.s.book.byId.values()].map((r) => structuredClone(r));
  }
  island(id: string): IslandRecord | undefined {
    return structuredClone(this.s.book.byId.get(id));
  }
  /** The online islands with a round in progress: ids and round ids, no copies (mixing asks per group wait). */
  roundsInProgress(): Array<{ islandId: string; roundId: number }> {
    return this.s.book.roundsInProgress();
  }
  history(): readonly VersionStats[] {
    return this.s.ledger.history;
  }
  /** A shard run's range ledger: the epoch, tokens trained per shard, ranges in flight (null: a corpus run). */
  dataRanges(): DataRangesStatus | null {
    return this.s.ranges?.status() ?? null;
  }
  totals(): CoordinatorTotals {
    return structuredClone(this.s.ledger.totals);
  }
  /** A copy of the downlink's error-feedback residual. */
  downlinkResidual(): Float32Array {
    return this.s.outerStep.state().residual.slice();
  }
  /** True while a host takes an outer step: calls that change rounds answer STEP_IN_FLIGHT until whenIdle. */
  get stepping(): boolean {
    return this.s.closing !== null;
  }
  /** Resolves once no outer step is in flight (rejects when the host failed: θ may be half moved). */
  async whenIdle(): Promise<void> {
    while (this.s.inFlight) await this.s.inFlight;
  }
  /** Drains the event queue (see the durability contract in types.ts). */
  drainEvents(): CoordinatorEvent[] {
    return takeEvents(this.s);
  }
  /** The largest legal delta frame for this model (size socket.io's maxHttpBufferSize from it). */
  maxFrameBytes(): number {
    return maxFrameBytes(this.s.paramCount);
  }
  /** Updates after `fromVersion`: E_TOO_OLD when pruned or outweighing θ (fetch it), E_FUTURE_VERSION if ahead. */
  updatesSince(fromVersion: number): Result<UpdateMsg[]> {
    return this.s.outerStep.downlink.since(fromVersion, this.s.version, 4 * this.s.paramCount);
  }
  /** When `tick` next needs to run (ms): a grace window or round timeout ending, an island timing out; or Infinity. */
  nextDeadline(): number {
    const s = this.s;
    const t = s.book.nextTimeout(s.cfg.islandTimeoutMs);
    return s.paused ? t : Math.min(t, roundDeadline(s.round, s.book.byId, s.cfg));
  }
  /** A copy of the island's recorded assignment for `roundId` (what its delta must match), if held. */
  islandWork(islandId: string, roundId: number): AssignedWork | undefined {
    return structuredClone(this.s.book.byId.get(islandId)?.work?.find((x) => x.roundId === roundId));
  }

  // ── islands ─────────────────────────────────

  /** Registers an island (or re-registers a known id) and gives it work when there is some. */
  join(req: JoinRequest, now: number): Result<JoinResult> {
    if (this.s.closing) return busy();
    if (req.protocolVersion !== undefined && req.protocolVersion !== PROTOCOL_VERSION)
      return err(
        ErrorCode.PROTOCOL_VERSION,
        `island speaks protocol ${req.protocolVersion}, server ${PROTOCOL_VERSION}`,
      );
    const isl = this.s.book.register(req, this.s.cfg, now);
    if (!isl.ok) return isl;
    const a = assignOrWait(this.s, isl.value, now);
    return a.ok ? ok({ islandId: isl.value.id, assignment: a.value }) : a;
  }
  /** Marks an island alive (any message from it counts too). */
  heartbeat(islandId: string, now: number): Result<void> {
    return this.s.book.heartbeat(islandId, now);
  }
  /** A new display name for a known island (a volunteer saved one while connected). */
  rename(islandId: string, name: string): Result<void> {
    return this.s.book.rename(islandId, name);
  }
  /** The island said bye (or its socket closed): it stops counting for quorum. Its record stays. */
  leave(islandId: string, now: number): Result<void> {
    if (this.s.closing) return busy();
    return leaveAs(this.s, islandId, now, (isl) => {
      if (isl.status !== 'banned') this.s.book.setStatus(isl, 'left', 'left');
    });
  }
  /** Bans an island: its deltas are rejected from now on, including ones pending in the open round. */
  ban(islandId: string, now: number, reason = 'banned by admin'): Result<void> {
    if (this.s.closing) return busy();
    return leaveAs(this.s, islandId, now, (isl) => banned(this.s, isl, reason));
  }
  /** The host hands an assignment out on an older, durable base (async): deltas are checked against that one. */
  rebaseAssignment(islandId: string, roundId: number, baseVersion: number): void {
    const isl = this.s.book.byId.get(islandId);
    if (isl) rebaseWork(isl, roundId, baseVersion);
  }
  /** A validator's verdict on the island's delta `seq` (audit.ts); returns its counts. */
  recordAudit(islandId: string, passed: boolean, seq?: number) {
    return this.s.book.recordAudit(islandId, passed, seq);
  }
  /**
   * The next assignment after a submit. null: wait — an 'assignment' event will bring it (sync: when
   * the round closes; paused: on resume). E_DONE when the run reached its token budget.
   */
  nextAssignment(islandId: string, now: number): Result<Assignment | null> {
    if (this.s.closing) return busy();
    const isl = this.s.book.lookup(islandId, true);
    if (!isl.ok) return isl;
    this.s.book.touch(isl.value, now);
    return assignOrWait(this.s, isl.value, now);
  }

  // ── deltas and time ──────────────────────────────

  /**
   * Validates and counts one delta. Never throws on input. A rejection changes neither θ nor the
   * optimizer state (only counters). See the durability contract in types.ts: ack from events.
   */
  submit(sub: DeltaSubmission, now: number): Result<SubmitAccepted> {
    return this.s.closing ? busy() : submitDelta(this.s, sub, now);
  }
  /** Advances time: island timeouts, grace windows and round timeouts. Call at nextDeadline() or periodically. */
  tick(now: number): Result<void> {
    if (this.s.closing) return busy();
    this.s.book.timeOut(now, this.s.cfg.islandTimeoutMs);
    releaseGoneRanges(this.s);
    maybeCloseRound(this.s, now);
    return ok(undefined);
  }

  // ── admin ──────────────────────────────────

  pause(): void {
    this.s.paused = true;
  }
  /** Resumes: islands left waiting get their assignments as events. */
  resume(now: number): Result<void> {
    if (this.s.closing) return busy();
    if (!this.s.paused) return ok(undefined);
    this.s.paused = false;
    maybeCloseRound(this.s, now);
    releaseWaiting(this.s, now);
    return ok(undefined);
  }
  /** Changes runtime knobs (validated; mode, seqLen and dataSeed are fixed for a run). */
  setConfig(patch: CoordinatorConfigPatch): Result<CoordinatorConfig> {
    const s = this.s;
    if (s.closing) return busy();
    const next = patchConfig(s.cfg, patch);
    if (!next.ok) return next;
    s.cfg = next.value;
    if (s.cfg.totalTokens <= 0 || s.ledger.totals.tokensApplied < s.cfg.totalTokens) s.done = false;
    return ok(this.config());
  }

  // ── snapshot / restore, revert (restore.ts, replay.ts) ───────────────────

  /** Everything needed to resume exactly, between steps. The arrays are copies (`alloc` lends those of the state). */
  snapshot(alloc?: SnapshotAlloc): CoordinatorSnapshot {
    if (this.s.closing) throw new Error('coordinator: a snapshot waits for the outer step in flight (whenIdle)');
    return snapshotOf(this.s, alloc);
  }
  /** Rebuilds a coordinator from `snapshot()`; checks sizes and θ's hash. */
  static restore(snap: CoordinatorSnapshot): Result<Coordinator> {
    const r = restoreState(snap);
    return r.ok ? ok(new Coordinator(r.value)) : r;
  }
  /** One recorded outer step taken again with exactly `kept` (replay.ts); on a restored coordinator only. */
  replayStep(kept: Omit<PendingDelta, 'weight' | 'arrivedAt'>[], now: number): void {
    replayStep(this.s, kept, now);
  }
  /** θ and the outer state of `rebuilt` (a replay) become this one's, as a new version (replay.ts). */
  adoptRebuilt(rebuilt: Coordinator, tokensRemoved: number): void {
    adoptRebuilt(this.s, rebuilt.s, tokensRemoved);
  }

  // ── the outer step elsewhere ───────────────────────────

  /**
   * From now on a host takes the outer step's numerics (server/outer/offload.ts), each round's step
   * through `o.step`: θ moves into `o.theta` (shared), g is written into `o.g`. The host must hold
   * the optimizer's and downlink's state as `outerState()` and `downlinkResidual()` give it now.
   */
  useOffload(o: OuterOffload): void {
    this.s.outerStep.useOffload(o, this.s.round.pending);
  }
  /** Offloaded steps whose optimizer and downlink state is still only in the host (0: none). */
  get outerStateStale(): number {
    return this.s.outerStep.stale;
  }
  /** The host's optimizer and downlink state after the last step (views; snapshots copy them). */
  syncOuterState(outer: OuterState, residual: Float32Array): void {
    this.s.outerStep.sync(outer, residual);
  }
}

function busy(): Result<never> {
  return err(STEP_IN_FLIGHT, 'an outer step is in flight: wait for it (whenIdle)');
}
