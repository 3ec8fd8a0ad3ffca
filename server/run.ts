// One training run on the server: the coordinator, driven by the wall clock, made durable by the
// run store, observed by the eval worker, the history and the metrics. The gateway (socket.io) and
// the REST plugins only talk to this class.
//
// Durable before acknowledged: every coordinator call is followed by `kick()`, and the durability
// pump (pump.ts) publishes a batch of events (acks, broadcasts, assignments) only once its
// checkpoint (run-checkpoint.ts) and log lines (history.ts) are on disk (store.ts).
//
// The outer step off the event loop: with `outerWorkers` > 0 the coordinator's outer step runs in
// worker threads (outer/offload.ts). `kick()` starts a pending step; until it completes, calls that
// change rounds wait (`whenIdle`), and the pump snapshots only between steps.

import type { RunAudits } from './audit.ts';
import { Coordinator, type CoordinatorConfigPatch, type CoordinatorEvent } from '../core/coord/index.ts';
import type { TextDataset } from '../core/data/dataset.ts';
import { encodeCheckpoint } from '../core/checkpoint.ts';
import { initParams } from '../core/model/gpt.ts';
import type { GPTConfig } from '../core/model/config.ts';
import { type AckMsg, type Assignment, type DeltaMeta, ErrorCode, type UpdateMsg } from '../core/protocol.ts';
import { type Result, err, ok } from '../core/result.ts';
import { loadCorpus } from './corpus.ts';
import { EvalService } from './eval-worker.ts';
import type { Metrics } from './metrics.ts';
import type { CheckpointInfo, HistoryPoint, IslandView, RunConfig, RunStatus } from '../core/api.ts';
import { RunHistory, eventLine, finiteOrNull, type PointContext } from './history.ts';
import { DurabilityPump } from './pump.ts';
import { ResumeTokens } from './resume-tokens.ts';
import { SnapshotArrays, checkpointFile, encodeRunCheckpoint, restoreLatest } from './run-checkpoint.ts';
import { RunStore } from './store.ts';
import { Waiters } from './waiters.ts';
import { islandView } from './island-view.ts';
import { OuterOffloadHost } from './outer/offload.ts';

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
  private readonly tokens: ResumeTokens;
  private durable: DurableState;
  /** The state a batch in the pump makes durable once it is committed. */
  private nextDurable: DurableState | null = null;
  private modelCache: { version: number; bytes: Uint8Array } | null = null;
  private readonly snapshotArrays = new SnapshotArrays();
  readonly history = new RunHistory();
  private evalService: EvalService | null = null;
  private sampler: EvalService | null = null;
  private sampling = false;
  private readonly log: (line: string) => void;

  // acks and waiters
  private readonly waiters = new Waiters();

  private readonly pump: DurabilityPump;
  private closed = false;
  /** The outer step in worker threads (null: on the event loop), and the step in flight. */
  private offload: OuterOffloadHost | null = null;
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
  /** Verified work (server/audit.ts): null unless a validator token was given. */
  audits: RunAudits | null = null;

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
    this.durable = { version: coord.version, hash: coord.hash, totalTokens: coord.totals().tokensApplied, theta: coord.params().slice() };
    this.pump = new DurabilityPump({
      coord, store, metrics: this.metrics, log: this.log,
      prepare: (events) => this.prepare(events),
      publish: (events) => this.publish(events),
      beforeSnapshot: () => this.beforeSnapshot(),
      tick: (now) => this.tick(now),
    });
  }

  /** Opens (resuming when the folder holds a run) or creates the run in `o.dir`. */
  static async open(o: OpenRunOptions): Promise<Run> {
    const store = new RunStore(o.dir, { keep: o.config.checkpoints.keep, maxLogBytes: o.config.limits.maxLogBytes });
    await store.openLog();
    const dataset = loadCorpus(o.config.data);
    const now = Date.now();
    let coord = restoreLatest(store, o.config.model, o.log ?? (() => {}));
    const resumed = coord !== null;
    if (!coord) coord = new Coordinator({ params: initParams(o.config.model, o.config.seed), config: o.config.coordinator, now });
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
    if ((o.outerWorkers ?? 0) > 0) {
      const why = OuterOffloadHost.unsupported(coord.config().downlink);
      if (why) run.log(`run: the outer step stays on the event loop: ${why}`);
      else run.offload = await OuterOffloadHost.start(coord, o.outerWorkers!);
    }
    run.config = { ...run.config, coordinator: coord.config() };
    store.writeConfig(run.config);
    const traffic = run.history.replay(store.readEvents(), coord.version, run.waiters.lastApplied);
    run.bytesIn = traffic.bytesIn;
    run.bytesOut = traffic.bytesOut;
    store.carry = () => run.history.carryLine(run.waiters.lastApplied, { bytesIn: run.bytesIn, bytesOut: run.bytesOut });
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

  get version(): number { return this.durable.version; }
  get hash(): string { return this.durable.hash; }
  /** The largest legal delta frame. */
  get maxFrameBytes(): number { return this.coord.maxFrameBytes(); }
  get model(): GPTConfig { return this.config.model; }
  /** Worker threads taking the outer step (0: the event loop takes it). */
  get outerWorkers(): number { return this.offload?.workers ?? 0; }

  status(now = Date.now()): RunStatus {
    const t = this.coord.totals();
    const last = this.history.last;
    return {
      run: this.config.name,
      mode: this.coord.mode,
      version: this.durable.version,
      hash: this.durable.hash,
      paused: this.coord.isPaused,
      done: this.coord.isDone,
      islandsOnline: this.islandsOnline(),
      tokensTotal: this.durable.totalTokens,
      tokensPerSec: this.history.tokensPerSec(now),
      evalLoss: this.history.lastEval?.loss ?? null,
      evalVersion: this.history.lastEval?.version ?? null,
      trainLoss: last?.trainLoss ?? null,
      bytesIn: this.bytesIn,
      bytesOut: this.bytesOut,
      bytesDataParallel: (this.durable.totalTokens / (this.config.coordinator.batchSize * this.config.coordinator.seqLen)) * 4 * this.paramCount,
      bytesPerUpdate: this.meanUpdateBytes(),
      goodput: t.goodput,
      accepted: t.accepted,
      rejected: t.rejected,
      time: now,
    };
  }

  islandsOnline(): number {
    return this.connected.size;
  }

  islands(): IslandView[] {
    return this.coord.islands().map((r) => islandView(r, this.connected.has(r.id), this.history.islands.summary(r.id)));
  }

  /** History points after `since` (a version), at most `limit` (the newest). */
  historySince(since = -1, limit = 100_000): HistoryPoint[] {
    return this.history.since(since, limit);
  }

  /** History points changed since the last call (new versions, late eval losses). */
  takeDirtyHistory(): HistoryPoint[] {
    return this.history.takeDirty();
  }

  /** Checkpoints on disk, newest first: GET /api/checkpoints. */
  checkpoints(): CheckpointInfo[] {
    return this.store.listCheckpoints().map((c) => ({
      version: c.version, hash: this.store.checkpointHash(c), bytes: c.bytes, time: Math.round(c.mtimeMs),
      url: `/api/checkpoints/${c.version}`, file: checkpointFile(this.config.name, c.version),
      hfUrl: `/api/checkpoints/${c.version}/hf`, hfFile: checkpointFile(this.config.name, c.version, 'hf'),
    }));
  }

  /** The bytes of the checkpoint of `version`, or null when it is not kept. */
  checkpointBytes(version: number): Uint8Array | null {
    return this.store.readCheckpoint(version);
  }

  /** θ at the durable version as safetensors (cached per version): GET /api/model. */
  modelBytes(): { version: number; hash: string; bytes: Uint8Array } {
    const d = this.durable;
    if (!this.modelCache || this.modelCache.version !== d.version) {
      const bytes = encodeCheckpoint({
        config: this.config.model, params: d.theta, extra: {},
        meta: { version: String(d.version), hash: d.hash, tokens: String(d.totalTokens), run: this.config.name },
      });
      this.modelCache = { version: d.version, bytes };
    }
    return { version: d.version, hash: d.hash, bytes: this.modelCache.bytes };
  }

  /** θ at the durable version (read-only by contract). */
  durableParams(): { version: number; hash: string; params: Float32Array } {
    return { version: this.durable.version, hash: this.durable.hash, params: this.durable.theta };
  }

  /** Mean bytes of the last (up to 8) durable update frames; null before the first. */
  private meanUpdateBytes(): number | null {
    const r = this.coord.updatesSince(Math.max(0, this.durable.version - 8));
    const ups = r.ok ? r.value.filter((u) => u.version <= this.durable.version) : [];
    return ups.length ? ups.reduce((a, u) => a + u.frame.length, 0) / ups.length : null;
  }

  /** Update messages after `fromVersion`, up to the durable version only. */
  updatesSince(fromVersion: number): Result<UpdateMsg[]> {
    if (fromVersion > this.durable.version) return err(ErrorCode.FUTURE_VERSION, `version ${fromVersion} is ahead of the server's ${this.durable.version}`);
    const r = this.coord.updatesSince(fromVersion);
    if (!r.ok) return r;
    const ups = r.value.filter((u) => u.version <= this.durable.version);
    // past a snapshot's bytes (4 per parameter), the snapshot is the cheaper way to catch up
    let bytes = 0;
    for (const u of ups) bytes += u.frame.length;
    if (bytes > 4 * this.paramCount) return err(ErrorCode.TOO_OLD, `catching up from ${fromVersion} costs more than the snapshot: fetch the model`);
    return ok(ups);
  }

  // ── islands ───────────────────────────────────────────────────────────────────────────────

  /** A resume token for an island id: an HMAC, so it survives restarts without being stored. */
  resumeToken(islandId: string): string {
    return this.tokens.token(islandId);
  }

  checkResumeToken(islandId: string, token: unknown): boolean {
    return this.tokens.check(islandId, token);
  }

  /** join → the assignment is released only once its base version is durable. */
  async join(req: Parameters<Coordinator['join']>[0]): Promise<Result<{ islandId: string; assignment: Assignment | null }>> {
    if (this.stepping) await this.whenIdle();
    const now = Date.now();
    const known = req.resumeIslandId !== undefined && this.coord.island(req.resumeIslandId) !== undefined;
    const r = this.coord.join(req, now);
    if (r.ok && known) {
      // A reconnecting island may still be busy with its previous round (training, or waiting for
      // the ack of a delta): it must not become a member of the open round it will not work on,
      // or a sync round would wait for it in vain. Leaving + heartbeat keeps it online and out of
      // the round; it gets its next assignment when it asks for one.
      this.coord.leave(r.value.islandId, now);
      this.coord.heartbeat(r.value.islandId, now);
      r.value.assignment = null;
    }
    this.kick();
    if (!r.ok) return r;
    this.store.append({ type: 'join', island: r.value.islandId, name: req.caps.name ?? '', engine: req.caps.engine, adapter: req.caps.adapter ?? '', resumed: req.resumeIslandId !== undefined });
    if (r.value.assignment) r.value.assignment = await this.releasable(r.value.assignment);
    return r;
  }

  rename(islandId: string, name: string): Result<void> {
    const r = this.coord.rename(islandId, name);
    if (r.ok) this.store.append({ type: 'rename', island: islandId, name });
    return r;
  }

  leave(islandId: string, reason: string): void {
    if (this.stepping) {
      void this.whenIdle().then(() => this.leave(islandId, reason));
      return;
    }
    const r = this.coord.leave(islandId, Date.now());
    if (r.ok) this.store.append({ type: 'leave', island: islandId, reason });
    this.waiters.deliver(islandId, err(ErrorCode.TRANSPORT, 'island left'));
    this.kick();
  }

  heartbeat(islandId: string): void {
    this.coord.heartbeat(islandId, Date.now());
    this.kick();
  }

  /** The next assignment; waits (sync) until the round closes. */
  async nextAssignment(islandId: string): Promise<Result<Assignment>> {
    if (this.stepping) await this.whenIdle();
    const r = this.coord.nextAssignment(islandId, Date.now());
    this.kick();
    if (!r.ok) return r;
    if (r.value) return ok(await this.releasable(r.value));
    return this.waiters.waitAssignment(islandId);
  }

  /**
   * An assignment may only name a durable version (an island must never train on a θ a crash could
   * take back). Sync: its round's base, so wait for it. Async: any base is fine (staleness is what
   * the island reports), so hand out the durable one at once instead of waiting for a commit.
   */
  private async releasable(a: Assignment): Promise<Assignment> {
    if (a.baseVersion <= this.durable.version) return a;
    if (a.mode === 'async') return { ...a, baseVersion: this.durable.version, baseHash: this.durable.hash };
    await this.whenDurable(a.baseVersion);
    return a;
  }

  /** Drops an island's waiting nextAssignment calls (its socket closed). */
  forgetWaiters(islandId: string): void {
    this.waiters.forget(islandId);
  }

  /**
   * Submits one delta. Resolves with the ack: at once when rejected, after the update that holds
   * it is durable when accepted. A resend of a delta that is pending or already applied gets the
   * same answer as the original (the island lost the ack, not the delta).
   */
  async submit(meta: DeltaMeta, frame: Uint8Array): Promise<AckMsg> {
    const known = this.waiters.knownAck(meta.islandId, meta.seq, meta.roundId);
    if (known) return known;
    // with the offload, the frame is decoded on a worker first (the coordinator checks the rest)
    const decoded = this.offload ? await this.offload.ingest(frame) : undefined;
    if (decoded) {
      await this.whenIdle();
      const again = this.waiters.knownAck(meta.islandId, meta.seq, meta.roundId);
      if (again) {
        if (decoded.ok) this.offload!.release(decoded.value.delta);
        return again;
      }
    }
    const t0 = performance.now();
    const audit = this.audits?.sample(meta) ?? null;
    const r = this.coord.submit({ meta, frame, decoded }, Date.now());
    if (audit && r.ok) this.audits!.offer(meta, frame, audit);
    this.metrics.applySeconds.observe((performance.now() - t0) / 1000);
    this.bytesIn += frame.length;
    this.metrics.bytesIn.inc(frame.length);
    if (!r.ok) {
      this.metrics.deltasRejected.inc({ code: r.error.code });
      this.store.append({ type: 'delta', island: meta.islandId, seq: meta.seq, round: meta.roundId, base: meta.baseVersion, bytes: frame.length, status: 'rejected', code: r.error.code });
      this.kick();
      return { islandId: meta.islandId, seq: meta.seq, roundId: meta.roundId, status: 'rejected', version: this.durable.version, error: r.error };
    }
    this.store.append({ type: 'delta', island: meta.islandId, seq: meta.seq, round: meta.roundId, base: meta.baseVersion, bytes: frame.length, status: r.value.status, staleness: r.value.staleness, tokens: meta.tokens, loss: finiteOrNull(meta.lossMean) });
    const ack = this.waiters.expectAck(meta.islandId, meta.seq);
    this.kick();
    return ack;
  }

  /** Counts a rejection made before the coordinator saw the message (schema, size, identity). */
  noteRejected(code: string, bytes: number): void {
    this.metrics.deltasRejected.inc({ code });
    this.bytesIn += bytes;
    this.metrics.bytesIn.inc(bytes);
  }

  noteBytesOut(bytes: number): void {
    this.bytesOut += bytes;
    this.metrics.bytesOut.inc(bytes);
  }

  /** Resolves once `version` (or a later one) is durable. */
  whenDurable(version: number): Promise<void> {
    return this.waiters.whenDurable(version, this.durable.version);
  }

  // ── admin ─────────────────────────────────────────────────────────────────────────────────

  async pause(): Promise<void> {
    this.coord.pause();
    this.store.append({ type: 'admin', action: 'pause' });
    await this.checkpointNow();
  }

  async resume(): Promise<void> {
    await this.whenIdle();
    this.coord.resume(Date.now());
    this.kick(); // resuming may close a round: its step starts
    this.store.append({ type: 'admin', action: 'resume' });
    await this.checkpointNow();
  }

  async setConfig(patch: CoordinatorConfigPatch): Promise<Result<RunConfig>> {
    const why = this.offload && patch.downlink ? OuterOffloadHost.unsupported(patch.downlink) : null;
    if (why) return err(ErrorCode.BAD_CONFIG, why);
    await this.whenIdle();
    const r = this.coord.setConfig(patch);
    if (!r.ok) return r;
    this.config = { ...this.config, coordinator: r.value };
    this.store.writeConfig(this.config);
    this.store.append({ type: 'admin', action: 'config', patch });
    await this.checkpointNow();
    return ok(this.config);
  }

  async ban(islandId: string, reason: string): Promise<Result<void>> {
    await this.whenIdle();
    const r = this.coord.ban(islandId, Date.now(), reason);
    this.kick(); // a ban may close a round: its step starts
    if (!r.ok) return r;
    this.store.append({ type: 'admin', action: 'ban', island: islandId, reason });
    this.onBan(islandId);
    await this.checkpointNow();
    return ok(undefined);
  }

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
    const info = this.store.listCheckpoints().find((c) => c.version === version);
    return { version, path: this.store.checkpointPath(version), bytes: info?.bytes ?? 0 };
  }

  /** Text from the current model, in a worker (one request at a time). */
  async sample(tokens: number, prompt: Uint8Array, seed: number, temperature: number): Promise<Result<{ version: number; bytes: Uint8Array }>> {
    if (this.sampling) return err('E_BUSY', 'a sample is being generated: try again in a moment');
    this.sampling = true;
    try {
      this.sampler ??= new EvalService({ config: this.config.model, heldOut: this.dataset.heldOut, batchSize: 1, nBatches: 1 });
      const d = this.durable;
      const bytes = await this.sampler.sample(d.theta, { prompt, tokens, temperature, seed });
      return ok({ version: d.version, bytes });
    } catch (e) {
      return err('E_SAMPLE', (e as Error).message);
    } finally {
      this.sampling = false;
    }
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
    this.closed = true;
    await this.offload?.close();
    await this.evalService?.close();
    await this.sampler?.close();
    await this.store.close();
  }

  // ── the event pump ────────────────────────────────────────────────────────────────────────

  /** Handles whatever the coordinator has queued (call after every coordinator call). */
  kick(): void {
    if (this.offload && !this.stepping && this.coord.pendingStep()) {
      this.stepping = this.offload.take(this.coord).then(() => {
        this.stepping = null;
        this.kick();
      }, (e: unknown) => {
        // a worker died mid-step: θ may be half moved. Stop; a restart resumes from the last durable
        // checkpoint, and nothing unacknowledged is lost.
        this.log(`run: the outer step failed, stopping: ${(e as Error)?.stack ?? String(e)}`);
        setImmediate(() => { throw e; });
      });
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
    return (this.syncing ??= this.offload.syncState(this.coord).finally(() => { this.syncing = null; }));
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
      this.nextDurable = { version: snap.meta.version, hash: snap.meta.hash, totalTokens: snap.meta.totals.tokensApplied, theta: snap.tensors.theta as Float32Array };
      this.store.requestCheckpoint(this.nextDurable.version, () => encodeRunCheckpoint(this.config, snap));
    }
    for (const ev of events) {
      const line = eventLine(ev, this.pointContext(ev.type === 'update' ? ev.contributors : []));
      if (line) this.store.append(line);
    }
  }

  /** After the commit: the new durable θ, then acks, broadcasts and assignments. */
  private publish(events: CoordinatorEvent[]): void {
    const next = this.nextDurable;
    this.nextDurable = null;
    this.snapshotArrays.releaseAll(); // the batch's checkpoint is written
    if (next) {
      this.durable = next;
      this.modelCache = null;
    }
    for (const ev of events) this.dispatch(ev);
    if (next) {
      this.waiters.releaseDurable(next.version);
      this.syncMetrics();
      this.evalService?.requestEval(next.version, next.theta);
    }
  }

  private dispatch(ev: CoordinatorEvent): void {
    switch (ev.type) {
      case 'update': {
        for (const c of ev.contributors) {
          this.metrics.deltasAccepted.inc();
          this.waiters.resolveAck({ islandId: c.islandId, seq: c.seq, roundId: c.roundId, status: 'applied', version: ev.update.version });
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
    return { islandsOnline: this.islandsOnline(), bytesInTotal: this.bytesIn, bytesOutTotal: this.bytesOut, tokensByEngine };
  }

  private startEval(): void {
    const e = new EvalService({ config: this.config.model, heldOut: this.dataset.heldOut, batchSize: this.config.eval.batchSize, nBatches: this.config.eval.batches });
    e.onResult = (r) => {
      if (this.closed) return;
      this.history.setEval(r.version, r.loss);
      this.metrics.evalLoss.set(r.loss);
      this.metrics.evalVersion.set(r.version);
      this.store.append({ type: 'eval', version: r.version, loss: r.loss, ms: Math.round(r.ms) });
    };
    e.onError = (x) => this.log(`eval failed: ${x.message}`);
    this.evalService = e;
    if (this.history.lastEval?.version !== this.durable.version) e.requestEval(this.durable.version, this.durable.theta);
  }

  syncMetrics(): void {
    this.metrics.version.set(this.durable.version);
    this.metrics.tokens.set(this.durable.totalTokens);
    this.metrics.paused.set(this.coord.isPaused ? 1 : 0);
    this.metrics.islandsOnline.set(this.islandsOnline());
  }
}
