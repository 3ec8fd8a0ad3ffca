// The coordinator's types: what it knows about islands, what it answers, the events it emits, and
// its snapshot. Internal round and window state is here too, so the modules beside it share one shape.

import type { Encoding } from '../codec/index.ts';
import type { AtollError, Result } from '../result.ts';
import { streamId } from '../data/dataset.ts';
import type { Assignment, DeltaMeta, InnerLrPlan, IslandCaps, UpdateMsg } from '../protocol.ts';
import type { CoordinatorConfig, CoordinatorConfigPatch } from './config.ts';
import type { DataRangesState, RangeShard, TokenRange } from './data-ranges.ts';
import type { OuterConfig } from './outer.ts';

export type IslandStatus = 'online' | 'offline' | 'left' | 'banned';

/** What the coordinator knows about one island (copies are handed out; mutate nothing). */
export interface IslandRecord {
  id: string;
  name: string;
  /** The contributor's stable anonymous id (caps.contributorId), or the island id. */
  contributorId: string;
  engine: string;
  adapter: string;
  status: IslandStatus;
  joinedAt: number;
  lastSeen: number;
  /** Measured training throughput (EMA over deltas), tokens/s; the declared one until the first delta. */
  tokensPerSec: number | undefined;
  batchSize: number;
  /** Tokens of this island's deltas that made it into θ. */
  tokensContributed: number;
  /** Tokens of every delta it sent, accepted or not. */
  tokensSubmitted: number;
  accepted: number;
  rejected: Record<string, number>;
  lastBaseVersion: number;
  lastStaleness: number;
  /** Current assignment (undefined when it has none / is waiting). */
  roundId: number | undefined;
  assignedSteps: number;
  /** Its steps as DyLU sized them, before the budget's last round clipped them (windowStep's nominal round). */
  nominalSteps?: number;
  assignedAt: number;
  /** Waiting for the next round to open (sync) or for resume (paused). */
  waiting: boolean;
  /** Highest seq counted (replay guard). */
  lastSeq: number;
  /** Rounds it has a counted delta for (the last few; duplicate guard). */
  submittedRounds: number[];
  /** Data stream and next data step (batches never repeat across its rounds). */
  stream: number;
  dataSteps: number;
  caps: IslandCaps;
  /** Its last few assignments: what its deltas' claims are checked against (validate.ts). */
  work?: AssignedWork[];
  /** Verdicts of validators on its deltas (audit.ts); absent until the first. */
  audits?: { passed: number; failed: number; lastPassedSeq?: number };
  /** Credit taken back by a ban: the tokens it had contributed then (they stay in θ until a revert). */
  revokedTokens?: number;
}

/** The figures of one assignment that a delta's claims must fit. */
export interface AssignedWork {
  roundId: number;
  /**
   * The version it was handed out on (after the host's release: Coordinator.rebaseAssignment).
   * Absent on records from older checkpoints.
   */
  baseVersion?: number;
  /** The codec it asked for: a Δ's frame must use this encoding. */
  encoding?: Encoding;
  /** It started from a fresh AdamW (recomputable by a validator). */
  fresh?: boolean;
  steps: number;
  batchSize: number;
  issuedAt: number;
  /** What a validator needs to redo it (audit.ts); absent on records from older checkpoints. */
  data?: { seed: number; stream: number; stepStart: number; range?: TokenRange };
  lr?: InnerLrPlan;
  gradClip?: number;
}

export interface DeltaSubmission {
  meta: DeltaMeta;
  /** The codec frame (core/codec). */
  frame: Uint8Array;
  /**
   * The frame decoded already, by the offload's workers (OuterOffload.ingest): Δ in a buffer the
   * coordinator now owns, and ‖Δ‖; or the decoder's error. Absent: the coordinator decodes.
   */
  decoded?: Result<{ delta: Float32Array; norm: number }>;
}

export interface SubmitAccepted {
  /** applied: in θ at `version` now. pending: waits for its round to close. (Ack only on the 'update' event.) */
  status: 'applied' | 'pending';
  version: number;
  roundId: number;
  staleness: number;
  /** ‖Δ‖₂ of the decoded delta. */
  norm: number;
  /** The steps its assignment gave (the norm bound's, and a revert's replay). */
  steps: number;
  /** ‖Δ‖/√normSteps: the norm bound's statistic (aggregate.ts normSteps). */
  score: number;
}

