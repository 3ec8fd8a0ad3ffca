// One training run on the server: the coordinator, driven by the wall clock, made durable by the
// run store, observed by the eval worker, the history and the metrics. `Run.open` builds its parts
// (the store, the coordinator restored or new, the outer step's workers, the history and waiters
// read back from the log) and the constructor puts them together. Its three faces live beside it:
// `run.islands` (islands.ts: what the gateway asks through its RunPort), `run.views` (views.ts: what
// the REST API reads) and `run.admin` (admin.ts: what the operator changes). It reports through its
// events (RunEvents), each emitted once the state it reports is durable.
//
// Durable before acknowledged: every coordinator call is followed by `kick()`, and the durability
// pump (pump.ts) publishes a batch of events (batch.ts: acks, broadcasts, assignments) only once
// its checkpoint (checkpoint.ts) and log lines (history.ts) are on disk (store.ts).
//
// The outer step off the event loop: with `outerWorkers` > 0 the coordinator's outer step runs in
// worker threads (outer/offload.ts). Until a step completes, calls that change rounds wait
// (`whenIdle`), and the pump snapshots only between steps.

import { EventEmitter } from 'node:events';
import type { Coordinator } from '../../core/coord/index.ts';
import type { TextDataset } from '../../core/data/dataset.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import { ErrorCode, type UpdateMsg } from '../../core/protocol.ts';
import { type Result, err, ok } from '../../core/result.ts';
import type { RunConfig } from '../../core/api.ts';
import type { Metrics } from '../metrics.ts';
import type { OuterOffloadHost } from '../outer/offload.ts';
import { RunAdmin } from './admin.ts';
import { RunAudits } from './audit.ts';
import { RunBatches, startEvals } from './batch.ts';
import { SnapshotArrays, encodeRunCheckpoint } from './checkpoint.ts';
import { DeltaArchive } from './delta-archive.ts';
import { DurableTheta, durableOf } from './durable.ts';
import type { EvalService } from './eval-worker.ts';
import type { RunHistory } from './history.ts';
import { IslandFile } from './island-file.ts';
import { RunIslands } from './islands.ts';
import type { ServedShards } from './served-shards.ts';
import { type OpenRunOptions, type RunParts, firstCommit, openParts } from './open.ts';
import { OuterSteps } from './outer-steps.ts';
import { DurabilityPump } from './pump.ts';
import { ResumeTokens } from './resume-tokens.ts';
import type { RunStore } from './store.ts';
import { RunViews } from './views.ts';
import type { Waiters } from './waiters.ts';

export type { OpenRunOptions, RunParts } from './open.ts';

export interface RunEvents {
  update: [update: UpdateMsg];
  island: [islandId: string, status: string, reason: string];
  /** An island was banned: its sockets must close. */
  ban: [islandId: string];
  /** θ was rebuilt (a revert): every island must say hello again and fetch it. */
  reset: [];
}

export class Run extends EventEmitter<RunEvents> {
  private cfg: RunConfig;
  readonly store: RunStore;
  readonly metrics: Metrics;
  readonly dataset: TextDataset;
  /** A shard run's shards (served-shards.ts), or null. */
  readonly shards: ServedShards | null;
  readonly coord: Coordinator;
  readonly resumed: boolean;
  readonly history: RunHistory;
  /** Acks and assignments waiting for durability (waiters.ts). */
  readonly waiters: Waiters;
  readonly durable: DurableTheta;
  /** Verified work (audit.ts): null unless a validator token was given. */
  readonly audits: RunAudits | null;
  /** The islands' side, the REST views (core/api.ts shapes) and the operator's calls. */
  readonly islands: RunIslands;
  readonly views: RunViews;
  readonly admin: RunAdmin;
  /** Each version's deltas, kept for reverts (delta-archive.ts). */
  readonly archive: DeltaArchive;
  /** The full island records, beside the checkpoints (island-file.ts). */
  readonly islandFile: IslandFile;
  private readonly offload: OuterOffloadHost | null;
  private readonly pump: DurabilityPump;
  private readonly batches: RunBatches;
  private readonly log: (line: string) => void;
  private evals: EvalService | null = null;
  private closed = false;
  /** The outer step in flight in the workers (outer-steps.ts). */
  private readonly steps: OuterSteps;

