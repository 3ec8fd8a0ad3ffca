// What an operator does to a live run (server/plugins/admin.ts, behind the admin token): pause,
// resume, change knobs, ban an island (its credit revoked, its deltas since its last passed audit
// listed), revert a banned island's deltas out of θ (server/run/delta-archive.ts), checkpoint now. Every
// change is logged and checkpointed before the call resolves.

import type { CoordinatorConfigPatch } from '../../core/coord/index.ts';
import { unauditable } from '../../core/coord/audit.ts';
import { ErrorCode } from '../../core/protocol.ts';
import { type Result, err, ok } from '../../core/result.ts';
import type { RunConfig } from '../../core/api.ts';
import type { Coordinator } from '../../core/coord/index.ts';
import { type DeltaArchive, type IslandDelta, type RevertPlan, RevertError, rebuildWithout } from './delta-archive.ts';
import type { RunStore } from './store.ts';
import type { IslandFile } from './island-file.ts';
import { checkpointBefore } from './checkpoint.ts';

/** The run's parts the operator's calls work with (run.ts builds them). */
export interface AdminParts {
  coord: Coordinator;
  store: RunStore;
  archive: DeltaArchive;
  islandFile: IslandFile;
  views: { invalidate(): void };
  /** Config changes are marked at their version (history.ts). */
  history: { configChanged(version: number, time: number, changes: Record<string, unknown>, patch: unknown): void };
  /** The run config now, and a new one (its knobs changed). */
  config(): RunConfig;
  setConfig(c: RunConfig): void;
  /** Validators audit the run. */
  audited(): boolean;
  /** An island was banned (its sockets close: the run's 'ban' event). */
  banned(islandId: string): void;
  kick(): void;
  /** Until no batch of events is in flight (run.ts's drain). */
  drain(): Promise<void>;
  checkpointNow(): Promise<{ version: number; path: string; bytes: number }>;
  /** θ was rebuilt (a revert): it becomes durable and islands start over. */
  rebuilt(): Promise<void>;
}

export interface BanAnswer {
  island: string;
  /** Tokens of credit taken back. */
  revokedTokens: number;
  /** Its applied deltas since its last passed audit (what a revert takes out), as far back as kept. */
  deltas: IslandDelta[];
}

export interface RevertAnswer extends RevertPlan {
  version: number;
  hash: string;
  ms: number;
}

export class RunAdmin {
  private readonly run: AdminParts;

  constructor(parts: AdminParts) {
    this.run = parts;
  }

  async pause(): Promise<void> {
    this.run.coord.pause();
    this.run.store.append({ type: 'admin', action: 'pause' });
    await this.run.checkpointNow();
  }

  async resume(): Promise<void> {
    const run = this.run;
    await run.coord.whenIdle();
    run.coord.resume(Date.now());
    run.kick(); // resuming may close a round: its step starts
    run.store.append({ type: 'admin', action: 'resume' });
    await run.checkpointNow();
  }

  /** `changes`: the knobs as the operator named them (server/run/knobs.ts), logged beside the patch. */
  async setConfig(patch: CoordinatorConfigPatch, changes?: Record<string, unknown>): Promise<Result<RunConfig>> {
    const run = this.run;
    const why = run.audited() && patch.uplink?.encoding ? unauditable(patch.uplink.encoding) : null;
    if (why) return err(ErrorCode.BAD_CONFIG, why);
    await run.coord.whenIdle();
    // the versions made so far are logged under the config they were made with (their lr, in the history)
    run.kick();
    await run.drain();
    await run.coord.whenIdle();
    const r = run.coord.setConfig(patch);
    if (!r.ok) return r;
    const config = { ...run.config(), coordinator: r.value };
    run.setConfig(config);
    run.store.writeConfig(config);
    const at = { version: run.coord.version, t: Date.now() };
    run.store.append({ type: 'admin', action: 'config', ...at, patch, changes: changes ?? patch });
    run.history.configChanged(at.version, at.t, changes ?? patch, patch);
    await run.checkpointNow();
    return ok(config);
  }

  /** Bans an island: pending deltas dropped, credit revoked, sockets closed (the gateway's hook). */
  async ban(islandId: string, reason: string): Promise<Result<BanAnswer>> {
    const run = this.run;
    await run.coord.whenIdle();
    const before = run.coord.island(islandId);
    const r = run.coord.ban(islandId, Date.now(), reason);
    run.kick(); // a ban may close a round: its step starts
    if (!r.ok) return r;
    const revokedTokens = before?.status === 'banned' ? 0 : (before?.tokensContributed ?? 0);
    run.store.append({ type: 'admin', action: 'ban', island: islandId, reason, revokedTokens });
    run.views.invalidate();
    run.banned(islandId);
    await run.checkpointNow();
    return ok({ island: islandId, revokedTokens, deltas: this.deltas(islandId) });
  }

  /** A banned (or any) island's applied deltas since its last passed audit, as far back as kept. */
  deltas(islandId: string): IslandDelta[] {
    const rec = this.run.coord.island(islandId);
    return rec ? this.run.archive.list(islandId, rec.audits?.lastPassedSeq ?? -1) : [];
  }

  /**
   * Takes a banned island's deltas since its last passed audit out of θ: θ rebuilt from the newest
   * kept checkpoint before the first of them, every later outer step taken again without them, as
   * a new version. Islands are told to reconnect (and fetch θ).
   */
  async revert(islandId: string): Promise<Result<RevertAnswer>> {
    const run = this.run;
    const rec = run.coord.island(islandId);
    if (!rec) return err(ErrorCode.UNKNOWN_ISLAND, `no island ${islandId}`);
    if (rec.status !== 'banned') return err(ErrorCode.BAD_REQUEST, `island ${islandId} is not banned: ban it first`);
    await run.checkpointNow(); // every version so far is on disk, with its deltas
    await run.coord.whenIdle();
    const t0 = performance.now();
    const plan = rebuildWithout(run.coord, run.archive, islandId, rec.audits?.lastPassedSeq ?? -1, (v) =>
      checkpointBefore(run.store, run.config().model, run.islandFile, v),
    );
    if (!plan.ok) return plan;
    const ms = performance.now() - t0;
    run.store.append({
      type: 'admin',
      action: 'revert',
      island: islandId,
      removed: plan.value.removed.length,
      fromCheckpoint: plan.value.fromCheckpoint,
      version: run.coord.version,
      hash: run.coord.hash,
      ms: Math.round(ms),
    });
    await run.rebuilt();
    return ok({ ...plan.value, version: run.coord.version, hash: run.coord.hash, ms });
  }

  async checkpointNow(): Promise<{ version: number; path: string; bytes: number }> {
    this.run.store.append({ type: 'admin', action: 'checkpoint' });
    return this.run.checkpointNow();
  }
}

export { RevertError };
