// One training run on the server: the coordinator, driven by the wall clock, made durable by the
// run store, observed by the eval worker, the history and the metrics. Its three faces live beside
// it: `run.islands` (run-islands.ts: what the gateway asks through its RunPort), `run.views`
// (run-views.ts: what the REST API reads) and `run.admin` (run-admin.ts: what the operator changes).
//
// Durable before acknowledged: every coordinator call is followed by `kick()`, and the durability
// pump (pump.ts) publishes a batch of events (acks, broadcasts, assignments) only once its
// checkpoint (run-checkpoint.ts) and log lines (history.ts) are on disk (store.ts).
//
// The outer step off the event loop: with `outerWorkers` > 0 the coordinator's outer step runs in
// worker threads (outer/offload.ts). `kick()` starts a pending step; until it completes, calls that
// change rounds wait (`whenIdle`), and the pump snapshots only between steps.

import type { RunAudits } from './audit.ts';
import { DeltaArchive } from './delta-archive.ts';
import { IslandFile } from './island-file.ts';
import { RunAdmin } from './admin.ts';
import { RunViews } from './views.ts';
import { RunIslands } from './islands.ts';
import { Coordinator, type CoordinatorConfigPatch, type CoordinatorEvent } from '../../core/coord/index.ts';
import type { TextDataset } from '../../core/data/dataset.ts';
import { initParams } from '../../core/model/gpt.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import { ErrorCode, type UpdateMsg } from '../../core/protocol.ts';
import { type Result, err, ok } from '../../core/result.ts';
import { loadCorpus } from './corpus.ts';
import { EvalService } from './eval-worker.ts';
import type { Metrics } from '../metrics.ts';
import type { MixStatus, RunConfig } from '../../core/api.ts';
import { RunHistory, eventLine, lrAt, type PointContext } from './history.ts';
import { ScalarLog, metricsDir } from './scalars.ts';
import { DurabilityPump } from './pump.ts';
import { ResumeTokens } from './resume-tokens.ts';
import { SnapshotArrays, encodeRunCheckpoint, restoreLatest } from './checkpoint.ts';
import { refuseUnreadableRun } from './folder.ts';
import { RunStore } from './store.ts';
import { Waiters } from './waiters.ts';
import { OuterOffloadHost } from '../outer/offload.ts';

/** θ as of the last durable version: what islands may download. */
interface DurableState {
  version: number;
  hash: string;
  totalTokens: number;
  theta: Float32Array;
}

export interface OpenRunOptions {
  dir: string;
  config: RunConfig;
  /** Runtime-knob changes to apply on resume (from flags). */
  resumePatch?: CoordinatorConfigPatch;
  metrics: Metrics;
  /** Eval after updates in a worker (default true). */
  evaluate?: boolean;
  log?: (line: string) => void;
  /** Worker threads for the outer step (0: on the event loop). Default 0. */
  outerWorkers?: number;
}

export class Run {
  readonly dir: string;
  config: RunConfig;
  readonly store: RunStore;
  readonly metrics: Metrics;
  readonly dataset: TextDataset;
  readonly paramCount: number;
  coord: Coordinator;
  readonly resumed: boolean;
  /** Resume tokens of island ids (resume-tokens.ts). */
  readonly tokens: ResumeTokens;
  private durable: DurableState;
  /** The state a batch in the pump makes durable once it is committed. */
  private nextDurable: DurableState | null = null;
  private readonly snapshotArrays = new SnapshotArrays();
  readonly history = new RunHistory();
  private evalService: EvalService | null = null;
  private readonly log: (line: string) => void;

  /** Acks and assignments waiting for durability (waiters.ts). */
  readonly waiters = new Waiters();

  private readonly pump: DurabilityPump;
  private closed = false;
  /** The outer step in worker threads (null: on the event loop), and the step in flight. */
  offload: OuterOffloadHost | null = null;
  private stepping: Promise<void> | null = null;
  private syncing: Promise<void> | null = null;