/** One counted delta, as listed in an 'update' event (ack each with AckMsg{status:'applied'}). */
export interface Contribution {
  islandId: string;
  seq: number;
  roundId: number;
  baseVersion: number;
  staleness: number;
  tokens: number;
  /** Relative weight it had in the update. */
  weight: number;
  /** Sync rounds: cos(Δ, the round's merged Δ), and ‖Δ‖/√steps ÷ the round's median of it. */
  cosine?: number;
  normRatio?: number;
}

export interface RejectedContribution extends Omit<Contribution, 'weight'> {
  error: AtollError;
}

/** Why a sync round closed with fewer than minContributors deltas (rounds.ts shortCloseReason). */
export type ShortClose = 'members-in' | 'timeout' | 'none-live';

/** Dashboard stats for one version. */
export interface VersionStats {
  version: number;
  time: number;
  /** Tokens this update added / in θ after it. */
  tokens: number;
  totalTokens: number;
  /** Token-weighted mean of the contributors' reported mean loss. */
  trainLoss: number;
  contributors: number;
  /** stalenessHist[τ] = contributors of staleness τ (last bucket: ≥ its index). */
  stalenessHist: number[];
  /** Deltas counted / rejected (by code) since the previous version. */
  accepted: number;
  rejected: Record<string, number>;
  /** Delta frame bytes received since the previous version (accepted or not), update frame bytes sent. */
  bytesIn: number;
  bytesOut: number;
  /** f32 bytes of the counted deltas / their frame bytes. */
  compressionRatio: number;
  /** Cumulative tokens in θ / tokens in every delta received. */
  goodput: number;
  /** ‖u‖₂ of the applied outer update. */
  updateNorm: number;
  /**
   * Present when this version's sync round closed with fewer than minContributors deltas: why
   * (rounds.ts shortCloseReason: its live members all in past the grace, the round timeout, none alive).
   */
  shortClose?: ShortClose;
  /**
   * Present when the outer step's trust region acted on this version (core/coord/trust.ts): the gain
   * γ < 1 its pseudo-gradient took so that ‖u‖ stayed at the limit (updateNorm is the clipped one).
   */
  trustGain?: number;
}

// ── Durability contract (for whoever drives this: the server, the simulator) ────────────
// `submit()` validates a delta and answers at once, but its answer is NOT the ack:
//   • { ok: false }                → reject now: send AckMsg{status:'rejected', error}. Nothing changed.
//   • { ok: true, status:'pending' | 'applied' } → do NOT ack yet.
// Acks come from the event queue (`drainEvents()`, in order):
//   • 'update'   → 1. persist the new state (snapshot(), or θ + the update message),
//                  2. THEN ack every entry of `contributors` as applied (version = update.version)
//                     and every entry of `rejected` as rejected (deltas dropped when the round closed),
//                  3. broadcast `update` to the islands.
//   • 'rejected' → ack these as rejected (deltas dropped without an update, e.g. by ban()).
//   • 'assignment' → deliver to an island that was told to wait (nextAssignment returned null).
//   • 'island', 'round', 'done' → informational (dashboard, logs).
// Process events in order: an 'assignment' that follows an 'update' is based on that update, so it
// must not reach the island before the update is durable.
// ───────────────────────────────────────
export type CoordinatorEvent =
  | {
      type: 'update';
      update: UpdateMsg;
      contributors: Contribution[];
      rejected: RejectedContribution[];
      stats: VersionStats;
    }
  | { type: 'rejected'; rejected: RejectedContribution[] }
  | { type: 'assignment'; islandId: string; result: Result<Assignment> }
  | { type: 'island'; islandId: string; status: IslandStatus; reason: string }
  | {
      type: 'round';
      roundId: number;
      baseVersion: number;
      state: 'open' | 'closed';
      members: number;
      time: number;
      /** A sync round closed short of minContributors: why (VersionStats.shortClose). */
      shortClose?: ShortClose;
    }
  | { type: 'done'; version: number; totalTokens: number };

