// The run as the REST API and the dashboard stream read it: every answer is a core/api.ts shape.
// Nothing here changes the run. Island views are served from a copy refreshed at most once a
// second, so a client polling `/api/islands` costs a page of that copy, not a walk over the records.

import { encodeCheckpoint } from '../../core/checkpoint.ts';
import { crc32 } from '../../core/codec/crc32.ts';
import type {
  CheckpointInfo,
  HistoryPoint,
  IslandView,
  IslandsResponse,
  ModelManifest,
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
import type { TokenArray } from '../../core/data/tokenizer.ts';
import type { DurableTheta } from './durable.ts';
import type { Traffic } from './islands.ts';
import { type Result, err, ok } from '../../core/result.ts';
import { EvalService } from './eval-worker.ts';

/** The run's parts the views read (run.ts builds them). */
export interface ViewsParts {
  coord: Coordinator;
  /** The run config now (the operator may change its knobs). */
  config: () => RunConfig;
  store: RunStore;
  history: RunHistory;
  /** Connected island sockets by island id (islands.ts). */
  connected: ReadonlyMap<string, number>;
  traffic: Readonly<Traffic>;
  durable: DurableTheta;
  dataset: TextDataset;
}

/** The islands copy is refreshed at most this often (ms)... */
export const ISLANDS_REFRESH_MS = 1000;
/**
 * ...or this often once an island connected or left, or a version
 * became durable (what an acked island and its page look for at once).
 */
const ISLANDS_CHANGED_MS = 50;
/** θ's chunk in GET /api/model/manifest unless the run sets limits.modelChunkBytes: 4 MiB. */
export const MODEL_CHUNK_BYTES = 4 * 1024 * 1024;
/** The largest page of GET /api/islands. */
export const ISLANDS_PAGE_MAX = 1000;

/** θ's safetensors file at one durable version, and its manifest once asked. */
export interface ModelFile {
  version: number;
  hash: string;
  bytes: Uint8Array;
  manifest?: ModelManifest;
}

export class RunViews {
  private readonly run: ViewsParts;
  private islandsCache: { at: number; list: IslandView[] } | null = null;
  private islandsChanged = false;
  private modelCache: ModelFile | null = null;
  private sampler: EvalService | null = null;
  private sampling = false;

  constructor(parts: ViewsParts) {
    this.run = parts;
  }

  /** The run's status; `mix`: butterfly mixing's figures, where the server mixes (server/gateway/mix.ts). */
  status(now = Date.now(), mix?: () => MixStatus): RunStatus {
    const run = this.run;
    const cfg = run.config();
    const t = run.coord.totals();
    const d = run.durable.params();
    const tokens = run.durable.totalTokens;
    const last = run.history.last;
    return {
      run: cfg.name,
      mode: run.coord.mode,
      version: d.version,
      hash: d.hash,
      paused: run.coord.isPaused,
      done: run.coord.isDone,
      islandsOnline: run.connected.size,
      tokensTotal: tokens,
      tokensPerSec: run.history.tokensPerSec(now),
      evalLoss: run.history.lastEval?.loss ?? null,
      evalVersion: run.history.lastEval?.version ?? null,
      trainLoss: last?.trainLoss ?? null,
      bytesIn: run.traffic.bytesIn,
      bytesOut: run.traffic.bytesOut,
      bytesDataParallel: (tokens / (cfg.coordinator.batchSize * cfg.coordinator.seqLen)) * 4 * run.coord.paramCount,
      bytesPerUpdate: this.meanUpdateBytes(),
      goodput: t.goodput,
      accepted: t.accepted,
      rejected: t.rejected,
      shortRounds: t.shortRounds ?? 0,
      trustClips: t.trustClips ?? 0,
      time: now,
      ...(mix ? { mix: mix() } : {}),
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

  /**
   * An island connected or left, or a version became durable:
   * the next read after ISLANDS_CHANGED_MS takes a fresh copy.
   */
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
    const { store } = this.run;
    const config = this.run.config();
    const list = store.listCheckpoints();
    const kept = store.keptFor(list);
    return list.map((c) => ({
      version: c.version,
      hash: store.checkpointHash(c),
      bytes: c.bytes,
      time: Math.round(c.mtimeMs),
      url: `/api/checkpoints/${c.version}`,
      file: checkpointFile(config.name, c.version),
      hfUrl: `/api/checkpoints/${c.version}/hf`,
      hfFile: checkpointFile(config.name, c.version, 'hf'),
      keptFor: kept.get(c.version) ?? [],
    }));
  }

  /** The bytes of the checkpoint of `version`, or null when it is not kept. */
  checkpointBytes(version: number): Uint8Array | null {
    return this.run.store.readCheckpoint(version);
  }

  /** θ at the durable version as safetensors (cached per version): GET /api/model. */
  modelBytes(): ModelFile {
    const d = this.run.durable.params();
    if (!this.modelCache || this.modelCache.version !== d.version || this.modelCache.hash !== d.hash) {
      const config = this.run.config();
      const bytes = encodeCheckpoint({
        config: config.model,
        params: d.params,
        extra: {},
        meta: {
          version: String(d.version),
          hash: d.hash,
          tokens: String(this.run.durable.totalTokens),
          run: config.name,
        },
      });
      this.modelCache = { version: d.version, hash: d.hash, bytes };
    }
    return this.modelCache;
  }

  /** θ's file in chunks of `chunkBytes`, each with its CRC-32 (computed once a version). */
  modelManifest(chunkBytes = MODEL_CHUNK_BYTES): ModelManifest {
    const m = this.modelBytes();
    if (m.manifest?.chunkBytes === chunkBytes) return m.manifest;
    const sums: number[] = [];
    for (let at = 0; at < m.bytes.length; at += chunkBytes) sums.push(crc32(m.bytes.subarray(at, at + chunkBytes)));
    m.manifest = { version: m.version, hash: m.hash, bytes: m.bytes.length, chunkBytes, crc32: sums };
    return m.manifest;
  }

  /** Mean bytes of the last (up to 8) durable update frames; null before the first. */
  private meanUpdateBytes(): number | null {
    // from the history: the coordinator's catch-up refuses a span whose frames outweigh θ (8 int8 frames do)
    return this.run.history.meanUpdateBytes(this.run.durable.version);
  }

  /** Text from the durable model, in a worker (one request at a time): GET /api/sample. */
  async sample(
    tokens: number,
    prompt: TokenArray,
    seed: number,
    temperature: number,
  ): Promise<Result<{ version: number; ids: Uint32Array }>> {
    if (this.sampling) return err('E_BUSY', 'a sample is being generated: try again in a moment');
    this.sampling = true;
    try {
      this.sampler ??= new EvalService({
        config: this.run.config().model,
        heldOut: this.run.dataset.heldOut,
        batchSize: 1,
        nBatches: 1,
      });
      const d = this.run.durable.params();
      const ids = await this.sampler.sample(d.params, { prompt, tokens, temperature, seed });
      return ok({ version: d.version, ids });
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