  // traffic, cumulative over the run (restored from the log)
  bytesIn = 0;
  bytesOut = 0;
  /** Connected island sockets by island id (kept by the gateway). */
  readonly connected = new Map<string, number>();

  /** Hooks for the gateway: all called after the state they report is durable. */
  onUpdate: (u: UpdateMsg) => void = () => {};
  onIslandEvent: (islandId: string, status: string, reason: string) => void = () => {};
  onBan: (islandId: string) => void = () => {};
  /** θ was rebuilt (a revert): every island must say hello again and fetch it. */
  onReset: () => void = () => {};
  /** Verified work (server/run/audit.ts): null unless a validator token was given. */
  audits: RunAudits | null = null;
  /** Butterfly mixing's figures for the status (server/gateway/mix.ts): null unless the server mixes. */
  mixStatus: (() => MixStatus) | null = null;
  /** The islands' side (run-islands.ts), the REST views (core/api.ts shapes) and the operator's calls. */
  readonly islands: RunIslands;
  readonly views: RunViews;
  readonly admin: RunAdmin;
  /** Each version's deltas, kept for reverts (server/run/delta-archive.ts). */
  readonly archive: DeltaArchive;
  /** The full island records, beside the checkpoints (island-file.ts). */
  readonly islandFile: IslandFile;

  private constructor(o: OpenRunOptions, store: RunStore, dataset: TextDataset, coord: Coordinator, resumed: boolean) {
    this.dir = o.dir;
    this.config = o.config;
    this.store = store;
    this.metrics = o.metrics;
    this.dataset = dataset;
    this.coord = coord;
    this.paramCount = coord.paramCount;
    this.resumed = resumed;
    this.log = o.log ?? (() => {});
    this.tokens = new ResumeTokens(o.dir);
    this.islands = new RunIslands(this);
    this.views = new RunViews(this);
    this.admin = new RunAdmin(this);
    this.archive = new DeltaArchive(o.dir);
    this.islandFile = new IslandFile(o.dir);
    this.durable = {
      version: coord.version,
      hash: coord.hash,
      totalTokens: coord.totals().tokensApplied,
      theta: coord.params().slice(),
    };
    this.pump = new DurabilityPump({
      coord,
      store,
      metrics: this.metrics,
      log: this.log,
      prepare: (events) => this.prepare(events),
      publish: (events) => this.publish(events),
      beforeSnapshot: () => this.beforeSnapshot(),
      tick: (now) => this.tick(now),
    });
  }

  /** Opens (resuming when the folder holds a run) or creates the run in `o.dir`. */
  static async open(o: OpenRunOptions): Promise<Run> {
    const store = new RunStore(o.dir, { keep: o.config.checkpoints, maxLogBytes: o.config.limits.maxLogBytes });
    const dataset = loadCorpus(o.config.data);
    const now = Date.now();
    let coord = restoreLatest(store, o.config.model, o.log ?? (() => {}));
    // a folder that holds a run but no readable checkpoint must not quietly start again at version 0
    if (!coord) refuseUnreadableRun(store);
    await store.openLog();
    const resumed = coord !== null;
    if (!coord)
      coord = new Coordinator({ params: initParams(o.config.model, o.config.seed), config: o.config.coordinator, now });
    if (resumed && o.resumePatch && Object.keys(o.resumePatch).length) {
      const r = coord.setConfig(o.resumePatch);
      if (!r.ok) throw Object.assign(new Error(r.error.message), { code: r.error.code });
    }
    if (resumed) {
      // Nobody is connected to a process that just started: islands count again once they say hello.
      for (const isl of coord.islands()) if (isl.status === 'online') coord.leave(isl.id, now);
      coord.drainEvents();
    }
    const run = new Run(o, store, dataset, coord, resumed);
    if ((o.outerWorkers ?? 0) > 0) run.offload = await OuterOffloadHost.start(coord, o.outerWorkers!);
    run.config = { ...run.config, coordinator: coord.config() };
    store.writeConfig(run.config);
    const traffic = run.history.replay(store.readEvents(), coord.version, run.waiters.lastApplied);
    run.bytesIn = traffic.bytesIn;
    run.bytesOut = traffic.bytesOut;
    run.history.scalars = new ScalarLog(metricsDir(o.dir)); // <dir>/metrics/: JSONL and TensorBoard, from here on
    for (const p of run.history.points) if (p.evalLoss !== null) store.noteEval(p.version, p.evalLoss);
    store.carry = () =>
      run.history.carryLine(run.waiters.lastApplied, { bytesIn: run.bytesIn, bytesOut: run.bytesOut });
    // Deltas accepted into the open sync round before a restart: a resend attaches to the ack.
    if (resumed) for (const p of coord.snapshot().meta.pending) void run.waiters.expectAck(p.islandId, p.seq);
    if (!resumed) {
      // version 0 is durable before anyone can see it: a restart reproduces it bit for bit
      store.requestCheckpoint(0, () => encodeRunCheckpoint(run.config, coord.snapshot()));
      store.append({ type: 'start', version: 0, hash: coord.hash, params: run.paramCount, config: run.config });
      run.history.start(now, 0);
      await store.commit();
    } else {
      store.append({ type: 'resume', version: coord.version, hash: coord.hash });
      await store.commit();
    }
    run.syncMetrics();
    if (o.evaluate !== false) run.startEval();
    run.kick();
    return run;
  }