  constructor(p: RunParts) {
    super();
    const { store, coord, metrics, waiters, history, log, traffic } = p;
    this.store = store;
    this.coord = coord;
    this.metrics = metrics;
    this.waiters = waiters;
    this.history = history;
    this.log = log;
    this.dataset = p.dataset;
    this.shards = p.shards;
    this.resumed = p.resumed;
    this.cfg = p.config;
    this.offload = p.offload;
    this.steps = new OuterSteps(coord, p.offload, log, () => this.kick());
    this.archive = new DeltaArchive(store.paths.deltas);
    this.islandFile = new IslandFile(store.paths.islands);
    this.durable = new DurableTheta(durableOf(coord), waiters);
    const { archive, islandFile, durable } = this;
    const kick = () => this.kick();
    const config = () => this.cfg;
    const connected = new Map<string, number>();
    this.views = new RunViews({ coord, config, store, history, connected, traffic, durable, dataset: p.dataset });
    this.admin = new RunAdmin({
      ...{ coord, store, archive, islandFile, views: this.views, history, config, kick },
      setConfig: (c) => {
        this.cfg = c;
      },
      audited: () => this.audits !== null,
      banned: (id) => this.emit('ban', id),
      checkpointNow: () => this.checkpointNow(),
      drain: () => this.drain(),
      rebuilt: () => this.rebuilt(),
    });
    const ban = (id: string, reason: string) => this.admin.ban(id, reason);
    const appendLog = (line: Record<string, unknown>) => store.append(line as { type: string });
    this.audits = p.audit?.token ? new RunAudits({ coord, appendLog, ban }, p.audit) : null;
    const tokens = new ResumeTokens(store.paths.secret);
    const { offload, audits } = this;
    this.islands = new RunIslands({
      ...{ coord, store, metrics, waiters, tokens, archive, durable, connected, traffic },
      ...{ offload, audits, moved: () => this.views.islandsMoved(), kick },
    });
    const out = {
      update: (u: UpdateMsg) => this.emit('update', u),
      island: (id: string, status: string, reason: string) => this.emit('island', id, status, reason),
      durable: () => this.afterDurable(),
    };
    this.batches = new RunBatches({
      ...{ coord, store, archive, islandFile, config, durable, waiters, metrics, history },
      ...{ traffic, islandsOnline: () => connected.size, out, log },
    });
    this.pump = new DurabilityPump({
      ...{ coord, store, metrics, log },
      prepare: (events) => this.batches.prepare(events),
      publish: (events) => this.batches.publish(events),
      beforeSnapshot: () => this.batches.warm() ?? this.steps.beforeSnapshot(),
      tick: (now) => this.tick(now),
    });
  }

  /** Opens (resuming when the folder holds a run) or creates the run in `o.dir` (open.ts). */
  static async open(o: OpenRunOptions): Promise<Run> {
    const { parts, now } = await openParts(o);
    const run = new Run(parts);
    await firstCommit(parts, now, o.init?.from);
    run.afterDurable(o.evaluate !== false);
    run.kick();
    return run;
  }

  // ── reading ─────────────────────────────────

  get config(): RunConfig {
    return this.cfg;
  }
  get version(): number {
    return this.durable.version;
  }
  get hash(): string {
    return this.durable.hash;
  }
  get paramCount(): number {
    return this.coord.paramCount;
  }
  /** The largest legal delta frame. */
  get maxFrameBytes(): number {
    return this.coord.maxFrameBytes();
  }
  get model(): GPTConfig {
    return this.cfg.model;
  }
  /** Worker threads taking the outer step (0: the event loop takes it). */
  get outerWorkers(): number {
    return this.offload?.workers ?? 0;
  }
  islandsOnline(): number {
    return this.islands.connected.size;
  }
  /** θ at the durable version (read-only by contract). */
  durableParams(): { version: number; hash: string; params: Float32Array } {
    return this.durable.params();
  }

