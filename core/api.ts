// The contract between the server and its pages: what the REST API under /api returns and what the
// dashboard stream (socket.io namespace /dashboard) emits. Each response is a TypeBox schema and its
// type is derived from it (Static<>): the server declares the schemas as its routes' response
// schemas (fast-json-stringify writes only what they declare), and the pages read the types, so a
// field missing here is missing on the wire and a change breaks both at compile time.

import { Type, type Static, type TSchema } from '@sinclair/typebox';
import type { CoordinatorConfig, IslandStatus } from './coord/index.ts';
import type { GPTConfig } from './model/config.ts';
import type { RunConfig } from './run-config.ts';

/** The run config (its schema and knobs: core/run-config.ts), as GET /api/run carries it. */
export type { RunConfig } from './run-config.ts';

const Nullable = <T extends TSchema>(t: T) => Type.Union([t, Type.Null()]);
/** An open object written as it is (JSON.stringify): shapes defined and checked elsewhere. */
const Open = <T>(description: string) => Type.Unsafe<T>(Type.Object({}, { additionalProperties: true, description }));
const Counts = Type.Record(Type.String(), Type.Number());

/** GET /api/run: what the run is (fixed for its lifetime except the runtime knobs). */
export const RunInfoSchema = Type.Object({
  name: Type.String(),
  /** The volunteer page's headline (the name, for runs stored before titles existed). */
  title: Type.String(),
  description: Type.String(),
  preset: Type.Unsafe<RunConfig['preset']>(Type.String()),
  model: Type.Unsafe<GPTConfig>(
    Type.Object({
      vocabSize: Type.Integer(),
      blockSize: Type.Integer(),
      nLayer: Type.Integer(),
      nHead: Type.Integer(),
      nEmbd: Type.Integer(),
    }),
  ),
  params: Type.Integer(),
  data: Type.Object({
    name: Type.String(),
    trainBytes: Type.Integer(),
    heldOutBytes: Type.Integer(),
    /** A shard run (serve --data DIR): its shards, held-out one included (GET /api/data/index); absent otherwise. */
    shards: Type.Optional(Type.Integer()),
  }),
  mode: Type.Unsafe<CoordinatorConfig['mode']>(Type.String()),
  batch: Type.Integer(),
  seqLen: Type.Integer(),
  /** null: the round time sets each island's inner steps (DyLU). */
  innerSteps: Nullable(Type.Integer()),
  targetRoundMs: Type.Number(),
  codec: Open<CoordinatorConfig['uplink']>('the uplink codec options (core/codec)'),
  outer: Open<CoordinatorConfig['outer']>('the outer optimizer (core/coord)'),
  /** Expected bytes of one island's upload and download per round. */
  bytesPerRound: Type.Object({ up: Type.Number(), down: Type.Number() }),
  modelBytes: Type.Number(),
  maxFrameBytes: Type.Number(),
  protocolVersion: Type.Integer(),
  config: Open<RunConfig>('the run config as stored in config.json (server/run/config.ts checks it)'),
});
export type RunInfo = Static<typeof RunInfoSchema>;

/** Butterfly mixing on the server (server/gateway/mix.ts), when it mixes. */
export const MixStatusSchema = Type.Object({
  k: Type.Integer(),
  groups: Type.Integer(),
  mixedGroups: Type.Integer(),
  /** Members of the mixed groups whose contribution was accepted (mixedMembers / mixedGroups: the mean group size). */
  mixedMembers: Type.Integer(),
  /** How long a ready island now waits for a group of k (ms): formWaitMs, or its share of the measured round period. */
  formWaitMs: Type.Integer(),
  /** Groups called off (a member dropped, stalled or failed its exchange): their members uploaded directly. */
  fallbacks: Type.Integer(),
  /**
   * Server bytes saved by mixing, net: the update pieces' savings (exact: k − 1 frames per group and
   * update), plus (k − 1) × each mixed group's fragment bytes (a member's own Δ is about its k
   * fragments' worth), less the spot checks, replays and signalling the server carried.
   */
  savedBytes: Type.Number(),
  /** Signalling the server relayed (SDP offers and answers, both ways, and the group plans), bytes. */
  signallingBytes: Type.Integer(),
  /**
   * Butterfly partner pairs of the groups formed: signalled afresh, and over a data channel kept from an earlier group.
   */
  pairsSignalled: Type.Integer(),
  pairsReused: Type.Integer(),
  /** Islands that waited for a group in vain and uploaded directly. */
  expired: Type.Integer(),
  /**
   * The downlink: rings served pieces (one per ring and version),
   * rings whose exchange failed, pairs signalled for rings.
   */
  rings: Type.Integer(),
  ringsFailed: Type.Integer(),
  ringPairsSignalled: Type.Integer(),
  /** Groups formed while each of the last versions was current (oldest first). */
  groupsByVersion: Type.Array(Type.Object({ version: Type.Integer(), groups: Type.Integer() })),
});
export type MixStatus = Static<typeof MixStatusSchema>;