  // ── reading ───────────────────────────────────────────────────────────────────────────────

  get version(): number {
    return this.durable.version;
  }
  get hash(): string {
    return this.durable.hash;
  }
  /** The largest legal delta frame. */
  get maxFrameBytes(): number {
    return this.coord.maxFrameBytes();
  }
  get model(): GPTConfig {
    return this.config.model;
  }
  /** An outer step is in flight (calls that change rounds wait: whenIdle). */
  get busy(): boolean {
    return this.stepping !== null;
  }
  /** Worker threads taking the outer step (0: the event loop takes it). */
  get outerWorkers(): number {
    return this.offload?.workers ?? 0;
  }

  islandsOnline(): number {
    return this.connected.size;
  }

  /** Tokens in θ at the durable version. */
  get durableTokens(): number {
    return this.durable.totalTokens;
  }

  /** θ at the durable version (read-only by contract). */
  durableParams(): { version: number; hash: string; params: Float32Array } {
    return { version: this.durable.version, hash: this.durable.hash, params: this.durable.theta };
  }

  /** Update messages after `fromVersion`, up to the durable version only. */
  updatesSince(fromVersion: number): Result<UpdateMsg[]> {
    if (fromVersion > this.durable.version)
      return err(ErrorCode.FUTURE_VERSION, `version ${fromVersion} is ahead of the server's ${this.durable.version}`);
    const r = this.coord.updatesSince(fromVersion);
    if (!r.ok) return r;
    const ups = r.value.filter((u) => u.version <= this.durable.version);
    // past a snapshot's bytes (4 per parameter), the snapshot is the cheaper way to catch up
    let bytes = 0;
    for (const u of ups) bytes += u.frame.length;
    if (bytes > 4 * this.paramCount)
      return err(ErrorCode.TOO_OLD, `catching up from ${fromVersion} costs more than the snapshot: fetch the model`);
    return ok(ups);
  }

  /** Resolves once `version` (or a later one) is durable. */
  whenDurable(version: number): Promise<void> {
    return this.waiters.whenDurable(version, this.durable.version);
  }

  // ── durability ────────────────────────────────────────────────────────────────────────────

  /** Writes a checkpoint of the current state now (after any batch in flight). */
  async checkpointNow(): Promise<{ version: number; path: string; bytes: number }> {
    for (;;) {
      this.kick();
      await this.drain();
      const wait = this.beforeSnapshot();
      if (!wait) break;
      await wait;
    }
    const snap = this.coord.snapshot();
    const version = snap.meta.version;
    this.store.requestCheckpoint(version, () => encodeRunCheckpoint(this.config, snap));
    await this.pump.commit();
    await this.islandFile.maybeWrite(() => snap.meta.islands, true);
    const info = this.store.listCheckpoints().find((c) => c.version === version);
    return { version, path: this.store.checkpointPath(version), bytes: info?.bytes ?? 0 };
  }

