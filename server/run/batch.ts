// What one batch of coordinator events does around its commit (the durability pump, pump.ts):
// before it, the batch's log lines, its checkpoint when it holds an update, the delta archive's
// files; after it, the new durable θ, then acks, assignments and the run's events (an update to
// broadcast, an island's status). Also the evals that follow each durable version.

import type { Coordinator, CoordinatorEvent } from '../../core/coord/index.ts';
import type { TextDataset } from '../../core/data/dataset.ts';
import { ErrorCode, type UpdateMsg } from '../../core/protocol.ts';
import type { RunConfig } from '../../core/api.ts';
import type { Metrics } from '../metrics.ts';
import { SnapshotArrays, encodeRunCheckpoint } from './checkpoint.ts';
import type { DeltaArchive } from './delta-archive.ts';
import type { DurableState, DurableTheta } from './durable.ts';
import { EvalService } from './eval-worker.ts';
import { type PointContext, type RunHistory, eventLine, lrAt } from './history.ts';
import type { IslandFile } from './island-file.ts';
import type { Traffic } from './islands.ts';
import type { RunStore } from './store.ts';
import type { Waiters } from './waiters.ts';

/** What a batch reports: an update to broadcast (durable), an island's new status. */
export interface BatchOutput {
  update(u: UpdateMsg): void;
  island(islandId: string, status: string, reason: string): void;
  /** A version became durable (the views' copies, the metrics). */
  durable(): void;
}

export interface BatchParts {
  coord: Coordinator;
  store: RunStore;
  archive: DeltaArchive;
  islandFile: IslandFile;
  config: () => RunConfig;
  durable: DurableTheta;
  waiters: Waiters;
  metrics: Metrics;
  history: RunHistory;
  traffic: Readonly<Traffic>;
  islandsOnline: () => number;
  out: BatchOutput;
  log: (line: string) => void;
}

export class RunBatches {
  /** The state a batch in the pump makes durable once it is committed. */
  private next: DurableState | null = null;
  private readonly snapshotArrays = new SnapshotArrays();

  /** Each update's context from prepare, for its history point in publish. */
  private readonly contexts = new WeakMap<CoordinatorEvent, PointContext>();

  constructor(private readonly p: BatchParts) {}

  /**
   * Before a batch is drained (the pump's first wait before a snapshot, then any outer step in flight):
   * the arrays its snapshot would copy into, made with the event loop free between chunks (null when
   * they are there already). θ, the optimizer's momentum and buffer, the downlink residual, and each
   * pending delta (as many as the last snapshot held).
   */
  warm(): Promise<void> | null {
    return this.snapshotArrays.warm(this.p.coord.paramCount);
  }

  /** Before the commit: the batch's log lines, and its checkpoint when it holds an update. */
  prepare(events: CoordinatorEvent[]): void {
    const { coord, store, archive } = this.p;
    if (events.some((e) => e.type === 'update')) {
      const snap = coord.snapshot(this.snapshotArrays.alloc);
      void this.p.islandFile
        .maybeWrite(() => snap.meta.islands)
        .catch((e: unknown) => this.p.log(`run: writing the islands file failed: ${(e as Error).message}`));
      const { version, hash } = snap.meta;
      const theta = snap.tensors.theta as Float32Array;
      this.next = { version, hash, totalTokens: snap.meta.totals.tokensApplied, theta };
      store.requestCheckpoint(version, () => encodeRunCheckpoint(this.p.config(), snap));
    }
    const oldest = store.listCheckpoints().at(-1)?.version ?? 0;
    for (const ev of events) {
      // an update's context is taken here, as the coordinator made it (the lr it stepped with), for its point too
      const ctx = this.pointContext(ev.type === 'update' ? ev.contributors : []);
      if (ev.type === 'update') this.contexts.set(ev, ctx);
      const line = eventLine(ev, ctx);
      if (line) store.append(line);
      if (ev.type === 'update') archive.write(ev.update.version, ev.update.time, ev.contributors, oldest);
      if (ev.type === 'update' || ev.type === 'rejected') for (const x of ev.rejected) archive.drop(x.islandId, x.seq);
    }
  }