export interface JoinRequest {
  caps: IslandCaps;
  protocolVersion?: number;
  /** Rejoin as this island (keeps its record); an unknown id creates an island with it. */
  resumeIslandId?: string;
}

export interface JoinResult {
  islandId: string;
  /** null: wait for an 'assignment' event (sync round in progress is not joinable / paused). */
  assignment: Assignment | null;
}

/** Running totals since start. */
export interface CoordinatorTotals {
  version: number;
  tokensApplied: number;
  tokensSubmitted: number;
  accepted: number;
  rejected: Record<string, number>;
  bytesIn: number;
  bytesOut: number;
  goodput: number;
  /** Sync rounds closed with fewer than minContributors deltas (absent in older checkpoints: 0). */
  shortRounds?: number;
  /** Versions whose step the trust region clipped (absent in older checkpoints: 0). */
  trustClips?: number;
}

/** A delta waiting for its sync round to close. */
export interface PendingDelta extends Contribution {
  delta: Float32Array;
  /** ‖Δ‖/√normSteps, the norm-bound statistic (aggregate.ts normSteps), and the steps the server assigned. */
  score: number;
  steps: number;
  lossMean: number;
  arrivedAt: number;
}

export interface RoundState {
  id: number;
  baseVersion: number;
  openedAt: number;
  /** Islands assigned to this round. */
  members: Set<string>;
  /** Members that have submitted, and how long after the open each did (ms). */
  returned: Map<string, number>;
  /** Members whose delta for this round was rejected: their turn is used, the round stops waiting for them. */
  failed: Set<string>;
  /** Everything that will be averaged at close: members' deltas and late ones folded in. */
  pending: PendingDelta[];
}

/** Accumulators reset at every version. */
export interface PerVersion {
  accepted: number;
  rejected: Record<string, number>;
  bytesIn: number;
  rawBytesAccepted: number;
  frameBytesAccepted: number;
}

export const newPerVersion = (): PerVersion => ({
  accepted: 0,
  rejected: {},
  bytesIn: 0,
  rawBytesAccepted: 0,
  frameBytesAccepted: 0,
});
export const STALENESS_BUCKETS = 17;
export const SUBMITTED_ROUNDS_KEPT = 16;

/** Snapshot for exact resume: typed arrays (store as safetensors tensors) + JSON-safe metadata. */
export interface CoordinatorSnapshot {
  /** theta, outer.momentum, outer.buffer, downlink.residual, pending.<i>, update.<version> (U8 frame). */
  tensors: Record<string, Float32Array | Uint8Array>;
  meta: CoordinatorSnapshotMeta;
}

export interface CoordinatorSnapshotMeta {
  format: 'atoll-coordinator';
  formatVersion: 1;
  protocolVersion: number;
  config: CoordinatorConfig;
  paramCount: number;
  version: number;
  hash: string;
  paused: boolean;
  outer: { bufferCount: number; steps: number };
  islands: IslandRecord[];
  nextIslandSerial: number;
  assignSerial: number;
  round: {
    id: number;
    baseVersion: number;
    openedAt: number;
    members: string[];
    returned: Array<[string, number]>;
    failed?: string[];
  };
  pending: Array<Omit<PendingDelta, 'delta'>>;
  normHistory: number[];
  /** Assigned steps of each normHistory score (absent in older checkpoints). */
  normSteps?: number[];
  /** A shard run's range ledger (data-ranges.ts); absent for a corpus run. */
  dataRanges?: DataRangesState;
  totals: CoordinatorTotals;
  perVersion: PerVersion;
  updates: Array<Omit<UpdateMsg, 'frame'>>;
  history: VersionStats[];
  done: boolean;
}

/**
 * The outer step's numerics run elsewhere (the server's worker threads: server/outer/offload.ts).
 * The coordinator holds deltas in the host's buffers and asks for each round's step with `step`;
 * the host runs it on `theta` (shared with the coordinator), and the round closes with its answer.
 */
