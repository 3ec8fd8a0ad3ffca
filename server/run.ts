// One training run on the server: the coordinator, driven by the wall clock, made durable by the
// run store, observed by the eval worker, the history and the metrics. The gateway (socket.io) and
// the REST plugins only talk to this class.
//
// Durable before acknowledged: every coordinator call is followed by
// `kick()`, which drains the coordinator's events in one batch. If the batch holds an update, the
// coordinator's snapshot (taken synchronously, so it is exactly the state after the batch) is
// written as a checkpoint and the batch's log lines are appended and fsync'd; only then are acks
// released, updates broadcast, and assignments delivered. Batches are handled one at a time, so
// when updates arrive faster than the disk, one checkpoint covers several (group commit).

import { randomBytes, createHmac, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  Coordinator, type CoordinatorConfigPatch, type CoordinatorEvent, type CoordinatorSnapshot, type CoordinatorSnapshotMeta,
  type IslandRecord,
} from '../core/coord/index.ts';
import type { TextDataset } from '../core/data/dataset.ts';
import { encodeCheckpoint } from '../core/checkpoint.ts';
import { initParams } from '../core/model/gpt.ts';
import { type GPTConfig, numParams, paramLayout } from '../core/model/config.ts';
import { type AckMsg, type Assignment, type DeltaMeta, ErrorCode, type UpdateMsg } from '../core/protocol.ts';
import { backoff } from '../core/random.ts';
import { type Result, err, ok } from '../core/result.ts';
import { type TensorInput, readSafetensors, tensorAsFloat32, writeSafetensors } from '../core/safetensors.ts';
import { loadCorpus } from './corpus.ts';
import { EvalService } from './eval-worker.ts';
import type { Metrics } from './plugins/metrics.ts';
import type { HistoryPoint, IslandView, RunConfig, RunStatus } from '../core/api.ts';
import { type LogEvent, RunStore } from './store.ts';

/** θ as of the last durable version: what islands may download. */
interface DurableState {
  version: number;
  hash: string;
  totalTokens: number;
  theta: Float32Array;
}

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (v: T) => void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => { resolve = r; });
  return { promise, resolve };
}

/** Update frames kept in a checkpoint (islands further behind after a restart fetch the snapshot). */
const CHECKPOINT_UPDATES = 8;
const TOKENS_PER_SEC_WINDOW_MS = 60_000;

export interface OpenRunOptions {
  dir: string;
  config: RunConfig;
  /** Runtime-knob changes to apply on resume (from flags). */
  resumePatch?: CoordinatorConfigPatch;
  metrics: Metrics;
  /** Eval after updates in a worker (default true). */
  evaluate?: boolean;
  log?: (line: string) => void;
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
  private readonly secret: Buffer;
  private durable: DurableState;
  private modelCache: { version: number; bytes: Uint8Array } | null = null;
  readonly history: HistoryPoint[] = [];
  /** Changed history points not yet streamed to dashboards (versions). */
  private dirtyHistory = new Set<number>();
  private lastEval: { version: number; loss: number } | null = null;
  private evalService: EvalService | null = null;
  private sampler: EvalService | null = null;
  private sampling = false;
  private readonly log: (line: string) => void;

  // acks and waiters
  private readonly pendingAcks = new Map<string, Deferred<AckMsg>>();
  private readonly lastApplied = new Map<string, AckMsg>();
  private readonly assignWaiters = new Map<string, Array<(r: Result<Assignment>) => void>>();
  private durableWaiters: Array<{ version: number; resolve: () => void }> = [];

  // the event pump
  private pumping: Promise<void> | null = null;
  private pumpAgain = false;
  private tickTimer: ReturnType<typeof setTimeout> | null = null;
  private tickAt = Infinity;
  private flushTimer: ReturnType<typeof setInterval>;
  private closed = false;

  // traffic, cumulative over the run (restored from the log)
  bytesIn = 0;
  bytesOut = 0;
  /** Connected island sockets by island id (kept by the gateway). */
  readonly connected = new Map<string, number>();

