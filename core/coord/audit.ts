// Verified work: a random sample of accepted deltas becomes audit jobs. A trusted validator
// recomputes each one from (θ at its base version, the assignment's batches, lr plan and gradClip,
// the claimed steps) with a fresh AdamW, and answers with the cosine and the norm ratio of the
// submitted Δ against its own; the server judges them against the tolerance and counts passes and
// failures on the island's record. Pure: the server and the simulator drive it with their clocks.
//
// While a run audits, its islands start every dense-code round from a fresh AdamW (the config's
// freshInnerOptimizer, set by server/run/audit.ts; client/island/runtime.ts), so an honest Δ is a
// function of the job alone. What is sampled is decided by the island's assignment as the server
// recorded it (validate.ts), never by the delta's claims: an assignment made while fresh AdamW was
// off, or of a sparse code (topk, sparse: their error feedback carries a residual of earlier rounds
// and cannot be recomputed), is never sampled; every other accepted delta is, whatever its staleness.
//
//   offer(delta) → queued (bounded: the oldest queued job makes room)
//   take(now)    → the oldest queued job, leased to a validator for leaseMs (then queued again)
//   settle(id, cosine, normRatio) → { islandId, passed } (null: the validator could not judge it)

import type { TokenRange } from './data-ranges.ts';
import type { Encoding } from '../codec/index.ts';
import type { InnerLrPlan } from '../protocol.ts';
import { type Result, err, ok } from '../result.ts';
import type { AssignedWork, IslandRecord } from './types.ts';

/** Deltas whose Δ a validator can recompute (dense codes; their small error feedback stays inside the tolerance). */
export const AUDITABLE_ENCODINGS: readonly Encoding[] = ['f32', 'f16', 'int8', 'int4'];

/** Why a run with validators cannot take `encoding` deltas (their audits would sample nothing), or null. */
export function unauditable(encoding: Encoding): string | null {
  return AUDITABLE_ENCODINGS.includes(encoding)
    ? null
    : `${encoding} deltas cannot be audited (their error feedback carries earlier rounds): ` +
        `a run with validators takes ${AUDITABLE_ENCODINGS.join('|')}`;
}

/**
 * What a validator needs to redo one round: batches sampleBatch(train,
 * batchSize, seqLen, seed, stream, stepStart + i), i < steps.
 */
export interface AuditWork {
  steps: number;
  batchSize: number;
  seqLen: number;
  gradClip: number;
  lr: InnerLrPlan;
  data: { seed: number; stream: number; stepStart: number; range?: TokenRange };
}

export interface AuditJob {
  jobId: number;
  islandId: string;
  seq: number;
  roundId: number;
  baseVersion: number;
  /** hashParams(params): the validator checks it before training. */
  baseHash: string;
  work: AuditWork;
  /** The submitted codec frame, as accepted. */
  frame: Uint8Array;
  /** θ at baseVersion (shared between jobs on the same version; read-only). */
  params: Float32Array;
}

/**
 * Pass iff cosine ≥ minCosine and |normRatio − 1| ≤ maxNormDev. Measured on `tiny` (docs/protocol.md,
 * "Verified work"): an honest int8 Δ against the CPU recompute reaches cosine ≥ 0.9999 from a CPU or
 * a WebGPU island, norm ratio 1 ± 0.0001; a Δ of another data stream ≤ 0.88, of a quarter of the
 * claimed steps (norm-matched) ≤ 0.80.
 */
export interface AuditTolerance {
  minCosine: number;
  maxNormDev: number;
}
export const DEFAULT_AUDIT_TOLERANCE: AuditTolerance = { minCosine: 0.97, maxNormDev: 0.1 };

export interface AuditConfig {
  /** Fraction of accepted auditable deltas that become jobs, [0, 1]. */
  rate: number;
  /** Jobs held (queued and leased); the oldest queued one makes room. */
  maxJobs: number;
  /** An island with this many failed audits is banned (0: never). */
  banAfter: number;
  /** A leased job not settled within this long is queued again. */
  leaseMs: number;
  tolerance: AuditTolerance;
}
export const DEFAULT_AUDIT_CONFIG: AuditConfig = {
  rate: 0.1,
  maxJobs: 16,
  banAfter: 2,
  leaseMs: 120_000,
  tolerance: DEFAULT_AUDIT_TOLERANCE,
};

export function auditPasses(cosine: number, normRatio: number, tol: AuditTolerance): boolean {
  return cosine >= tol.minCosine && Math.abs(normRatio - 1) <= tol.maxNormDev;
}

