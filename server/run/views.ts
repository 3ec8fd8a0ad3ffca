// The run as the REST API and the dashboard stream read it: every answer is a core/api.ts shape.
// Nothing here changes the run. Island views are served from a copy refreshed at most once a
// second, so a client polling `/api/islands` costs a page of that copy, not a walk over the records.

import { encodeCheckpoint } from '../../core/checkpoint.ts';
import type {
  CheckpointInfo,
  HistoryPoint,
  IslandView,
  IslandsResponse,
  MixStatus,
  RunStatus,
} from '../../core/api.ts';
import { islandView } from './island-view.ts';
import type { Coordinator } from '../../core/coord/index.ts';
import type { RunConfig } from '../../core/api.ts';
import type { RunHistory } from './history.ts';
import { checkpointFile } from './checkpoint.ts';
import type { RunStore } from './store.ts';
import type { TextDataset } from '../../core/data/dataset.ts';
import { type Result, err, ok } from '../../core/result.ts';
import { EvalService } from './eval-worker.ts';

/** What the views read of the run (server/run/run.ts's Run; named here so neither file imports the other). */
export interface ViewedRun {
  readonly coord: Coordinator;
  readonly config: RunConfig;
  readonly store: RunStore;
  readonly history: RunHistory;
  readonly connected: ReadonlyMap<string, number>;
  readonly paramCount: number;
  readonly durableTokens: number;
  readonly bytesIn: number;
  readonly bytesOut: number;
  readonly dataset: TextDataset;
  /** Butterfly mixing's figures (null: the server does not mix). */
  readonly mixStatus: (() => MixStatus) | null;
  islandsOnline(): number;
  durableParams(): { version: number; hash: string; params: Float32Array };
}

/** The islands copy is refreshed at most this often (ms)... */
export const ISLANDS_REFRESH_MS = 1000;
/** ...or this often once an island connected or left, or a version became durable (what an acked island and its page look for at once). */
const ISLANDS_CHANGED_MS = 50;
/** The largest page of GET /api/islands. */
export const ISLANDS_PAGE_MAX = 1000;

export class RunViews {
  private readonly run: ViewedRun;
  private islandsCache: { at: number; list: IslandView[] } | null = null;
  private islandsChanged = false;
  private modelCache: { version: number; hash: string; bytes: Uint8Array } | null = null;
  private sampler: EvalService | null = null;
  private sampling = false;

  constructor(run: ViewedRun) {
    this.run = run;
  }

  status(now = Date.now()): RunStatus {
    const run = this.run;
    const t = run.coord.totals();
    const d = run.durableParams();
    const last = run.history.last;
    return {
      run: run.config.name,
      mode: run.coord.mode,
      version: d.version,
      hash: d.hash,
      paused: run.coord.isPaused,
      done: run.coord.isDone,
      islandsOnline: run.islandsOnline(),
      tokensTotal: run.durableTokens,
      tokensPerSec: run.history.tokensPerSec(now),
      evalLoss: run.history.lastEval?.loss ?? null,
      evalVersion: run.history.lastEval?.version ?? null,
      trainLoss: last?.trainLoss ?? null,
      bytesIn: run.bytesIn,
      bytesOut: run.bytesOut,
      bytesDataParallel:
        (run.durableTokens / (run.config.coordinator.batchSize * run.config.coordinator.seqLen)) * 4 * run.paramCount,
      bytesPerUpdate: this.meanUpdateBytes(),
      goodput: t.goodput,
      accepted: t.accepted,
      rejected: t.rejected,
      time: now,
      ...(run.mixStatus ? { mix: run.mixStatus() } : {}),
    };
  }

  /** Every island's view, at most ISLANDS_REFRESH_MS old (ISLANDS_CHANGED_MS after a connect or leave). */
  islands(now = Date.now()): IslandView[] {
    const c = this.islandsCache;
    if (c && now >= c.at && now - c.at < (this.islandsChanged ? ISLANDS_CHANGED_MS : ISLANDS_REFRESH_MS)) return c.list;
    const run = this.run;
    const list = run.coord
      .islands()
      .map((r) => islandView(r, run.connected.has(r.id), run.history.islands.summary(r.id)));
    this.islandsCache = { at: now, list };
    this.islandsChanged = false;
    return list;
  }