/** GET /api/status and every dashboard tick: the run right now. */
export const RunStatusSchema = Type.Object({
  run: Type.String(),
  mode: Type.String(),
  version: Type.Integer(),
  hash: Type.String(),
  paused: Type.Boolean(),
  done: Type.Boolean(),
  islandsOnline: Type.Integer(),
  tokensTotal: Type.Number(),
  /** The newest history point's tokensPerSec; 0 once no update came for a minute. */
  tokensPerSec: Type.Number(),
  evalLoss: Nullable(Type.Number()),
  evalVersion: Nullable(Type.Integer()),
  trainLoss: Nullable(Type.Number()),
  /** Bytes received from and sent to islands since the run began. */
  bytesIn: Type.Number(),
  bytesOut: Type.Number(),
  /** What data-parallel training would have uploaded for tokensTotal: one fp32 gradient per inner step. */
  bytesDataParallel: Type.Number(),
  /**
   * Mean bytes of the last few update frames islands download (the downlink as sent, deflate
   * included: RunInfo.bytesPerRound.down is the undeflated bound); null before the first update.
   */
  bytesPerUpdate: Nullable(Type.Number()),
  goodput: Type.Number(),
  accepted: Type.Number(),
  rejected: Counts,
  /** Sync rounds closed with fewer than minContributors Δs (HistoryPoint.shortClose says why). */
  shortRounds: Type.Integer(),
  /** Versions whose outer step the trust region clipped (HistoryPoint.trustGain). */
  trustClips: Type.Integer(),
  /** Server time of this status, ms since the epoch. */
  time: Type.Number(),
  /** Butterfly mixing (absent: the server does not mix). */
  mix: Type.Optional(MixStatusSchema),
});
export type RunStatus = Static<typeof RunStatusSchema>;

/** GET /api/islands (one row each) and the islands changed since the last dashboard tick. */
export const IslandViewSchema = Type.Object({
  id: Type.String(),
  name: Type.String(),
  contributorId: Type.String(),
  engine: Type.String(),
  adapter: Type.String(),
  /** Storage precision it reported (f32, f16, bf16). */
  numerics: Type.String(),
  /** Devices behind it (data-parallel inside the island). */
  devices: Type.Integer(),
  speed: Nullable(Type.Number()),
  tokens: Type.Number(),
  tokensSubmitted: Type.Number(),
  accepted: Type.Number(),
  rejected: Type.Number(),
  rejectedByCode: Counts,
  lastSeen: Type.Number(),
  /** 'online' only while connected. */
  status: Type.Unsafe<IslandStatus>(Type.String()),
  connected: Type.Boolean(),
  innerSteps: Type.Number(),
  batchSize: Type.Number(),
  staleness: Type.Number(),
  joinedAt: Type.Number(),
  /** Mean cosine of its last accepted Δs with their rounds' merged Δ (sync; null: none yet). */
  cosine: Nullable(Type.Number()),
  /** Mean of their ‖Δ‖/√steps ÷ the round's median (1: typical; null: none yet). */
  normRatio: Nullable(Type.Number()),
  /** Validators' verdicts on its deltas (verified work; absent until the first). */
  audits: Type.Optional(Type.Object({ passed: Type.Number(), failed: Type.Number() })),
});
export type IslandView = Static<typeof IslandViewSchema>;

/** One accepted Δ of an island, as it went into an outer update. */
export const IslandContributionSchema = Type.Object({
  version: Type.Integer(),
  time: Type.Number(),
  staleness: Type.Number(),
  tokens: Type.Number(),
  /** Its share of the update. */
  weight: Type.Number(),
  cosine: Nullable(Type.Number()),
  normRatio: Nullable(Type.Number()),
});
export type IslandContribution = Static<typeof IslandContributionSchema>;

/** GET /api/islands/:id: one island and its accepted Δs (the newest last). */
export const IslandDetailSchema = Type.Object({
  island: IslandViewSchema,
  contributions: Type.Array(IslandContributionSchema),
});
export type IslandDetail = Static<typeof IslandDetailSchema>;

