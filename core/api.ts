// The contract between the server and its pages: what the REST API under /api returns and what the
// dashboard stream (socket.io namespace /dashboard) emits. Types only; the server produces these
// shapes and the dashboard and volunteer pages read them, so a change here breaks both at compile time.

import type { CoordinatorConfig, IslandStatus } from './coord/index.ts';
import type { GPTConfig, PresetName } from './model/config.ts';

/** The run's configuration as stored in <run-dir>/config.json. */
export interface RunConfig {
  /** The run folder's name ([A-Za-z0-9_.-]); `title` is the headline people read. */
  name: string;
  title: string;
  description: string;
  preset: PresetName | 'custom';
  model: GPTConfig;
  /** Corpus: 'moby-dick' (bundled) or a path to a .txt file / folder of .txt files. */
  data: string;
  /** θ init seed. */
  seed: number;
  coordinator: CoordinatorConfig;
  eval: { batches: number; batchSize: number };
  checkpoints: { keep: number };
  limits: {
    /** hello messages per IP per minute (socket.io). */
    helloPerMinute: number;
    /** REST requests per IP per minute. */
    restPerMinute: number;
    /** Concurrent island connections. */
    maxIslands: number;
    /** events.jsonl is rotated past this many bytes (startup reads only the current file). */
    maxLogBytes: number;
    /** Proof of work a new island identity costs: leading zero bits of SHA-256 (0: none asked). Absent: 16. */
    powBits?: number;
    /** New island identities per address per hour. Absent: 60. */
    newIslandsPerHour?: number;
  };
  /** Origins allowed besides the server's own (CORS and socket.io); empty = closed. */
  allowOrigins: string[];
}

/** GET /api/run: what the run is (fixed for its lifetime except the runtime knobs). */
export interface RunInfo {
  name: string;
  /** The volunteer page's headline (the name, for runs stored before titles existed). */
  title: string;
  description: string;
  preset: RunConfig['preset'];
  model: GPTConfig;
  params: number;
  data: { name: string; trainBytes: number; heldOutBytes: number };
  mode: CoordinatorConfig['mode'];
  batch: number;
  seqLen: number;
  /** null: the round time sets each island's inner steps (DyLU). */
  innerSteps: number | null;
  targetRoundMs: number;
  codec: CoordinatorConfig['uplink'];
  outer: CoordinatorConfig['outer'];
  /** Expected bytes of one island's upload and download per round. */
  bytesPerRound: { up: number; down: number };
  modelBytes: number;
  maxFrameBytes: number;
  protocolVersion: number;
  config: RunConfig;
}

/** GET /api/status and every dashboard tick: the run right now. */
export interface RunStatus {
  run: string;
  mode: string;
  version: number;
  hash: string;
  paused: boolean;
  done: boolean;
  islandsOnline: number;
  tokensTotal: number;
  /** The newest history point's tokensPerSec; 0 once no update came for a minute. */
  tokensPerSec: number;
  evalLoss: number | null;
  evalVersion: number | null;
  trainLoss: number | null;
  /** Bytes received from and sent to islands since the run began. */
  bytesIn: number;
  bytesOut: number;
  /** What data-parallel training would have uploaded for tokensTotal: one fp32 gradient per inner step. */
  bytesDataParallel: number;
  /**
   * Mean bytes of the last few update frames islands download (the downlink as sent, deflate
   * included: RunInfo.bytesPerRound.down is the undeflated bound); null before the first update.
   */
  bytesPerUpdate: number | null;
  goodput: number;
  accepted: number;
  rejected: Record<string, number>;
  /** Server time of this status, ms since the epoch. */
  time: number;
}

/** GET /api/islands (one row each) and the islands changed since the last dashboard tick. */
export interface IslandView {
  id: string;
  name: string;
  contributorId: string;
  engine: string;
  adapter: string;
  /** Storage precision it reported (f32, f16, bf16). */
  numerics: string;
  /** Devices behind it (data-parallel inside the island). */
  devices: number;
  speed: number | null;
  tokens: number;
  tokensSubmitted: number;
  accepted: number;
  rejected: number;
  rejectedByCode: Record<string, number>;
  lastSeen: number;
  /** 'online' only while connected. */
  status: IslandStatus;
  connected: boolean;
  innerSteps: number;
  batchSize: number;
  staleness: number;
  joinedAt: number;
  /** Mean cosine of its last accepted Δs with their rounds' merged Δ (sync; null: none yet). */
  cosine: number | null;
  /** Mean of their ‖Δ‖/√steps ÷ the round's median (1: typical; null: none yet). */
  normRatio: number | null;
  /** Validators' verdicts on its deltas (verified work; absent until the first). */
  audits?: { passed: number; failed: number };
}