  /** Hooks for the gateway: all called after the state they report is durable. */
  onUpdate: (u: UpdateMsg) => void = () => {};
  onIslandEvent: (islandId: string, status: string, reason: string) => void = () => {};
  onBan: (islandId: string) => void = () => {};

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
    this.secret = loadSecret(o.dir);
    this.durable = { version: coord.version, hash: coord.hash, totalTokens: coord.totals().tokensApplied, theta: coord.params().slice() };
    this.flushTimer = setInterval(() => { if (this.store.pendingLines > 0) this.kick(); }, 250);
    this.flushTimer.unref();
  }

  /** Opens (resuming when the folder holds a run) or creates the run in `o.dir`. */
  static async open(o: OpenRunOptions): Promise<Run> {
    const store = new RunStore(o.dir, { keep: o.config.checkpoints.keep });
    await store.openLog();
    const dataset = loadCorpus(o.config.data);
    const now = Date.now();
    let coord: Coordinator | null = null;
    let resumed = false;
    const log = o.log ?? (() => {});
    for (const ck of store.listCheckpoints()) {
      const bytes = store.readCheckpoint(ck.version);
      const r = bytes ? decodeRunCheckpoint(bytes, o.config.model) : err('E_BAD_CHECKPOINT', 'unreadable');
      if (r.ok) {
        coord = r.value;
        resumed = true;
        break;
      }
      log(`checkpoint ${ck.path} is unusable (${r.error.code}: ${r.error.message}); trying an older one`);
    }
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
    run.config = { ...run.config, coordinator: coord.config() };
    store.writeConfig(run.config);
    run.restoreFromLog();
    // Deltas accepted into the open sync round before a restart: a resend attaches to the ack.
    if (resumed) for (const p of coord.snapshot().meta.pending) run.pendingAcks.set(`${p.islandId}#${p.seq}`, deferred());
    if (!resumed) {
      // version 0 is durable before anyone can see it: a restart reproduces it bit for bit
      store.requestCheckpoint(0, () => encodeRunCheckpoint(run.config, coord.snapshot()));
      store.append({ type: 'start', version: 0, hash: coord.hash, params: run.paramCount, config: run.config });
      run.history.push(run.emptyPoint(0, now));
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

  status(now = Date.now()): RunStatus {
    const t = this.coord.totals();
    const last = this.history.length ? this.history[this.history.length - 1] : null;
    return {
      run: this.config.name,
      mode: this.coord.mode,
      version: this.durable.version,
      hash: this.durable.hash,
      paused: this.coord.isPaused,
      done: this.coord.isDone,
      islandsOnline: this.islandsOnline(),
      tokensTotal: this.durable.totalTokens,
      tokensPerSec: this.tokensPerSec(now),
      evalLoss: this.lastEval?.loss ?? null,
      evalVersion: this.lastEval?.version ?? null,
      trainLoss: last?.trainLoss ?? null,
      bytesIn: this.bytesIn,
      bytesOut: this.bytesOut,
      bytesDataParallel: (this.durable.totalTokens / (this.config.coordinator.batchSize * this.config.coordinator.seqLen)) * 4 * this.paramCount,
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
    return this.coord.islands().map((r) => this.islandView(r));
  }

  private islandView(r: IslandRecord): IslandView {
    let rejected = 0;
    for (const v of Object.values(r.rejected)) rejected += v;
    const connected = this.connected.has(r.id);
    return {
      id: r.id, name: r.name, contributorId: r.contributorId ?? r.id, engine: r.engine, adapter: r.adapter,
      speed: r.tokensPerSec ?? null, tokens: r.tokensContributed, tokensSubmitted: r.tokensSubmitted,
      accepted: r.accepted, rejected, rejectedByCode: r.rejected, lastSeen: r.lastSeen,
      status: r.status === 'online' && !connected ? 'offline' : r.status, connected,
      innerSteps: r.assignedSteps, batchSize: r.batchSize, staleness: r.lastStaleness, joinedAt: r.joinedAt,
    };
  }

  /** History points after `since` (a version), at most `limit` (the newest). */
  historySince(since = -1, limit = 100_000): HistoryPoint[] {
    let i = this.history.length;
    while (i > 0 && this.history[i - 1].version > since) i--;
    const out = this.history.slice(i);
    return out.length > limit ? out.slice(out.length - limit) : out;
  }

  /** History points changed since the last call (new versions, late eval losses). */
  takeDirtyHistory(): HistoryPoint[] {
    if (this.dirtyHistory.size === 0) return [];
    const versions = this.dirtyHistory;
    this.dirtyHistory = new Set();
    return this.history.filter((p) => versions.has(p.version));
  }

  /** The newest point's rate while updates keep coming; 0 after a minute without one. */
  private tokensPerSec(now: number): number {
    const last = this.history[this.history.length - 1];
    return last && now - last.time <= TOKENS_PER_SEC_WINDOW_MS ? last.tokensPerSec : 0;
  }

  /** Tokens into θ per second over the window ending at a new point (at least since the previous one). */
  private rateAt(time: number, totalTokens: number): number {
    const h = this.history;
    let i = h.length - 1;
    while (i > 0 && time - h[i - 1].time <= TOKENS_PER_SEC_WINDOW_MS) i--;
    const first = h[i];
    const dt = first ? (time - first.time) / 1000 : 0;
    return dt > 0 ? Math.max(0, totalTokens - first.totalTokens) / dt : 0;
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
    return createHmac('sha256', this.secret).update(islandId).digest('base64url').slice(0, 32);
  }

  checkResumeToken(islandId: string, token: unknown): boolean {
    if (typeof token !== 'string') return false;
    const want = Buffer.from(this.resumeToken(islandId));
    const got = Buffer.from(token);
    return got.length === want.length && timingSafeEqual(got, want);
  }

  /** join → the assignment is released only once its base version is durable. */
  async join(req: Parameters<Coordinator['join']>[0]): Promise<Result<{ islandId: string; assignment: Assignment | null }>> {
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

  leave(islandId: string, reason: string): void {
    const r = this.coord.leave(islandId, Date.now());
    if (r.ok) this.store.append({ type: 'leave', island: islandId, reason });
    const w = this.assignWaiters.get(islandId);
    this.assignWaiters.delete(islandId);
    for (const f of w ?? []) f(err(ErrorCode.TRANSPORT, 'island left'));
    this.kick();
  }

  heartbeat(islandId: string): void {
    this.coord.heartbeat(islandId, Date.now());
    this.kick();
  }

  /** The next assignment; waits (sync) until the round closes. */
  async nextAssignment(islandId: string): Promise<Result<Assignment>> {
    const r = this.coord.nextAssignment(islandId, Date.now());
    this.kick();
    if (!r.ok) return r;
    if (r.value) return ok(await this.releasable(r.value));
    return new Promise((resolve) => {
      const list = this.assignWaiters.get(islandId) ?? [];
      list.push(resolve);
      this.assignWaiters.set(islandId, list);
    });
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
    this.assignWaiters.delete(islandId);
  }

  /**
   * Submits one delta. Resolves with the ack: at once when rejected, after the update that holds
   * it is durable when accepted. A resend of a delta that is pending or already applied gets the
   * same answer as the original (the island lost the ack, not the delta).
   */
  submit(meta: DeltaMeta, frame: Uint8Array): Promise<AckMsg> {
    const key = `${meta.islandId}#${meta.seq}`;
    const pending = this.pendingAcks.get(key);
    if (pending) return pending.promise;
    const last = this.lastApplied.get(meta.islandId);
    if (last && last.seq === meta.seq && last.roundId === meta.roundId) return Promise.resolve({ ...last });
    const t0 = performance.now();
    const r = this.coord.submit({ meta, frame }, Date.now());
    this.metrics.applySeconds.observe((performance.now() - t0) / 1000);
    this.bytesIn += frame.length;
    this.metrics.bytesIn.inc(frame.length);
    if (!r.ok) {
      this.metrics.deltasRejected.inc({ code: r.error.code });
      this.store.append({ type: 'delta', island: meta.islandId, seq: meta.seq, round: meta.roundId, base: meta.baseVersion, bytes: frame.length, status: 'rejected', code: r.error.code });
      this.kick();
      return Promise.resolve({ islandId: meta.islandId, seq: meta.seq, roundId: meta.roundId, status: 'rejected', version: this.durable.version, error: r.error });
    }
    this.store.append({ type: 'delta', island: meta.islandId, seq: meta.seq, round: meta.roundId, base: meta.baseVersion, bytes: frame.length, status: r.value.status, staleness: r.value.staleness, tokens: meta.tokens, loss: finiteOrNull(meta.lossMean) });
    const d = deferred<AckMsg>();
    this.pendingAcks.set(key, d);
    this.kick();
    return d.promise;
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
    if (this.durable.version >= version) return Promise.resolve();
    return new Promise((resolve) => this.durableWaiters.push({ version, resolve }));
  }

  // ── admin ─────────────────────────────────────────────────────────────────────────────────

  async pause(): Promise<void> {
    this.coord.pause();
    this.store.append({ type: 'admin', action: 'pause' });
    await this.checkpointNow();
  }

  async resume(): Promise<void> {
    this.coord.resume(Date.now());
    this.store.append({ type: 'admin', action: 'resume' });
    await this.checkpointNow();
  }

  async setConfig(patch: CoordinatorConfigPatch): Promise<Result<RunConfig>> {
    const r = this.coord.setConfig(patch);
    if (!r.ok) return r;
    this.config = { ...this.config, coordinator: r.value };
    this.store.writeConfig(this.config);
    this.store.append({ type: 'admin', action: 'config', patch });
    await this.checkpointNow();
    return ok(this.config);
  }

  async ban(islandId: string, reason: string): Promise<Result<void>> {
    const r = this.coord.ban(islandId, Date.now(), reason);
    if (!r.ok) return r;
    this.store.append({ type: 'admin', action: 'ban', island: islandId, reason });
    this.onBan(islandId);
    await this.checkpointNow();
    return ok(undefined);
  }

  /** Writes a checkpoint of the current state now (after any batch in flight). */
  async checkpointNow(): Promise<{ version: number; path: string; bytes: number }> {
    await this.drain();
    const snap = this.coord.snapshot();
    const version = snap.meta.version;
    this.store.requestCheckpoint(version, () => encodeRunCheckpoint(this.config, snap));
    await this.commitWithRetry();
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
  async drain(): Promise<void> {
    for (let i = 0; i < 100; i++) {
      if (this.pumping) await this.pumping;
      else if (this.store.pendingLines > 0) this.kick();
      else return;
    }
  }

  /** Waits for a pending eval (tests). */
  async evalIdle(): Promise<void> {
    await this.evalService?.idle();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.drain();
    this.closed = true;
    clearInterval(this.flushTimer);
    if (this.tickTimer) clearTimeout(this.tickTimer);
    await this.evalService?.close();
    await this.sampler?.close();
    await this.store.close();
  }

  // ── the event pump ────────────────────────────────────────────────────────────────────────

  /** Handles whatever the coordinator has queued (call after every coordinator call). */
  kick(): void {
    if (this.closed) return;
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = this.pump().catch((e: unknown) => {
      // a bug, not input: say so loudly, keep serving (the next kick drains what is left)
      this.log(`run: event pump failed: ${(e as Error)?.stack ?? String(e)}`);
    }).finally(() => {
      this.pumping = null;
      if (this.pumpAgain) this.kick();
      this.scheduleTick();
    });
  }

  private async pump(): Promise<void> {
    do {
      this.pumpAgain = false;
      const events = this.coord.drainEvents();
      const updates = events.filter((e): e is Extract<CoordinatorEvent, { type: 'update' }> => e.type === 'update');
      let next: DurableState | null = null;
      if (updates.length > 0) {
        const snap = this.coord.snapshot();
        next = { version: snap.meta.version, hash: snap.meta.hash, totalTokens: snap.meta.totals.tokensApplied, theta: snap.tensors.theta as Float32Array };
        this.store.requestCheckpoint(next.version, () => encodeRunCheckpoint(this.config, snap));
      }
      for (const ev of events) this.logEvent(ev);
      if (next || this.store.pendingLines > 0) {
        const t0 = performance.now();
        await this.commitWithRetry();
        this.metrics.commitSeconds.observe((performance.now() - t0) / 1000);
      }
      if (next) {
        this.durable = next;
        this.modelCache = null;
      }
      for (const ev of events) this.dispatch(ev);
      if (next) {
        this.releaseDurableWaiters();
        this.syncMetrics();
        this.evalService?.requestEval(next.version, next.theta);
      }
    } while (this.pumpAgain && !this.closed);
  }

  private async commitWithRetry(): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.store.commit();
        return;
      } catch (e) {
        // Nothing is acknowledged until this succeeds; keep trying (a full disk may be freed).
        this.log(`run store commit failed (attempt ${attempt + 1}): ${(e as Error).message}`);
        if (this.closed) throw e;
        await new Promise((r) => setTimeout(r, backoff(attempt, 100, 5000)));
      }
    }
  }

  private logEvent(ev: CoordinatorEvent): void {
    switch (ev.type) {
      case 'update': {
        const u = ev.update;
        this.store.append({
          type: 'update', t: u.time, version: u.version, prevVersion: u.prevVersion, hash: u.hash, prevHash: u.prevHash,
          tokens: u.tokens, totalTokens: u.totalTokens, trainLoss: finiteOrNull(u.trainLoss),
          contributors: ev.contributors.map((c) => ({ island: c.islandId, seq: c.seq, round: c.roundId, base: c.baseVersion, staleness: c.staleness, tokens: c.tokens, weight: c.weight })),
          rejected: ev.rejected.map((r) => ({ island: r.islandId, seq: r.seq, round: r.roundId, code: r.error.code })),
          stats: { ...ev.stats, trainLoss: finiteOrNull(ev.stats.trainLoss) },
          islandsOnline: this.islandsOnline(), bytesInTotal: this.bytesIn, bytesOutTotal: this.bytesOut,
          tokensByEngine: this.tokensByEngine(ev.contributors),
        });
        break;
      }
      case 'rejected':
        this.store.append({ type: 'dropped', rejected: ev.rejected.map((r) => ({ island: r.islandId, seq: r.seq, round: r.roundId, code: r.error.code })) });
        break;
      case 'island':
        this.store.append({ type: 'island', island: ev.islandId, status: ev.status, reason: ev.reason });
        break;
      case 'round':
        if (ev.state === 'closed') this.store.append({ type: 'round', round: ev.roundId, base: ev.baseVersion, state: ev.state, members: ev.members });
        break;
      case 'done':
        this.store.append({ type: 'done', version: ev.version, totalTokens: ev.totalTokens });
        break;
      default:
        break;
    }
  }

  private dispatch(ev: CoordinatorEvent): void {
    switch (ev.type) {
      case 'update': {
        for (const c of ev.contributors) {
          const ack: AckMsg = { islandId: c.islandId, seq: c.seq, roundId: c.roundId, status: 'applied', version: ev.update.version };
          this.lastApplied.set(c.islandId, ack);
          this.metrics.deltasAccepted.inc();
          this.resolveAck(ack);
        }
        for (const r of ev.rejected) this.rejectAck(r.islandId, r.seq, r.roundId, r.error);
        this.addHistoryPoint(ev);
        this.onUpdate(ev.update);
        break;
      }
      case 'rejected':
        for (const r of ev.rejected) this.rejectAck(r.islandId, r.seq, r.roundId, r.error);
        break;
      case 'assignment': {
        const list = this.assignWaiters.get(ev.islandId);
        if (list) {
          this.assignWaiters.delete(ev.islandId);
          for (const f of list) f(ev.result);
        }
        break;
      }
      case 'island':
        this.onIslandEvent(ev.islandId, ev.status, ev.reason);
        break;
      case 'done':
        for (const [id, list] of this.assignWaiters) {
          this.assignWaiters.delete(id);
          for (const f of list) f(err(ErrorCode.DONE, 'the run reached its token budget'));
        }
        break;
      default:
        break;
    }
  }

  private resolveAck(ack: AckMsg): void {
    const key = `${ack.islandId}#${ack.seq}`;
    const d = this.pendingAcks.get(key);
    if (!d) return;
    this.pendingAcks.delete(key);
    d.resolve(ack);
  }

  private rejectAck(islandId: string, seq: number, roundId: number, error: { code: string; message: string }): void {
    this.metrics.deltasRejected.inc({ code: error.code });
    this.resolveAck({ islandId, seq, roundId, status: 'rejected', version: this.durable.version, error });
  }

  private releaseDurableWaiters(): void {
    const v = this.durable.version;
    const keep: typeof this.durableWaiters = [];
    for (const w of this.durableWaiters) (w.version <= v ? w.resolve() : keep.push(w));
    this.durableWaiters = keep;
  }

  private scheduleTick(): void {
    if (this.closed) return;
    const at = Math.min(this.coord.nextDeadline(), Date.now() + 5_000);
    if (at >= this.tickAt && this.tickTimer) return;
    if (this.tickTimer) clearTimeout(this.tickTimer);
    this.tickAt = at;
    this.tickTimer = setTimeout(() => {
      this.tickTimer = null;
      this.tickAt = Infinity;
      if (this.closed) return;
      this.coord.tick(Date.now());
      this.kick();
      if (!this.pumping) this.scheduleTick();
    }, Math.max(20, at - Date.now()));
    this.tickTimer.unref();
  }

  // ── history, eval, metrics ────────────────────────────────────────────────────────────────

  private emptyPoint(version: number, time: number): HistoryPoint {
    return {
      version, time, tokens: 0, totalTokens: 0, tokensPerSec: 0, trainLoss: null, evalLoss: null, islandsOnline: this.islandsOnline(), contributors: 0,
      bytesIn: 0, bytesOut: 0, bytesInTotal: 0, bytesOutTotal: 0, stalenessHist: [], accepted: 0, rejected: {}, compressionRatio: 0, goodput: 1, updateNorm: 0,
      tokensByEngine: {}, tokensPerSecByEngine: {},
    };
  }

  private addHistoryPoint(ev: Extract<CoordinatorEvent, { type: 'update' }>): void {
    const s = ev.stats;
    this.pushPoint({
      version: s.version, time: s.time, tokens: s.tokens, totalTokens: s.totalTokens, tokensPerSec: this.rateAt(s.time, s.totalTokens), trainLoss: finiteOrNull(s.trainLoss),
      evalLoss: null, islandsOnline: this.islandsOnline(), contributors: s.contributors, bytesIn: s.bytesIn, bytesOut: s.bytesOut,
      bytesInTotal: this.bytesIn, bytesOutTotal: this.bytesOut,
      stalenessHist: s.stalenessHist, accepted: s.accepted, rejected: s.rejected, compressionRatio: s.compressionRatio,
      goodput: s.goodput, updateNorm: s.updateNorm, ...this.engineRates(s.time, this.tokensByEngine(ev.contributors)),
    });
  }

  private tokensByEngine(contributors: ReadonlyArray<{ islandId: string; tokens: number }>): Record<string, number> {
    const out: Record<string, number> = {};
    for (const c of contributors) {
      const engine = this.coord.island(c.islandId)?.engine ?? 'unknown';
      out[engine] = (out[engine] ?? 0) + c.tokens;
    }
    return out;
  }

  /** Per-engine tokens and tokens/s since the previous history point. */
  private engineRates(time: number, tokensByEngine: Record<string, number>): Pick<HistoryPoint, 'tokensByEngine' | 'tokensPerSecByEngine'> {
    const last = this.history[this.history.length - 1];
    const dt = last ? (time - last.time) / 1000 : 0;
    const tokensPerSecByEngine: Record<string, number> = {};
    if (dt > 0) for (const [k, v] of Object.entries(tokensByEngine)) tokensPerSecByEngine[k] = v / dt;
    return { tokensByEngine, tokensPerSecByEngine };
  }

  private pushPoint(p: HistoryPoint): void {
    const last = this.history[this.history.length - 1];
    if (last && last.version >= p.version) return; // replayed
    this.history.push(p);
    this.dirtyHistory.add(p.version);
  }

  private startEval(): void {
    const e = new EvalService({ config: this.config.model, heldOut: this.dataset.heldOut, batchSize: this.config.eval.batchSize, nBatches: this.config.eval.batches });
    e.onResult = (r) => {
      if (this.closed) return;
      this.lastEval = { version: r.version, loss: r.loss };
      this.metrics.evalLoss.set(r.loss);
      this.metrics.evalVersion.set(r.version);
      this.store.append({ type: 'eval', version: r.version, loss: r.loss, ms: Math.round(r.ms) });
      const p = this.findPoint(r.version);
      if (p) {
        p.evalLoss = r.loss;
        this.dirtyHistory.add(p.version);
      }
    };
    e.onError = (x) => this.log(`eval failed: ${x.message}`);
    this.evalService = e;
    if (!this.lastEval || this.lastEval.version !== this.durable.version) e.requestEval(this.durable.version, this.durable.theta);
  }

  private findPoint(version: number): HistoryPoint | undefined {
    for (let i = this.history.length - 1; i >= 0; i--) {
      if (this.history[i].version === version) return this.history[i];
      if (this.history[i].version < version) return undefined;
    }
    return undefined;
  }

  syncMetrics(): void {
    this.metrics.version.set(this.durable.version);
    this.metrics.tokens.set(this.durable.totalTokens);
    this.metrics.paused.set(this.coord.isPaused ? 1 : 0);
    this.metrics.islandsOnline.set(this.islandsOnline());
  }

  /** Rebuilds history, eval losses, traffic and the last applied ack per island from events.jsonl. */
  private restoreFromLog(): void {
    const events = this.store.readEvents();
    const v = this.coord.version;
    for (const e of events) this.replay(e, v);
    this.dirtyHistory.clear();
  }

  private replay(e: LogEvent, maxVersion: number): void {
    const num = (x: unknown, d = 0) => (typeof x === 'number' && Number.isFinite(x) ? x : d);
    if (e.type === 'resume') {
      // A restart at version V: anything logged past V before the crash never became durable.
      const v = num(e.version);
      while (this.history.length && this.history[this.history.length - 1].version > v) this.history.pop();
      for (const [id, a] of this.lastApplied) if (a.version > v) this.lastApplied.delete(id);
      if (this.lastEval && this.lastEval.version > v) this.lastEval = null;
    } else if (e.type === 'start') {
      if (this.history.length === 0) this.history.push(this.emptyPoint(0, e.t));
    } else if (e.type === 'update') {
      const version = num(e.version);
      if (version > maxVersion) return; // logged past the checkpoint: cannot happen, but never trust it
      const s = (e.stats ?? {}) as Partial<HistoryPoint> & { stalenessHist?: number[] };
      this.pushPoint({
        version, time: e.t, tokens: num(e.tokens), totalTokens: num(e.totalTokens), tokensPerSec: this.rateAt(e.t, num(e.totalTokens)),
        trainLoss: typeof e.trainLoss === 'number' ? e.trainLoss : null, evalLoss: null, islandsOnline: num(e.islandsOnline), contributors: num(s.contributors),
        bytesIn: num(s.bytesIn), bytesOut: num(s.bytesOut), bytesInTotal: num(e.bytesInTotal), bytesOutTotal: num(e.bytesOutTotal),
        stalenessHist: Array.isArray(s.stalenessHist) ? s.stalenessHist : [], accepted: num(s.accepted), rejected: (s.rejected ?? {}) as Record<string, number>,
        compressionRatio: num(s.compressionRatio), goodput: num(s.goodput, 1), updateNorm: num(s.updateNorm),
        ...this.engineRates(e.t, (e.tokensByEngine ?? {}) as Record<string, number>),
      });
      this.bytesIn = num(e.bytesInTotal, this.bytesIn);
      this.bytesOut = num(e.bytesOutTotal, this.bytesOut);
      for (const c of (Array.isArray(e.contributors) ? e.contributors : []) as Array<{ island: string; seq: number; round: number }>) {
        this.lastApplied.set(c.island, { islandId: c.island, seq: c.seq, roundId: c.round, status: 'applied', version });
      }
    } else if (e.type === 'eval') {
      const p = this.findPoint(num(e.version, -1));
      if (p) p.evalLoss = num(e.loss);
      this.lastEval = { version: num(e.version), loss: num(e.loss) };
    }
  }
}

function finiteOrNull(x: number): number | null {
  return Number.isFinite(x) ? x : null;
}

/** The run's secret for resume tokens: created once, kept in the run folder (mode 0600). */
function loadSecret(dir: string): Buffer {
  const p = join(dir, 'secret.key');
  if (existsSync(p)) return Buffer.from(readFileSync(p, 'utf8').trim(), 'hex');
  const s = randomBytes(32);
  writeFileSync(p, s.toString('hex') + '\n', { mode: 0o600 });
  return s;
}

// ── checkpoint format ───────────────────────────────────────────────────────────────────────
//
// A run checkpoint is a model checkpoint (core/checkpoint.ts: one F32 tensor per parameter tensor,
// `config` metadata; `atoll sample --checkpoint` and Python read it) plus the coordinator's state:
// F32 tensors outer.momentum, outer.buffer, downlink.residual, pending.<i>, U8 tensors update.<v>
// (the last few downlink frames), and the coordinator's JSON snapshot under metadata `coordinator`.

export function encodeRunCheckpoint(run: RunConfig, snap: CoordinatorSnapshot): Uint8Array {
  const layout = paramLayout(run.model);
  const theta = snap.tensors.theta as Float32Array;
  const tensors: Record<string, TensorInput> = {};
  for (const t of layout.tensors) tensors[t.name] = { dtype: 'F32', shape: t.shape, data: theta.subarray(t.offset, t.offset + t.size) };
  const meta: CoordinatorSnapshotMeta = { ...snap.meta, updates: snap.meta.updates.slice(-CHECKPOINT_UPDATES) };
  const keepUpdates = new Set(meta.updates.map((u) => `update.${u.version}`));
  for (const [name, arr] of Object.entries(snap.tensors)) {
    if (name === 'theta') continue;
    if (name.startsWith('update.') && !keepUpdates.has(name)) continue;
    tensors[name] = { dtype: arr instanceof Float32Array ? 'F32' : 'U8', shape: [arr.length], data: arr };
  }
  return writeSafetensors(tensors, {
    format: 'atoll-checkpoint-1',
    config: JSON.stringify(run.model),
    version: String(meta.version),
    hash: meta.hash,
    tokens: String(meta.totals.tokensApplied),
    preset: run.preset,
    run: run.name,
    params: String(numParams(run.model)),
    coordinator: JSON.stringify(meta),
  });
}

export function decodeRunCheckpoint(bytes: Uint8Array, expected: GPTConfig): Result<Coordinator> {
  const file = readSafetensors(bytes);
  if (!file.ok) return file;
  const { tensors, metadata } = file.value;
  if (metadata.config !== JSON.stringify(expected)) return err('E_WRONG_MODEL', `checkpoint is for model ${metadata.config}, the run is ${JSON.stringify(expected)}`);
  let meta: CoordinatorSnapshotMeta;
  try { meta = JSON.parse(metadata.coordinator ?? '') as CoordinatorSnapshotMeta; } catch {
    return err('E_BAD_CHECKPOINT', 'checkpoint has no coordinator state (a plain model checkpoint?)');
  }
  const layout = paramLayout(expected);
  const theta = new Float32Array(layout.total);
  for (const t of layout.tensors) {
    const v = tensors[t.name];
    if (!v || v.dtype !== 'F32' || v.data.length !== 4 * t.size) return err('E_BAD_CHECKPOINT', `tensor ${t.name} is missing or malformed`);
    theta.set(tensorAsFloat32(v), t.offset);
  }
  const snapTensors: CoordinatorSnapshot['tensors'] = { theta };
  for (const [name, v] of Object.entries(tensors)) {
    if (layout.byName[name]) continue;
    if (v.dtype === 'F32') snapTensors[name] = tensorAsFloat32(v).slice();
    else if (v.dtype === 'U8') snapTensors[name] = v.data.slice();
  }
  return Coordinator.restore({ tensors: snapTensors, meta });
}
