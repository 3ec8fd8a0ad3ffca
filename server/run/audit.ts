// Verified work on the server (docs/protocol.md, "Verified work"): samples accepted deltas into
// audit jobs (core/coord/audit.ts), hands them to validators that know the token, and turns their
// verdicts into the island's audit record and, past `banAfter` failures, a ban (the host's ban:
// pending deltas dropped, credit revoked, sockets closed).
//
// Sampling is by assignment: whether a delta may be sampled is decided by the assignment the server
// recorded for it (its codec and fresh AdamW), and θ at the delta's base is kept for every version
// the run still accepts deltas on, so staleness gives no cover: a stale delta is sampled at the
// same rate as a fresh one, and recomputed from its own base.
//
//   run.audits = new RunAudits(run, { token, rate, banAfter });
//   Run.submit: const pick = audits.sample(meta) → (refused: E_STALE) → coord.submit
//               → if accepted: audits.offer(meta, frame, pick)

import { createHash, timingSafeEqual } from 'node:crypto';
import { type AuditConfig, type AuditJob, AuditError, AuditQueue, auditWork } from '../../core/coord/audit.ts';
import type { Coordinator } from '../../core/coord/index.ts';
import { type DeltaMeta, ErrorCode } from '../../core/protocol.ts';
import { type Result, err, ok } from '../../core/result.ts';

export interface AuditOptions extends Partial<AuditConfig> {
  /** The validators' shared secret (`atoll serve --validator-token`, $ATOLL_VALIDATOR_TOKEN). */
  token: string;
}

/** What the audits need of the run (server/run/run.ts implements it). */
export interface AuditHost {
  readonly coord: Coordinator;
  appendLog(line: Record<string, unknown>): void;
  ban(islandId: string, reason: string): Promise<Result<unknown>>;
}

/** A job as it travels: θ as little-endian f32 bytes. */
export type AuditJobWire = Omit<AuditJob, 'params'> & { params: Uint8Array };

export interface VerdictAnswer {
  islandId: string;
  /** null: the validator could not judge it (not counted). */
  passed: boolean | null;
  banned: boolean;
  audits: { passed: number; failed: number };
}

/** θ of one version, shared by the jobs on it (read-only). */
export interface BaseTheta {
  version: number;
  hash: string;
  params: Float32Array;
}

/**
 * Versions of θ held for audits: maxStaleness + 1, at most this many. A run whose maxStaleness is
 * larger refuses, while it audits, auditable deltas on a base older than that (E_STALE).
 */
export const AUDIT_THETAS = 33;

const digest = (s: string) => createHash('sha256').update(s).digest();

export class RunAudits {
  readonly queue: AuditQueue;
  private readonly host: AuditHost;
  private readonly token: Buffer;
  /** θ by version, the newest last. */
  private readonly thetas = new Map<number, BaseTheta>();

  constructor(host: AuditHost, o: AuditOptions) {
    this.host = host;
    this.token = digest(o.token);
    const { token: _t, ...cfg } = o;
    this.queue = new AuditQueue(cfg);
    // audited rounds must be recomputable: dense-code islands start each one from a fresh AdamW
    host.coord.setConfig({ freshInnerOptimizer: true });
  }

  /** Constant-time check of a validator's token. */
  auth(token: string): boolean {
    return timingSafeEqual(digest(token), this.token);
  }

  /** Versions of θ held now (tests). */
  get heldVersions(): number[] {
    return [...this.thetas.keys()];
  }

  /**
   * Before the coordinator sees a delta: θ of the current version is kept (once per version), and
   * the delta is sampled or not by its recorded assignment. An auditable delta on a base no longer
   * held is refused (E_STALE) rather than let through unaudited.
   */
  sample(meta: DeltaMeta): Result<BaseTheta | null> {
    const c = this.host.coord;
    this.keep(c);
    const work = c.islandWork(meta.islandId, meta.roundId);
    if (!AuditQueue.auditable(work)) return ok(null);
    const base = this.thetas.get(meta.baseVersion);
    if (!base) {
      if (meta.baseVersion > c.version) return ok(null); // the coordinator answers E_FUTURE_VERSION
      return err(
        ErrorCode.STALE,
        `base version ${meta.baseVersion} is older than the ${this.thetas.size} versions this audited run keeps θ of`,
      );
    }
    return ok(this.queue.wants(work, Math.random()) ? base : null);
  }

  /** After the coordinator accepted it: the job (nothing when the island's assignment is no longer kept). */
  offer(meta: DeltaMeta, frame: Uint8Array, base: BaseTheta): void {
    const isl = this.host.coord.island(meta.islandId);
    const work = isl && auditWork(isl, meta.roundId, meta.steps, this.host.coord.config().seqLen);
    if (!work) return;
    this.queue.offer({
      islandId: meta.islandId,
      seq: meta.seq,
      roundId: meta.roundId,
      baseVersion: base.version,
      baseHash: base.hash,
      work,
      frame,
      params: base.params,
    });
  }

  take(): AuditJobWire | null {
    const j = this.queue.take(Date.now());
    if (!j) return null;
    return { ...j, params: new Uint8Array(j.params.buffer, j.params.byteOffset, j.params.byteLength) };
  }

  async verdict(jobId: number, cosine: number | null, normRatio: number | null): Promise<Result<VerdictAnswer>> {
    const s = this.queue.settle(jobId, cosine, normRatio);
    if (!s.ok) return s;
    const { islandId, passed, seq } = s.value;
    const coord = this.host.coord;
    const rec = coord.island(islandId);
    if (!rec) return err(AuditError.UNKNOWN_AUDIT, `island ${islandId} of audit ${jobId} is gone`);
    let audits = rec.audits ?? { passed: 0, failed: 0 };
    if (passed !== null) {
      const r = coord.recordAudit(islandId, passed, seq);
      if (r.ok) audits = r.value;
    }
    this.host.appendLog({ type: 'audit', island: islandId, job: jobId, seq, passed, cosine, normRatio });
    const banAfter = this.queue.cfg.banAfter;
    let banned = rec.status === 'banned';
    if (!banned && passed === false && banAfter > 0 && audits.failed >= banAfter) {
      this.queue.forget(islandId);
      banned = (await this.host.ban(islandId, `failed ${audits.failed} audits of its work`)).ok;
    }
    return ok({ islandId, passed, banned, audits: { passed: audits.passed, failed: audits.failed } });
  }

  /** θ of the current version joins the kept ones; versions the run no longer accepts deltas on go. */
  private keep(c: Coordinator): void {
    const v = c.version;
    if (this.thetas.has(v)) return;
    this.thetas.set(v, { version: v, hash: c.hash, params: c.params().slice() });
    const held = Math.min(AUDIT_THETAS, c.config().maxStaleness + 1);
    for (const k of [...this.thetas.keys()]) if (k <= v - held || k > v) this.thetas.delete(k);
  }
}