  /** After the commit: the new durable θ, then acks, broadcasts and assignments. */
  publish(events: CoordinatorEvent[]): void {
    const next = this.next;
    this.next = null;
    this.snapshotArrays.releaseAll(); // the batch's checkpoint is written
    if (next) this.p.durable.set(next);
    for (const ev of events) this.dispatch(ev);
    if (next) {
      this.p.durable.release();
      this.p.out.durable();
    }
  }

  private dispatch(ev: CoordinatorEvent): void {
    const { waiters, metrics } = this.p;
    switch (ev.type) {
      case 'update': {
        for (const c of ev.contributors) {
          metrics.deltasAccepted.inc();
          const { islandId, seq, roundId } = c;
          waiters.resolveAck({ islandId, seq, roundId, status: 'applied', version: ev.update.version });
        }
        for (const r of ev.rejected) this.rejectAck(r.islandId, r.seq, r.roundId, r.error);
        this.p.history.addUpdate(ev, this.contexts.get(ev) ?? this.pointContext(ev.contributors));
        this.p.out.update(ev.update);
        break;
      }
      case 'rejected':
        for (const r of ev.rejected) this.rejectAck(r.islandId, r.seq, r.roundId, r.error);
        break;
      case 'assignment':
        waiters.deliver(ev.islandId, ev.result);
        break;
      case 'island':
        this.p.out.island(ev.islandId, ev.status, ev.reason);
        break;
      case 'done':
        waiters.deliverAll(ErrorCode.DONE, 'the run reached its token budget');
        break;
      default:
        break;
    }
  }

  private rejectAck(islandId: string, seq: number, roundId: number, error: { code: string; message: string }): void {
    this.p.metrics.deltasRejected.inc({ code: error.code });
    const version = this.p.durable.version;
    this.p.waiters.resolveAck({ islandId, seq, roundId, status: 'rejected', version, error });
  }

  /** What a history point and an update's log line record beside the coordinator's stats. */
  private pointContext(contributors: ReadonlyArray<{ islandId: string; tokens: number }>): PointContext {
    const tokensByEngine: Record<string, number> = {};
    for (const c of contributors) {
      const engine = this.p.coord.island(c.islandId)?.engine ?? 'unknown';
      tokensByEngine[engine] = (tokensByEngine[engine] ?? 0) + c.tokens;
    }
    const { bytesIn, bytesOut } = this.p.traffic;
    const lr = lrAt(this.p.coord.config(), this.p.coord.totals().tokensApplied);
    return {
      islandsOnline: this.p.islandsOnline(),
      bytesInTotal: bytesIn,
      bytesOutTotal: bytesOut,
      tokensByEngine,
      ...lr,
    };
  }
}

/**
 * The eval worker of a run: each durable version's held-out loss into the history, the metrics and
 * the log (results that come after `closed()` are dropped). Evaluates the durable θ at once unless
 * the history holds its loss already.
 */
export function startEvals(
  p: Pick<BatchParts, 'config' | 'durable' | 'history' | 'metrics' | 'store' | 'log'>,
  dataset: TextDataset,
  closed: () => boolean,
): EvalService {
  const cfg = p.config();
  const e = new EvalService({
    config: cfg.model,
    heldOut: dataset.heldOut,
    batchSize: cfg.eval.batchSize,
    nBatches: cfg.eval.batches,
  });
  e.onResult = (r) => {
    if (closed()) return;
    p.history.setEval(r.version, r.loss);
    p.store.noteEval(r.version, r.loss); // the keep policy's best
    p.metrics.evalLoss.set(r.loss);
    p.metrics.evalVersion.set(r.version);
    p.store.append({ type: 'eval', version: r.version, loss: r.loss, ms: Math.round(r.ms) });
  };
  e.onError = (x) => p.log(`eval failed: ${x.message}`);
  if (p.history.lastEval?.version !== p.durable.version) e.requestEval(p.durable.version, p.durable.theta);
  return e;
}