  /** θ was rebuilt in the coordinator (a revert): it becomes durable and islands start over from it. */
  async rebuilt(): Promise<void> {
    const c = this.coord;
    await this.offload?.importState(c);
    await this.checkpointNow();
    this.durable = {
      version: c.version,
      hash: c.hash,
      totalTokens: c.totals().tokensApplied,
      theta: c.params().slice(),
    };
    this.waiters.releaseDurable(c.version);
    this.views.invalidate();
    this.syncMetrics();
    this.evalService?.requestEval(c.version, this.durable.theta);
    this.onReset();
  }

  /** Waits until no batch of events is in flight and everything queued is durable. */
  drain(): Promise<void> {
    return this.pump.drain();
  }

  /** Waits for a pending eval (tests). */
  async evalIdle(): Promise<void> {
    await this.evalService?.idle();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.whenIdle();
    await this.pump.close();
    await this.islandFile.maybeWrite(() => this.coord.islands(), true);
    this.closed = true;
    await this.offload?.close();
    await this.evalService?.close();
    await this.views.close();
    await this.store.close();
  }

  // ── the event pump ────────────────────────────────────────────────────────────────────────

  /** Handles whatever the coordinator has queued (call after every coordinator call). */
  kick(): void {
    if (this.offload && !this.stepping && this.coord.pendingStep()) {
      this.stepping = this.offload.take(this.coord).then(
        () => {
          this.stepping = null;
          this.kick();
        },
        (e: unknown) => {
          // a worker died mid-step: θ may be half moved. Stop; a restart resumes from the last durable
          // checkpoint, and nothing unacknowledged is lost.
          this.log(`run: the outer step failed, stopping: ${(e as Error)?.stack ?? String(e)}`);
          setImmediate(() => {
            throw e;
          });
        },
      );
    }
    this.pump.kick();
  }

  /** Resolves when no outer step is in flight (at once without offload). */
  async whenIdle(): Promise<void> {
    while (this.stepping) await this.stepping;
  }

  /**
   * What a snapshot must wait for: the step in flight, or the workers' optimizer and downlink state
   * after the last one (handed over only when a snapshot needs it); null: snapshot now.
   */
  private beforeSnapshot(): Promise<void> | null {
    if (this.stepping) return this.stepping;
    if (!this.offload || !this.coord.outerStateStale) return null;
    return (this.syncing ??= this.offload.syncState(this.coord).finally(() => {
      this.syncing = null;
    }));
  }

  /** The pump's timer: deadlines (a step in flight kicks the pump again when it completes). */
  private tick(now: number): void {
    if (this.stepping) return;
    this.coord.tick(now);
    this.kick();
  }

  /** Before the commit: the batch's log lines, and its checkpoint when it holds an update. */
  private prepare(events: CoordinatorEvent[]): void {
    if (events.some((e) => e.type === 'update')) {
      const snap = this.coord.snapshot(this.snapshotArrays.alloc);
      void this.islandFile
        .maybeWrite(() => snap.meta.islands)
        .catch((e: unknown) => this.log(`run: writing the islands file failed: ${(e as Error).message}`));
      this.nextDurable = {
        version: snap.meta.version,
        hash: snap.meta.hash,
        totalTokens: snap.meta.totals.tokensApplied,
        theta: snap.tensors.theta as Float32Array,
      };
      this.store.requestCheckpoint(this.nextDurable.version, () => encodeRunCheckpoint(this.config, snap));
    }
    const oldest = this.store.listCheckpoints().at(-1)?.version ?? 0;
    for (const ev of events) {
      const line = eventLine(ev, this.pointContext(ev.type === 'update' ? ev.contributors : []));
      if (line) this.store.append(line);
      if (ev.type === 'update') this.archive.write(ev.update.version, ev.update.time, ev.contributors, oldest);
      if (ev.type === 'update' || ev.type === 'rejected')
        for (const x of ev.rejected) this.archive.drop(x.islandId, x.seq);
    }
  }