  /** Update messages after `fromVersion`, up to the durable version only. */
  updatesSince(fromVersion: number): Result<UpdateMsg[]> {
    const v = this.durable.version;
    if (fromVersion > v) return err(ErrorCode.FUTURE_VERSION, `version ${fromVersion} is ahead of the server's ${v}`);
    const r = this.coord.updatesSince(fromVersion);
    if (!r.ok) return r;
    const ups = r.value.filter((u) => u.version <= v);
    // past a snapshot's bytes (4 per parameter), the snapshot is the cheaper way to catch up
    let bytes = 0;
    for (const u of ups) bytes += u.frame.length;
    if (bytes > 4 * this.paramCount)
      return err(ErrorCode.TOO_OLD, `catching up from ${fromVersion} costs more than the snapshot: fetch the model`);
    return ok(ups);
  }

  // ── durability ────────────────────────────────

  /** Writes a checkpoint of the current state now (after any batch in flight). */
  async checkpointNow(): Promise<{ version: number; path: string; bytes: number }> {
    const arrays = await SnapshotArrays.warmed(this.coord.paramCount); // fresh pages of a large model stall the loop
    for (;;) {
      this.kick();
      await this.drain();
      const wait = this.steps.beforeSnapshot();
      if (!wait) break;
      await wait;
    }
    const snap = this.coord.snapshot(arrays.alloc);
    const version = snap.meta.version;
    this.store.requestCheckpoint(version, () => encodeRunCheckpoint(this.cfg, snap));
    await this.pump.commit();
    await this.islandFile.maybeWrite(() => snap.meta.islands, true);
    const info = this.store.listCheckpoints().find((c) => c.version === version);
    return { version, path: this.store.checkpointPath(version), bytes: info?.bytes ?? 0 };
  }

  /** θ was rebuilt in the coordinator (a revert): it becomes durable and islands start over from it. */
  private async rebuilt(): Promise<void> {
    await this.offload?.importState(this.coord);
    await this.checkpointNow();
    this.durable.set(durableOf(this.coord));
    this.durable.release();
    this.views.invalidate();
    this.afterDurable();
    this.emit('reset');
  }

  /** A version became durable: the views, the metrics and the eval follow (`startEvals`: the first time). */
  private afterDurable(firstTime?: boolean): void {
    this.views.islandsMoved(); // the islands' credit moved with the version: an acked island sees it at once
    const m = this.metrics;
    m.version.set(this.durable.version);
    m.tokens.set(this.durable.totalTokens);
    m.paused.set(this.coord.isPaused ? 1 : 0);
    m.islandsOnline.set(this.islandsOnline());
    if (firstTime) {
      const { durable, history, metrics, store, log } = this;
      const parts = { config: () => this.cfg, durable, history, metrics, store, log };
      this.evals = startEvals(parts, this.dataset, () => this.closed);
    } else this.evals?.requestEval(this.durable.version, this.durable.theta);
  }

  /** Waits until no batch of events is in flight and everything queued is durable. */
  drain(): Promise<void> {
    return this.pump.drain();
  }

  /** Waits for a pending eval (tests). */
  async evalIdle(): Promise<void> {
    await this.evals?.idle();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.whenIdle();
    await this.pump.close();
    await this.islandFile.maybeWrite(() => this.coord.islands(), true);
    this.closed = true;
    await this.offload?.close();
    await this.evals?.close();
    await this.views.close();
    await this.store.close();
  }

  // ── the event pump ───────────────────────────────

  /** Handles whatever the coordinator has queued (call after every coordinator call). */
  kick(): void {
    this.steps.follow();
    this.pump.kick();
  }

  /** An outer step is in flight (calls that change rounds wait: whenIdle). */
  get busy(): boolean {
    return this.steps.busy;
  }

  /** Resolves when no outer step is in flight (at once without offload). */
  whenIdle(): Promise<void> {
    return this.steps.whenIdle();
  }

  /** The pump's timer: deadlines (a step in flight kicks the pump again when it completes). */
  private tick(now: number): void {
    if (this.steps.busy) return;
    this.coord.tick(now);
    this.kick();
  }
}