/** One accepted Δ of an island, as it went into an outer update. */
export interface IslandContribution {
  version: number;
  time: number;
  staleness: number;
  tokens: number;
  /** Its share of the update. */
  weight: number;
  cosine: number | null;
  normRatio: number | null;
}

/** GET /api/islands/:id: one island and its accepted Δs (the newest last). */
export interface IslandDetail {
  island: IslandView;
  contributions: IslandContribution[];
}

/** One point of the dashboard's charts (one per version). */
export interface HistoryPoint {
  version: number;
  /** When the update was applied, ms since the epoch. */
  time: number;
  /** Tokens this update added; totalTokens: the running total in θ. */
  tokens: number;
  totalTokens: number;
  /** Tokens into θ per second over the minute up to this point. */
  tokensPerSec: number;
  trainLoss: number | null;
  evalLoss: number | null;
  islandsOnline: number;
  contributors: number;
  /** Δ bytes received during this version and the size of this update's frame. */
  bytesIn: number;
  bytesOut: number;
  /** Running totals of all bytes received from and sent to islands, as of this point. */
  bytesInTotal: number;
  bytesOutTotal: number;
  /** Accepted Δs of this update by staleness τ (index); the last bucket holds τ ≥ its index. */
  stalenessHist: number[];
  accepted: number;
  /** Δs rejected during this version, by error code. */
  rejected: Record<string, number>;
  /** fp32 bytes of the accepted Δs ÷ their frame bytes (0: none accepted). */
  compressionRatio: number;
  goodput: number;
  updateNorm: number;
  /** Tokens of this update by the contributors' engine ("cpu", "webgpu"). */
  tokensByEngine: Record<string, number>;
  /** tokensByEngine over the time since the previous point: the dashboard's stacked tokens/s. */
  tokensPerSecByEngine: Record<string, number>;
}

/** GET /api/islands?offset&limit: one page (at most 1,000) of the islands, in the order the server keeps them. */
export interface IslandsResponse {
  islands: IslandView[];
  /** Islands in all. */
  total: number;
  offset: number;
  /** The offset of the next page, or null after the last. */
  next: number | null;
}

/** GET /api/history?since&limit. */
export interface HistoryResponse { points: HistoryPoint[] }

/** One row of GET /api/checkpoints. */
export interface CheckpointInfo {
  version: number;
  /** null: the file could not be read. */
  hash: string | null;
  bytes: number;
  time: number;
  /** The safetensors file, and the name it downloads as. */
  url: string;
  file: string;
  /** The same checkpoint as a transformers GPT-2 folder in a tar archive (atoll export --format hf). */
  hfUrl: string;
  hfFile: string;
}

/** GET /api/checkpoints. */
export interface CheckpointsResponse { checkpoints: CheckpointInfo[] }

/** GET /api/sample. */
export interface SampleResponse {
  version: number;
  prompt: string;
  text: string;
  tokens: number;
}

/** The error body of every failed request. */
export interface ApiError { error: { code: string; message: string } }

/** One 'tick' on /dashboard, every periodMs (the page's heartbeat): the first holds only the status; later ones what changed. */
export interface DashboardTick {
  status: RunStatus;
  periodMs: number;
  islands?: { changed: IslandView[]; removed: string[] };
  history?: HistoryPoint[];
}

/** GET /api/contributors/:id: one contributor's credit, so a volunteer's page shows it after a reload or on another device. */
export interface ContributorCredit {
  contributorId: string;
  /** The name the leaderboard shows (null: nothing from this contributor yet). */
  name: string | null;
  /** Tokens in this contributor's Δs merged into θ, and all tokens computed (merged or not). */
  tokens: number;
  tokensComputed: number;
  accepted: number;
  rejected: number;
  islands: number;
  /** 1-based place on the leaderboard (by merged tokens) among `contributors`; null with no merged tokens. */
  rank: number | null;
  contributors: number;
}