  /** After the commit: the new durable θ, then acks, broadcasts and assignments. */
  private publish(events: CoordinatorEvent[]): void {
    const next = this.nextDurable;
    this.nextDurable = null;
    this.snapshotArrays.releaseAll(); // the batch's checkpoint is written
    if (next) this.durable = next;
    for (const ev of events) this.dispatch(ev);
    if (next) {
      this.waiters.releaseDurable(next.version);
      this.views.islandsMoved(); // the islands' credit moved with the version: an acked island sees it at once
      this.syncMetrics();
      this.evalService?.requestEval(next.version, next.theta);
    }
  }

  private dispatch(ev: CoordinatorEvent): void {
    switch (ev.type) {
      case 'update': {
        for (const c of ev.contributors) {
          this.metrics.deltasAccepted.inc();
          this.waiters.resolveAck({
            islandId: c.islandId,
            seq: c.seq,
            roundId: c.roundId,
            status: 'applied',
            version: ev.update.version,
          });
        }
        for (const r of ev.rejected) this.rejectAck(r.islandId, r.seq, r.roundId, r.error);
        this.history.addUpdate(ev, this.pointContext(ev.contributors));
        this.onUpdate(ev.update);
        break;
      }
      case 'rejected':
        for (const r of ev.rejected) this.rejectAck(r.islandId, r.seq, r.roundId, r.error);
        break;
      case 'assignment':
        this.waiters.deliver(ev.islandId, ev.result);
        break;
      case 'island':
        this.onIslandEvent(ev.islandId, ev.status, ev.reason);
        break;
      case 'done':
        this.waiters.deliverAll(ErrorCode.DONE, 'the run reached its token budget');
        break;
      default:
        break;
    }
  }

  private rejectAck(islandId: string, seq: number, roundId: number, error: { code: string; message: string }): void {
    this.metrics.deltasRejected.inc({ code: error.code });
    this.waiters.resolveAck({ islandId, seq, roundId, status: 'rejected', version: this.durable.version, error });
  }

  // ── history, eval, metrics ────────────────────────────────────────────────────────────────

  /** What a history point and an update's log line record beside the coordinator's stats. */
  private pointContext(contributors: ReadonlyArray<{ islandId: string; tokens: number }>): PointContext {
    const tokensByEngine: Record<string, number> = {};
    for (const c of contributors) {
      const engine = this.coord.island(c.islandId)?.engine ?? 'unknown';
      tokensByEngine[engine] = (tokensByEngine[engine] ?? 0) + c.tokens;
    }
    return {
      islandsOnline: this.islandsOnline(),
      bytesInTotal: this.bytesIn,
      bytesOutTotal: this.bytesOut,
      tokensByEngine,
      ...lrAt(this.coord.config(), this.coord.totals().tokensApplied),
    };
  }

  private startEval(): void {
    const e = new EvalService({
      config: this.config.model,
      heldOut: this.dataset.heldOut,
      batchSize: this.config.eval.batchSize,
      nBatches: this.config.eval.batches,
    });
    e.onResult = (r) => {
      if (this.closed) return;
      this.history.setEval(r.version, r.loss);
      this.store.noteEval(r.version, r.loss);
      this.metrics.evalLoss.set(r.loss);
      this.metrics.evalVersion.set(r.version);
      this.store.append({ type: 'eval', version: r.version, loss: r.loss, ms: Math.round(r.ms) });
    };
    e.onError = (x) => this.log(`eval failed: ${x.message}`);
    this.evalService = e;
    if (this.history.lastEval?.version !== this.durable.version)
      e.requestEval(this.durable.version, this.durable.theta);
  }

  syncMetrics(): void {
    this.metrics.version.set(this.durable.version);
    this.metrics.tokens.set(this.durable.totalTokens);
    this.metrics.paused.set(this.coord.isPaused ? 1 : 0);
    this.metrics.islandsOnline.set(this.islandsOnline());
  }
}