/** cosine(a, b) and ‖a‖ / ‖b‖, accumulated in f64. */
export function compareDeltas(a: Float32Array, b: Float32Array): { cosine: number; normRatio: number } {
  let ab = 0,
    aa = 0,
    bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const na = Math.sqrt(aa),
    nb = Math.sqrt(bb);
  return { cosine: na > 0 && nb > 0 ? ab / (na * nb) : 0, normRatio: nb > 0 ? na / nb : Infinity };
}

export const AuditError = {
  /** A verdict (or a job request) from a connection that is not a validator. */
  NOT_VALIDATOR: 'E_NOT_VALIDATOR',
  /**
   * A verdict for a job that is not leased (unknown, already
   * settled, or its lease ran out and it was settled by another).
   */
  UNKNOWN_AUDIT: 'E_UNKNOWN_AUDIT',
} as const;

export class AuditQueue {
  cfg: AuditConfig;
  private queued: AuditJob[] = [];
  private leased = new Map<number, { job: AuditJob; until: number }>();
  private nextId = 1;
  /** Counters: jobs made, dropped for room, settled. */
  readonly stats = { offered: 0, dropped: 0, passed: 0, failed: 0, skipped: 0 };

  constructor(cfg: Partial<AuditConfig> = {}) {
    this.cfg = { ...DEFAULT_AUDIT_CONFIG, ...cfg };
  }

  get size(): number {
    return this.queued.length + this.leased.size;
  }

  /**
   * Whether to sample a delta made for assignment `work` (its record on the island: the codec and
   * the fresh AdamW it asked for, not what the delta claims): `u` uniform in [0, 1) (the caller's
   * random source). Only rounds of a dense code that started from a fresh AdamW can be recomputed.
   * Staleness plays no part: a delta on any base the run accepts can be sampled.
   */
  wants(work: Pick<AssignedWork, 'encoding' | 'fresh'> | undefined, u: number): boolean {
    return (
      this.cfg.rate > 0 &&
      work?.fresh === true &&
      work.encoding !== undefined &&
      AUDITABLE_ENCODINGS.includes(work.encoding) &&
      u < this.cfg.rate
    );
  }

  /** Whether a delta for `work` is of a kind that may be audited (sampled or not). */
  static auditable(work: Pick<AssignedWork, 'encoding' | 'fresh'> | undefined): boolean {
    return work?.fresh === true && work.encoding !== undefined && AUDITABLE_ENCODINGS.includes(work.encoding);
  }

  offer(job: Omit<AuditJob, 'jobId'>): number {
    if (this.size >= this.cfg.maxJobs) {
      if (this.queued.length === 0) {
        this.stats.dropped++;
        return 0;
      }
      this.queued.shift();
      this.stats.dropped++;
    }
    const jobId = this.nextId++;
    this.queued.push({ ...job, jobId });
    this.stats.offered++;
    return jobId;
  }

  /** The oldest queued job, leased until now + leaseMs; expired leases are queued again first. */
  take(now: number): AuditJob | null {
    for (const [id, l] of this.leased) {
      if (l.until <= now) {
        this.leased.delete(id);
        this.queued.unshift(l.job);
      }
    }
    const job = this.queued.shift();
    if (!job) return null;
    this.leased.set(job.jobId, { job, until: now + this.cfg.leaseMs });
    return job;
  }

  /** Drops every job of an island (banned: nothing left to judge). */
  forget(islandId: string): void {
    this.queued = this.queued.filter((j) => j.islandId !== islandId);
    for (const [id, l] of this.leased) if (l.job.islandId === islandId) this.leased.delete(id);
  }

  /** A validator's measurement of a leased job; passed is null when it could not judge (cosine null). */
  settle(
    jobId: number,
    cosine: number | null,
    normRatio: number | null,
  ): Result<{ islandId: string; seq: number; passed: boolean | null }> {
    const l = this.leased.get(jobId);
    if (!l)
      return err(AuditError.UNKNOWN_AUDIT, `audit ${jobId} is not leased (unknown, settled, or its lease ran out)`);
    this.leased.delete(jobId);
    const { islandId, seq } = l.job;
    if (cosine === null || normRatio === null) {
      this.stats.skipped++;
      return ok({ islandId, seq, passed: null });
    }
    const passed = auditPasses(cosine, normRatio, this.cfg.tolerance);
    this.stats[passed ? 'passed' : 'failed']++;
    return ok({ islandId, seq, passed });
  }
}

/** The job's work from the island's remembered assignment (null when the record no longer holds it). */
export function auditWork(
  isl: Pick<IslandRecord, 'work'>,
  roundId: number,
  steps: number,
  seqLen: number,
): AuditWork | null {
  const a = isl.work?.find((w) => w.roundId === roundId);
  if (!a?.data || !a.lr || a.gradClip === undefined) return null;
  return { steps, batchSize: a.batchSize, seqLen, gradClip: a.gradClip, lr: { ...a.lr }, data: { ...a.data } };
}