/** One point of the dashboard's charts (one per version). */
export const HistoryPointSchema = Type.Object({
  version: Type.Integer(),
  /** When the update was applied, ms since the epoch. */
  time: Type.Number(),
  /** Tokens this update added; totalTokens: the running total in θ. */
  tokens: Type.Number(),
  totalTokens: Type.Number(),
  /** Tokens into θ per second over the minute up to this point. */
  tokensPerSec: Type.Number(),
  trainLoss: Nullable(Type.Number()),
  evalLoss: Nullable(Type.Number()),
  islandsOnline: Type.Number(),
  contributors: Type.Number(),
  /** Δ bytes received during this version and the size of this update's frame. */
  bytesIn: Type.Number(),
  bytesOut: Type.Number(),
  /** Running totals of all bytes received from and sent to islands, as of this point. */
  bytesInTotal: Type.Number(),
  bytesOutTotal: Type.Number(),
  /** Accepted Δs of this update by staleness τ (index); the last bucket holds τ ≥ its index. */
  stalenessHist: Type.Array(Type.Number()),
  accepted: Type.Number(),
  /** Δs rejected during this version, by error code. */
  rejected: Counts,
  /** fp32 bytes of the accepted Δs ÷ their frame bytes (0: none accepted). */
  compressionRatio: Type.Number(),
  goodput: Type.Number(),
  updateNorm: Type.Number(),
  /**
   * Present when this version's sync round closed with fewer than minContributors Δs, and why: its
   * live members were all in past the grace ('members-in'), the round timed out, or none was alive.
   */
  shortClose: Type.Optional(Type.String()),
  /**
   * Present when the outer step's trust region acted on this version: the gain γ < 1 the merged Δ
   * took, so that ‖u‖ (updateNorm) stayed at its limit, a multiple of the recent median.
   */
  trustGain: Type.Optional(Type.Number()),
  /** The outer lr of this update's step and the inner lr at its token position (null: a run logged before lrs were). */
  outerLr: Nullable(Type.Number()),
  innerLr: Nullable(Type.Number()),
  /** Tokens of this update by the contributors' engine ("cpu", "webgpu"). */
  tokensByEngine: Counts,
  /** tokensByEngine over the time since the previous point: the dashboard's stacked tokens/s. */
  tokensPerSecByEngine: Counts,
});
export type HistoryPoint = Static<typeof HistoryPointSchema>;

/** GET /api/islands?offset&limit: one page (at most 1,000) of the islands, in the order the server keeps them. */
export const IslandsResponseSchema = Type.Object({
  islands: Type.Array(IslandViewSchema),
  /** Islands in all. */
  total: Type.Integer(),
  offset: Type.Integer(),
  /** The offset of the next page, or null after the last. */
  next: Nullable(Type.Integer()),
});
export type IslandsResponse = Static<typeof IslandsResponseSchema>;

/**
 * A change of the run's knobs (PATCH /api/admin/config): the version from which it holds, and the knobs' new values.
 */
export const ConfigChangeSchema = Type.Object({
  version: Type.Integer(),
  /** ms since the epoch. */
  time: Type.Number(),
  changes: Type.Record(Type.String(), Type.Unknown()),
});
export type ConfigChange = Static<typeof ConfigChangeSchema>;

/** GET /api/history?since&limit: the points, and every knob change of the run (the charts' markers). */
export const HistoryResponseSchema = Type.Object({
  points: Type.Array(HistoryPointSchema),
  configChanges: Type.Array(ConfigChangeSchema),
});
export type HistoryResponse = Static<typeof HistoryResponseSchema>;

/** One row of GET /api/checkpoints. */
export const CheckpointInfoSchema = Type.Object({
  version: Type.Integer(),
  /** null: the file could not be read. */
  hash: Nullable(Type.String()),
  bytes: Type.Number(),
  time: Type.Number(),
  /** The safetensors file, and the name it downloads as. */
  url: Type.String(),
  file: Type.String(),
  /** The same checkpoint as a transformers GPT-2 folder in a tar archive (atoll export --format hf). */
  hfUrl: Type.String(),
  hfFile: Type.String(),
  /** Why the keep policy keeps it (server/run/keep-policy.ts): 'last', 'every', 'best'. */
  keptFor: Type.Array(Type.String()),
});
export type CheckpointInfo = Static<typeof CheckpointInfoSchema>;

/** GET /api/checkpoints. */
export const CheckpointsResponseSchema = Type.Object({ checkpoints: Type.Array(CheckpointInfoSchema) });
export type CheckpointsResponse = Static<typeof CheckpointsResponseSchema>;