  /** An island connected or left, or a version became durable: the next read after ISLANDS_CHANGED_MS takes a fresh copy. */
  islandsMoved(): void {
    this.islandsChanged = true;
  }

  /** One page of the islands (GET /api/islands?offset&limit). */
  islandsPage(offset = 0, limit = ISLANDS_PAGE_MAX): IslandsResponse {
    const all = this.islands();
    const page = all.slice(offset, offset + Math.min(limit, ISLANDS_PAGE_MAX));
    const next = offset + page.length < all.length ? offset + page.length : null;
    return { islands: page, total: all.length, offset, next };
  }

  /** The islands copy is stale now (an admin changed a record). */
  invalidate(): void {
    this.islandsCache = null;
  }

  /** History points after `since` (a version), at most `limit` (the newest). */
  historySince(since = -1, limit = 100_000): HistoryPoint[] {
    return this.run.history.since(since, limit);
  }

  /** History points changed since the last call (new versions, late eval losses): the dashboard stream. */
  takeDirtyHistory(): HistoryPoint[] {
    return this.run.history.takeDirty();
  }

  /** Checkpoints on disk, newest first: GET /api/checkpoints. */
  checkpoints(): CheckpointInfo[] {
    const { store, config } = this.run;
    return store.listCheckpoints().map((c) => ({
      version: c.version,
      hash: store.checkpointHash(c),
      bytes: c.bytes,
      time: Math.round(c.mtimeMs),
      url: `/api/checkpoints/${c.version}`,
      file: checkpointFile(config.name, c.version),
      hfUrl: `/api/checkpoints/${c.version}/hf`,
      hfFile: checkpointFile(config.name, c.version, 'hf'),
    }));
  }

  /** The bytes of the checkpoint of `version`, or null when it is not kept. */
  checkpointBytes(version: number): Uint8Array | null {
    return this.run.store.readCheckpoint(version);
  }

  /** θ at the durable version as safetensors (cached per version): GET /api/model. */
  modelBytes(): { version: number; hash: string; bytes: Uint8Array } {
    const d = this.run.durableParams();
    if (!this.modelCache || this.modelCache.version !== d.version || this.modelCache.hash !== d.hash) {
      const { config } = this.run;
      const bytes = encodeCheckpoint({
        config: config.model,
        params: d.params,
        extra: {},
        meta: { version: String(d.version), hash: d.hash, tokens: String(this.run.durableTokens), run: config.name },
      });
      this.modelCache = { version: d.version, hash: d.hash, bytes };
    }
    return this.modelCache;
  }

  /** Mean bytes of the last (up to 8) durable update frames; null before the first. */
  private meanUpdateBytes(): number | null {
    const v = this.run.durableParams().version;
    const r = this.run.coord.updatesSince(Math.max(0, v - 8));
    const ups = r.ok ? r.value.filter((u) => u.version <= v) : [];
    return ups.length ? ups.reduce((a, u) => a + u.frame.length, 0) / ups.length : null;
  }

  /** Text from the durable model, in a worker (one request at a time): GET /api/sample. */
  async sample(
    tokens: number,
    prompt: Uint8Array,
    seed: number,
    temperature: number,
  ): Promise<Result<{ version: number; bytes: Uint32Array }>> {
    if (this.sampling) return err('E_BUSY', 'a sample is being generated: try again in a moment');
    this.sampling = true;
    try {
      this.sampler ??= new EvalService({
        config: this.run.config.model,
        heldOut: this.run.dataset.heldOut,
        batchSize: 1,
        nBatches: 1,
      });
      const d = this.run.durableParams();
      const bytes = await this.sampler.sample(d.params, { prompt, tokens, temperature, seed });
      return ok({ version: d.version, bytes });
    } catch (e) {
      return err('E_SAMPLE', (e as Error).message);
    } finally {
      this.sampling = false;
    }
  }

  async close(): Promise<void> {
    await this.sampler?.close();
  }
}