export interface OuterOffload {
  /** Takes the step (θ moved), or fails to (an error: nothing moved). A rejection: a worker died. */
  step(req: OuterStepRequest): Promise<Result<OuterStepDone>>;
  /** θ, shared: the host moves it; the coordinator reads it. */
  theta: Float32Array;
  /** Where the coordinator writes g when it combines the deltas itself (robust rules). */
  g: Float32Array;
  /** A free delta buffer the host's workers can read. */
  buffer(): Float32Array;
  /** Gives a buffer from `buffer()` or a decoded submission back. */
  release(b: Float32Array): void;
}

/** The step the host takes: the same as the coordinator's own. */
export interface OuterStepRequest {
  /** g = Σ weights[j]·deltas[j] (in f64, in order), taken by the host; null: g is in OuterOffload.g. */
  deltas: Float32Array[] | null;
  weights: number[] | null;
  outer: OuterConfig;
  downlink: CoordinatorConfig['downlink'];
  scale: number;
  /** 0: the plain step u = scale·g (momentum untouched). */
  period: number;
  /** A merge window's share of a step (m ← μ^s·m + s·g). */
  share: boolean;
  /** The momentum's decay follows the inner schedule (rounds.ts momentumAnneal). */
  anneal: number;
  /** The trust region's limit on ‖u‖ (trust.ts; Infinity: none): over it, g takes the gain trustGain gives. */
  trustLimit: number;
}

/**
 * The step done: θ (in OuterOffload.theta) moved. The optimizer's and the downlink's state stay in
 * the host until a snapshot needs them (Coordinator.syncOuterState).
 */
export interface OuterStepDone {
  frame: Uint8Array;
  hash: string;
  updateNorm: number;
  /** The trust region's gain on g, present when it acted (< 1). */
  trustGain?: number;
  /** With `deltas`: each one's Σ d·g and Σ d², and Σ g² (its cosine with g). */
  agreement?: { dots: number[]; sqs: number[]; gg: number };
}

export interface CoordinatorOptions {
  /** Initial θ (copied). */
  params: Float32Array;
  config?: CoordinatorConfigPatch;
  /** Start time, ms. */
  now?: number;
  /** A shard run: its train shards, in index order (the range ledger, data-ranges.ts). */
  ranges?: RangeShard[];
}

/**
 * Room for one more island record under `cap`: drops the longest-gone records that hold nothing
 * (offline or left, no delta ever counted) down to 90% of the cap. Online, banned and credited
 * records stay. false: no room.
 */
export function makeRoom(islands: Map<string, IslandRecord>, cap: number): boolean {
  if (islands.size < cap) return true;
  const idle = [...islands.values()].filter(
    (r) => (r.status === 'offline' || r.status === 'left') && r.accepted === 0 && r.tokensContributed === 0,
  );
  idle.sort((a, b) => a.lastSeen - b.lastSeen);
  for (let i = 0; i < idle.length && islands.size > Math.floor(0.9 * cap); i++) islands.delete(idle[i].id);
  return islands.size < cap;
}

export function newIslandRecord(id: string, caps: IslandCaps, batchSize: number, now: number): IslandRecord {
  return {
    id,
    name: (caps.name ?? id).slice(0, 64),
    contributorId: (caps.contributorId ?? id).slice(0, 64),
    engine: caps.engine,
    adapter: caps.adapter ?? '',
    status: 'online',
    joinedAt: now,
    lastSeen: now,
    tokensPerSec: caps.tokensPerSec,
    batchSize,
    tokensContributed: 0,
    tokensSubmitted: 0,
    accepted: 0,
    rejected: {},
    lastBaseVersion: -1,
    lastStaleness: 0,
    roundId: undefined,
    assignedSteps: 0,
    assignedAt: now,
    waiting: false,
    lastSeq: -1,
    submittedRounds: [],
    stream: streamId(id),
    dataSteps: 0,
    caps: structuredClone(caps),
    work: [],
  };
}

/** A round whose outer step is in flight (offload), or being taken here. */
export interface Closing {
  now: number;
  kept: PendingDelta[];
  rejected: RejectedContribution[];
  /** The round closed short of minContributors, and why. */
  shortClose?: ShortClose;
}
