// The island ⇄ server protocol: message types, error codes and small validators.
//
// Pure types + constants + tiny pure functions, shared by the coordinator (core/coord), the island
// runtime (client/island), the simulator (server/simulate) and the socket.io gateway, which derives
// its TypeBox schemas from these shapes.
//
// One island's life, in messages:
//
//   island → server   hello {protocolVersion, caps}                 → assignment (or error)
//   island → server   fetchModel                                     → {version, hash, params (f32)}
//   island → server   delta {DeltaMeta, frame (codec bytes)}        → ack   (sent only once durable)
//   server → island   update {UpdateMsg}  (broadcast, one per version v → v+1)
//   island → server   nextAssignment                                 → assignment, when one exists
//   island → server   updates {fromVersion}                          → UpdateMsg[] or "too old"
//   island → server   bye {reason}
//
// Binary payloads (delta frames, update frames, params) travel as Uint8Array / Float32Array.

import type { CodecOptions } from './codec/index.ts';
import { learningRate } from './model/schedule.ts';

/** Bumped on every incompatible change to the messages below. */
export const PROTOCOL_VERSION = 1;

/**
 * Every error code an island can see, with the layer that produces it. Codec codes are passed
 * through from core/codec unchanged (E_TRUNCATED, E_CRC, E_CORRUPT, ...).
 */
