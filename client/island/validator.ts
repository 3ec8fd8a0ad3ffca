// A validator island (`atoll island --validator`): takes audit jobs from the server, redoes each
// round on its engine (the CPU reference by default) from a fresh AdamW, and answers with the
// cosine and norm ratio of the submitted Δ against its own. The server judges (core/coord/audit.ts).
//
//   link.auth() → loop { job = link.take(); m = await judge(engine, train, job); link.verdict(job.jobId, m) }

import { decodeDelta } from '../../core/codec/index.ts';
import { type AuditJob, compareDeltas } from '../../core/coord/audit.ts';
import { hashParams } from '../../core/coord/hash.ts';
import { allocBatch, sampleBatch } from '../../core/data/dataset.ts';
import type { TrainingEngine } from '../../core/engine/index.ts';
import { innerLearningRate } from '../../core/protocol.ts';
import type { Result } from '../../core/result.ts';
import type { TokenArray } from '../../core/data/tokenizer.ts';
import { rangeBatch } from '../../core/data/shards.ts';
import type { DataRange } from '../../core/server-messages.ts';

export type FetchRange = (range: DataRange) => Promise<TokenArray>;

/** The Δ an honest island sends for this job's round: θ_base − θ after `steps` fresh-AdamW steps. */
export async function recomputeDelta(
  engine: TrainingEngine,
  train: TokenArray,
  job: Pick<AuditJob, 'params' | 'work'>,
  fetchRange?: FetchRange,
): Promise<Float32Array> {
  const w = job.work;
  // a shard run: the assignment's own range, as the server recorded it (never the island's word)
  const range = w.data.range;
  if (range && !fetchRange) throw new Error('E_BAD_RANGE: a shard run audit needs fetchRange');
  const tokens = range && fetchRange ? await fetchRange(range) : null;
  await engine.setParams(job.params);
  await engine.resetOptimizerState();
  const batch = allocBatch(w.batchSize, w.seqLen);
  for (let i = 0; i < w.steps; i++) {
    if (tokens) rangeBatch(tokens, w.batchSize, w.seqLen, i, batch);
    else sampleBatch(train, w.batchSize, w.seqLen, w.data.seed, w.data.stream, w.data.stepStart + i, batch);
    await engine.step(batch, { lr: innerLearningRate(w.lr, i), gradClip: w.gradClip, weightDecay: w.lr.weightDecay });
  }
  await engine.takeLosses();
  return engine.readDelta();
}

export interface AuditMeasure {
  cosine: number | null;
  normRatio: number | null;
  reason?: string;
}

/** Recomputes the job and compares; cosine null when it cannot be judged (θ's hash, an undecodable frame). */
export async function judge(
  engine: TrainingEngine,
  train: TokenArray,
  job: AuditJob,
  fetchRange?: FetchRange,
): Promise<AuditMeasure> {
  if (hashParams(job.params) !== job.baseHash)
    return { cosine: null, normRatio: null, reason: 'base θ does not match its hash' };
  const sent = decodeDelta(job.frame, job.params.length);
  if (!sent.ok) return { cosine: null, normRatio: null, reason: `${sent.error.code}: ${sent.error.message}` };
  const ref = await recomputeDelta(engine, train, job, fetchRange);
  return compareDeltas(sent.value, ref);
}

/** The validator's side of the wire (socket.io in `atoll island --validator`). */
export interface ValidatorLink {
  take(): Promise<Result<AuditJob | null>>;
  verdict(
    jobId: number,
    m: AuditMeasure,
  ): Promise<Result<{ islandId: string; passed: boolean | null; banned: boolean }>>;
}

export interface ValidatorOptions {
  /** An engine that runs batches of this size. */
  engineFor: (batchSize: number) => Promise<TrainingEngine>;
  train: TokenArray;
  /** A shard run: a job's range tokens (range-fetch.ts). */
  fetchRange?: FetchRange;
  link: ValidatorLink;
  /** Waits this long when there is no job (ms). */
  idle: () => Promise<void>;
  onVerdict?: (job: AuditJob, m: AuditMeasure, passed: boolean | null, banned: boolean) => void;
  stopped: () => boolean;
}

/** Runs audits until stopped() or the link fails; returns the number of verdicts sent. */
export async function runValidator(o: ValidatorOptions): Promise<Result<number>> {
  let n = 0;
  while (!o.stopped()) {
    const j = await o.link.take();
    if (!j.ok) return j;
    if (!j.value) {
      await o.idle();
      continue;
    }
    const job = j.value;
    const m = await judge(await o.engineFor(job.work.batchSize), o.train, job, o.fetchRange);
    const v = await o.link.verdict(job.jobId, m);
    if (!v.ok) return v;
    n++;
    o.onVerdict?.(job, m, v.value.passed, v.value.banned);
  }
  return { ok: true, value: n };
}