/** GET /api/sample. */
export const SampleResponseSchema = Type.Object({
  version: Type.Integer(),
  prompt: Type.String(),
  text: Type.String(),
  tokens: Type.Integer(),
});
export type SampleResponse = Static<typeof SampleResponseSchema>;

/** GET /healthz: up, and the durable version it serves. */
export const HealthSchema = Type.Object({ ok: Type.Literal(true), version: Type.Integer(), hash: Type.String() });
export type Health = Static<typeof HealthSchema>;

/** The error body of every failed request. */
export const ApiErrorSchema = Type.Object({ error: Type.Object({ code: Type.String(), message: Type.String() }) });
export type ApiError = Static<typeof ApiErrorSchema>;

/**
 * One 'tick' on /dashboard, every periodMs (the page's heartbeat):
 * the first holds only the status; later ones what changed.
 */
export interface DashboardTick {
  status: RunStatus;
  periodMs: number;
  islands?: { changed: IslandView[]; removed: string[] };
  history?: HistoryPoint[];
}

/**
 * GET /api/contributors/:id: one contributor's credit, so a
 * volunteer's page shows it after a reload or on another device.
 */
export const ContributorCreditSchema = Type.Object({
  contributorId: Type.String(),
  /** The name the leaderboard shows (null: nothing from this contributor yet). */
  name: Nullable(Type.String()),
  /** Tokens in this contributor's Δs merged into θ, and all tokens computed (merged or not). */
  tokens: Type.Number(),
  tokensComputed: Type.Number(),
  accepted: Type.Number(),
  rejected: Type.Number(),
  islands: Type.Integer(),
  /** 1-based place on the leaderboard (by merged tokens) among `contributors`; null with no merged tokens. */
  rank: Nullable(Type.Integer()),
  contributors: Type.Integer(),
});
export type ContributorCredit = Static<typeof ContributorCreditSchema>;

/** GET /api/data/index (a shard run, `serve --data DIR`): its shards; headerBytes: 1,024 (llm.c's) or 0 (nanoGPT's). */
export const DataIndexSchema = Type.Object({
  format: Type.Literal('atoll-shards'),
  version: Type.Literal(1),
  tokenizer: Type.String(),
  vocabSize: Type.Integer(),
  heldOut: Type.String(),
  /** Where the shards are fetched: <url>/<name> (`serve --data-url`); absent: /api/data/shards/<name> here. */
  url: Type.Optional(Type.String()),
  shards: Type.Array(
    Type.Object({
      name: Type.String(),
      tokens: Type.Integer(),
      bytes: Type.Integer(),
      headerBytes: Type.Integer(),
      sha256: Type.Optional(Type.String()),
    }),
  ),
});
export type DataIndex = Static<typeof DataIndexSchema>;

/** GET /api/data (a shard run): the range ledger (core/coord/data-ranges.ts) and the shard bytes served. */
const RangeRecordSchema = Type.Object({
  islandId: Type.String(),
  roundId: Type.Integer(),
  epoch: Type.Integer(),
  shard: Type.String(),
  offset: Type.Integer(),
  length: Type.Integer(),
});

export const DataStatusSchema = Type.Object({
  epoch: Type.Integer(),
  epochsDone: Type.Integer(),
  epochProgress: Type.Number(),
  trainTokens: Type.Integer(),
  skipped: Type.Integer(),
  bytesServed: Type.Integer(),
  shards: Type.Array(Type.Object({ name: Type.String(), tokens: Type.Integer(), trained: Type.Integer() })),
  /** `submitted`: its Δ is accepted and waits in the open round or merge window (the island leaving keeps it). */
  inFlight: Type.Array(Type.Composite([RangeRecordSchema, Type.Object({ submitted: Type.Boolean() })])),
  /** The last 256 ranges trained (what a kept Δ trained of its range), oldest first. */
  recent: Type.Array(RangeRecordSchema),
});
export type DataStatus = Static<typeof DataStatusSchema>;

/**
 * GET /api/model/manifest: θ's safetensors file (GET /api/model) cut in chunks of `chunkBytes` (the last
 * one shorter), each with its CRC-32 (core/codec/crc32.ts), so a page fetches it by Range and checks every
 * chunk. `hash` is the ETag of GET /api/model at `version`: sent as If-Match, a chunk of another version is 412.
 */
export const ModelManifestSchema = Type.Object({
  version: Type.Integer(),
  hash: Type.String(),
  bytes: Type.Integer(),
  chunkBytes: Type.Integer(),
  crc32: Type.Array(Type.Integer()),
});
export type ModelManifest = Static<typeof ModelManifestSchema>;