export const ErrorCode = {
  // coordinator validation of a delta (core/coord)
  UNKNOWN_ISLAND: 'E_UNKNOWN_ISLAND',
  BANNED: 'E_BANNED',
  WRONG_SIZE: 'E_WRONG_SIZE',
  NON_FINITE: 'E_NON_FINITE',
  STALE: 'E_STALE',
  FUTURE_VERSION: 'E_FUTURE_VERSION',
  DUPLICATE: 'E_DUPLICATE',
  NORM_BOUND: 'E_NORM_BOUND',
  PAUSED: 'E_PAUSED',
  /** The run reached its token budget: no more assignments. Not a failure. */
  DONE: 'E_DONE',
  /** A malformed message (missing field, wrong type, bad number). */
  BAD_REQUEST: 'E_BAD_REQUEST',
  /** hello with a protocol version this server does not speak. */
  PROTOCOL_VERSION: 'E_PROTOCOL_VERSION',
  /** setConfig with an invalid value. */
  BAD_CONFIG: 'E_BAD_CONFIG',
  // codec (core/codec), passed through
  TRUNCATED: 'E_TRUNCATED',
  CRC: 'E_CRC',
  CORRUPT: 'E_CORRUPT',
  BAD_MAGIC: 'E_BAD_MAGIC',
  BAD_HEADER: 'E_BAD_HEADER',
  VERSION: 'E_VERSION',
  // transport / runtime (client/island, server gateway)
  TRANSPORT: 'E_TRANSPORT',
  /** The island's replica hash differs from the server's: it must fetch a snapshot. */
  HASH_MISMATCH: 'E_HASH_MISMATCH',
  /** Catch-up needs updates the server no longer keeps: fetch a snapshot. */
  TOO_OLD: 'E_TOO_OLD',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export type TrainingMode = 'sync' | 'async';
export type EngineKind = 'cpu' | 'webgpu';

/** What an island says about itself in `hello`. */
export interface IslandCaps {
  /** Human-readable name, shown on the dashboard (≤ 64 chars). */
  name?: string;
  /**
   * A stable anonymous id of the contributor (a browser keeps it in localStorage), so credit on
   * the leaderboard adds up across sessions and devices of one volunteer. Never personal data.
   */
  contributorId?: string;
  engine: EngineKind;
  /** Adapter / device description ("cpu", "NVIDIA ...", "google / swiftshader"). */
  adapter?: string;
  /** Measured or benchmarked training throughput, tokens/s. Seeds DyLU before the first delta. */
  tokensPerSec?: number;
  /** Largest micro-batch the island can run; the server never assigns more. */
  maxBatch?: number;
  /** Preferred micro-batch (≤ maxBatch); the server uses it when it fits its own bounds. */
  batchSize?: number;
}

export interface HelloMsg {
  protocolVersion: number;
  caps: IslandCaps;
  /** Rejoin under a previous id (keeps the island's record, stats and data stream). */
  resumeIslandId?: string;
}

/**
 * Inner learning-rate plan for one round. The schedule is global (warmup, then cosine over the
 * run's token budget); the position is where the run is, in tokens in θ, when the round starts,
 * and how far the run advances per inner step of this island, so warmup and cosine continue
 * across rounds and islands of different speeds see the same schedule. Evaluate with
 * `innerLearningRate(plan, i)`.
 */
export interface InnerLrPlan {
  maxLr: number;
  minLr: number;
  /** Linear warmup over the first `warmupTokens` tokens of the run. */
  warmupTokens: number;
  /** Cosine decay from maxLr to minLr ends at this many tokens; 0 = open-ended (no decay). */
  totalTokens: number;
  /** Run position (tokens in θ) at inner step 0 of this round. */
  tokensStart: number;
  /** Run tokens that pass per inner step of this island (all islands together). */
  tokensPerStep: number;
  /** Per-island warmup for a fresh AdamW state: lr × min(1, (localStepsDone + i + 1) / localWarmupSteps). */
  localWarmupSteps: number;
  localStepsDone: number;
}

/** The inner learning rate at step i (0-based) of the round described by `plan`. */
export function innerLearningRate(plan: InnerLrPlan, i: number): number {
  const schedule = { maxLr: plan.maxLr, minLr: plan.minLr, warmup: plan.warmupTokens, total: plan.totalTokens };
  let lr = learningRate(schedule, plan.tokensStart + i * plan.tokensPerStep, plan.tokensPerStep);
  if (plan.localWarmupSteps > 0) lr *= Math.min(1, (plan.localStepsDone + i + 1) / plan.localWarmupSteps);
  return lr;
}

/** Work for one round: train `innerSteps` steps from θ at `baseVersion`, then send Δ. */
export interface Assignment {
  islandId: string;
  mode: TrainingMode;
  /** Sync: the round number. Async: a per-assignment serial. Echo it in DeltaMeta. */
  roundId: number;
  /** Train from θ at this version (its hash is `baseHash`). */
  baseVersion: number;
  baseHash: string;
  innerSteps: number;
  batchSize: number;
  seqLen: number;
  lr: InnerLrPlan;
  gradClip: number;
  /** Batches: sampleBatch(train, batchSize, seqLen, data.seed, data.stream, data.stepStart + i). */
  data: { seed: number; stream: number; stepStart: number };
  /** How to encode Δ (error feedback is kept on the island). */
  codec: CodecOptions;
  /** The largest frame the server accepts (size the transport with it). */
  maxFrameBytes: number;
  /** Async: a delta based more than this many versions back is rejected with E_STALE. */
  maxStaleness: number;
  /** Expected round duration, ms (DyLU's target); informational. */
  targetRoundMs: number;
  /** Server time when the assignment was made, ms. */
  issuedAt: number;
  /**
   * The smallest seq the server will count from this island (its last counted seq + 1). An island
   * that lost its counter (a reloaded tab, a restarted process) continues from here.
   */
  minSeq?: number;
}

/** Metadata sent with each delta frame. */
export interface DeltaMeta {
  islandId: string;
  roundId: number;
  /** The version the island actually trained from. */
  baseVersion: number;
  /** Per-island sequence number, strictly increasing over the island's life (replay guard). */
  seq: number;
  steps: number;
  /** Tokens trained on in this round (steps × batchSize × seqLen). */
  tokens: number;
  lossFirst: number;
  lossLast: number;
  lossMean: number;
  /** Compute time of the inner steps, ms (the server derives tokens/s from it). */
  elapsedMs: number;
}

export type AckStatus = 'applied' | 'rejected';

/** Answer to a delta. Sent only after the update that includes it is durable (or on rejection). */
export interface AckMsg {
  islandId: string;
  seq: number;
  roundId: number;
  status: AckStatus;
  /** The version that includes the delta (applied), or the current version (rejected). */
  version: number;
  error?: { code: string; message: string };
}

/**
 * One outer update v-1 → v, as broadcast to every island. `frame` is the codec frame of the
 * quantized update u; every replica (the server included) does θ ← θ − decode(frame) with
 * `applyUpdate` (core/coord), so all hold the same bits, proven by `hash`.
 */
export interface UpdateMsg {
  version: number;
  prevVersion: number;
  prevHash: string;
  /** hashParams(θ_version). */
  hash: string;
  frame: Uint8Array;
  /** Server time of the update, ms. */
  time: number;
  /** Tokens this update added to θ. */
  tokens: number;
  /** Tokens in θ after this update. */
  totalTokens: number;
  contributors: number;
  /** Token-weighted mean of contributors' mean training loss (NaN if none reported). */
  trainLoss: number;
}

/** Full model download. */
export interface ModelSnapshotMsg {
  version: number;
  hash: string;
  params: Float32Array;
}

export interface ByeMsg {
  islandId: string;
  reason: string;
}

// ---------------------------------------------------------------------------------------------
// Small validators for messages that arrive from the network (the gateway's TypeBox schemas check
// shapes; these check the numbers). Each returns an error message, or null when valid.

const isNonNegInt = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0;
const isFiniteNum = (x: unknown): x is number => typeof x === 'number' && Number.isFinite(x);

export function validateHello(m: unknown): string | null {
  if (typeof m !== 'object' || m === null) return 'hello must be an object';
  const h = m as Partial<HelloMsg>;
  if (!isNonNegInt(h.protocolVersion)) return 'protocolVersion must be a non-negative integer';
  if (typeof h.caps !== 'object' || h.caps === null) return 'caps must be an object';
  const c = h.caps;
  if (c.engine !== 'cpu' && c.engine !== 'webgpu') return "caps.engine must be 'cpu' or 'webgpu'";
  if (c.name !== undefined && (typeof c.name !== 'string' || c.name.length > 64)) return 'caps.name must be a string of ≤ 64 chars';
  if (c.tokensPerSec !== undefined && !(isFiniteNum(c.tokensPerSec) && c.tokensPerSec > 0)) return 'caps.tokensPerSec must be > 0';
  if (c.maxBatch !== undefined && !(isNonNegInt(c.maxBatch) && c.maxBatch > 0)) return 'caps.maxBatch must be a positive integer';
  if (c.batchSize !== undefined && !(isNonNegInt(c.batchSize) && c.batchSize > 0)) return 'caps.batchSize must be a positive integer';
  if (h.resumeIslandId !== undefined && typeof h.resumeIslandId !== 'string') return 'resumeIslandId must be a string';
  return null;
}

export function validateDeltaMeta(m: unknown): string | null {
  if (typeof m !== 'object' || m === null) return 'delta meta must be an object';
  const d = m as Partial<DeltaMeta>;
  if (typeof d.islandId !== 'string' || d.islandId.length === 0) return 'islandId must be a non-empty string';
  for (const k of ['roundId', 'baseVersion', 'seq', 'steps', 'tokens'] as const) {
    if (!isNonNegInt(d[k])) return `${k} must be a non-negative integer`;
  }
  for (const k of ['lossFirst', 'lossLast', 'lossMean', 'elapsedMs'] as const) {
    if (typeof d[k] !== 'number') return `${k} must be a number`;
  }
  if (!(d.elapsedMs! >= 0)) return 'elapsedMs must be ≥ 0';
  return null;
}
