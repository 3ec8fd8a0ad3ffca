// Verified work on the server (docs/protocol.md, "Verified work"): samples accepted deltas into
// audit jobs (core/coord/audit.ts), hands them to validators that know the token, and turns their
// verdicts into the island's audit record and, past `banAfter` failures, a ban (Run.ban: pending
// deltas dropped, sockets closed).
//
//   run.audits = new RunAudits(run, { token, rate, banAfter });
//   Run.submit: const base = audits.sample(meta) → coord.submit → if accepted: audits.offer(meta, frame, base)

import { createHash, timingSafeEqual } from 'node:crypto';
import { type AuditConfig, type AuditJob, AuditError, AuditQueue, auditWork } from '../core/coord/audit.ts';
import type { DeltaMeta } from '../core/protocol.ts';
import { type Result, err, ok } from '../core/result.ts';
import type { Coordinator } from '../core/coord/index.ts';
import type { RunStore } from './store.ts';

export interface AuditOptions extends Partial<AuditConfig> {
  /** The validators' shared secret (`atoll serve --validator-token`, $ATOLL_VALIDATOR_TOKEN). */
  token: string;
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

const digest = (s: string) => createHash('sha256').update(s).digest();

/** What the audits use of the run (server/run.ts's Run), named here so that neither file imports the other's class. */
export interface AuditedRun {
  readonly coord: Coordinator;
  readonly store: Pick<RunStore, 'append'>;
  ban(islandId: string, reason: string): Promise<Result<void>>;
}

export class RunAudits {
  readonly queue: AuditQueue;
  private readonly run: AuditedRun;
  private readonly token: Buffer;
  /** θ of the last sampled version, shared by its jobs. */
  private base: { version: number; hash: string; params: Float32Array } | null = null;

  constructor(run: AuditedRun, o: AuditOptions) {
    this.run = run;
    this.token = digest(o.token);
    const { token: _t, ...cfg } = o;
    this.queue = new AuditQueue(cfg);
    // audited rounds must be recomputable: dense-code islands start each one from a fresh AdamW
    run.coord.setConfig({ freshInnerOptimizer: true });
  }

  /** Constant-time check of a validator's token. */
  auth(token: string): boolean { return timingSafeEqual(digest(token), this.token); }

  /**
   * Before the coordinator sees a delta: whether to audit it, and θ at its base (only the current
   * version is held, so a delta on an older base is not sampled).
   */
  sample(meta: DeltaMeta): { version: number; hash: string; params: Float32Array } | null {
    const c = this.run.coord;
    const u = Math.random();
    // cheap tests first: most deltas are not sampled, and config() copies
    if (u >= this.queue.cfg.rate || meta.baseVersion !== c.version || !this.queue.wants(c.config(), u)) return null;
    if (this.base?.version !== c.version) this.base = { version: c.version, hash: c.hash, params: c.params().slice() };
    return this.base;
  }

  /** After the coordinator accepted it: the job (nothing when the island's assignment is no longer kept). */
  offer(meta: DeltaMeta, frame: Uint8Array, base: { version: number; hash: string; params: Float32Array }): void {
    const isl = this.run.coord.island(meta.islandId);
    const work = isl && auditWork(isl, meta.roundId, meta.steps, this.run.coord.config().seqLen);
    if (!work) return;
    this.queue.offer({ islandId: meta.islandId, seq: meta.seq, roundId: meta.roundId, baseVersion: base.version, baseHash: base.hash, work, frame, params: base.params });
  }

  take(): AuditJobWire | null {
    const j = this.queue.take(Date.now());
    if (!j) return null;
    return { ...j, params: new Uint8Array(j.params.buffer, j.params.byteOffset, j.params.byteLength) };
  }

  async verdict(jobId: number, cosine: number | null, normRatio: number | null): Promise<Result<VerdictAnswer>> {
    const s = this.queue.settle(jobId, cosine, normRatio);
    if (!s.ok) return s;
    const { islandId, passed } = s.value;
    const rec = this.run.coord.island(islandId);
    if (!rec) return err(AuditError.UNKNOWN_AUDIT, `island ${islandId} of audit ${jobId} is gone`);
    let audits = rec.audits ?? { passed: 0, failed: 0 };
    if (passed !== null) {
      const r = this.run.coord.recordAudit(islandId, passed);
      if (r.ok) audits = r.value;
    }
    this.run.store.append({ type: 'audit', island: islandId, job: jobId, passed, cosine, normRatio });
    const banAfter = this.queue.cfg.banAfter;
    let banned = rec.status === 'banned';
    if (!banned && passed === false && banAfter > 0 && audits.failed >= banAfter) {
      this.queue.forget(islandId);
      banned = (await this.run.ban(islandId, `failed ${audits.failed} audits of its work`)).ok;
    }
    return ok({ islandId, passed, banned, audits });
  }
}
