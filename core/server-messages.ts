// The server's answers and pushes to an island (core/protocol.ts has the island's messages and the
// error codes, and re-exports these): the hello answer, the assignment with its inner lr plan, the
// ack, the update and the model snapshot.

import type { CodecOptions } from './codec/index.ts';
import { learningRate } from './model/schedule.ts';

export type TrainingMode = 'sync' | 'async';

/** The answer to `hello`. */
export interface HelloAnswer {
  islandId: string;
  /** Send it back with resumeIslandId to rejoin under this id after a reconnect or restart. */
  resumeToken: string;
  /** null: no work right now; ask `nextAssignment`, which answers when there is. */
  assignment: Assignment | null;
  /** The last durable version of θ and its hash (what `fetchModel` returns now). */
  version: number;
  hash: string;
  protocolVersion: number;
  /** The largest delta frame the server accepts. */
  maxFrameBytes: number;
  /** The largest socket.io packet the server reads (a frame above it cuts the connection). */
  maxHttpBufferSize: number;
  /** Server time, ms since the epoch. */
  serverTime: number;
  /** true when resumeIslandId and resumeToken were accepted and the old identity continues. */
  resumed: boolean;
  /** Butterfly mixing's group size k (0 or absent: the server does not mix; send `delta`). */
  mixGroup?: number;
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
  /**
   * Warmup of a fresh AdamW state, counted in the island's own AdamW steps since that state was
   * fresh (a joining island, a reloaded tab, a round that starts from a fresh AdamW):
   * lr × min(1, (k + 1) / localWarmupSteps) at its k-th such step. Adam's first steps move every
   * weight by about ±lr whatever its gradient, so they must be small (docs/studies/cold-start.md).
   */
  localWarmupSteps: number;
  /** AdamW's decoupled weight decay on the matrices (lr-scaled); absent: 0.1 (ADAMW_DEFAULTS). */
  weightDecay?: number;
}

/**
 * The inner learning rate at step i (0-based) of the round described by `plan`, for an island whose
 * AdamW state has taken `optimizerSteps` steps before this one (default i: the round began fresh).
 */
export function innerLearningRate(plan: InnerLrPlan, i: number, optimizerSteps = i): number {
  const schedule = { maxLr: plan.maxLr, minLr: plan.minLr, warmup: plan.warmupTokens, total: plan.totalTokens };
  let lr = learningRate(schedule, plan.tokensStart + i * plan.tokensPerStep, plan.tokensPerStep);
  if (plan.localWarmupSteps > 0) lr *= Math.min(1, (optimizerSteps + 1) / plan.localWarmupSteps);
  return lr;
}

/** A shard run's token range for one round: `length` tokens of train shard `shard` from token `offset`. */
export interface DataRange {
  shard: string;
  offset: number;
  length: number;
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
  /**
   * Start this round from a fresh AdamW (dense codes while the run audits: Δ recomputable from the job);
   * otherwise keep it.
   */
  freshOptimizer?: boolean;
  /**
   * Batches: sampleBatch(train, batchSize, seqLen, data.seed, data.stream, data.stepStart + i); in a shard run
   * (`range` present) rangeBatch(the range's tokens, batchSize, seqLen, i) instead (core/data/shards.ts).
   */
  data: { seed: number; stream: number; stepStart: number; range?: DataRange };
  /** How to encode Δ (error feedback is kept on the island). */
  codec: CodecOptions;
  /** Elements of θ, and of every Δ frame (the frame's count field). */
  paramCount: number;
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
  /** Bytes it cost the network (θ's chunks kept in a store cost none); absent: θ's size. */
  fetchedBytes?: number;
}
