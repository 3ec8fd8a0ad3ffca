// The island records: registration, liveness, status changes (each an 'island' event), renames and
// audit counts. The coordinator owns one book; the records are what snapshots keep.

import { type Result, err, ok } from '../result.ts';
import { ErrorCode, type IslandCaps } from '../protocol.ts';
import type { CoordinatorConfig } from './config.ts';
import {
  type CoordinatorEvent,
  type IslandRecord,
  type IslandStatus,
  type JoinRequest,
  makeRoom,
  newIslandRecord,
} from './types.ts';

export class IslandBook {
  readonly byId = new Map<string, IslandRecord>();
  /** The serial of the next island id the server names (`island-<n>`). */
  nextSerial = 1;

  constructor(private readonly emit: (e: CoordinatorEvent) => void) {}

  /** A snapshot's records and serial (restore.ts), into an empty book. */
  load(records: IslandRecord[], nextSerial: number): void {
    for (const isl of records) this.byId.set(isl.id, isl);
    this.nextSerial = nextSerial;
  }

  /** The online islands with a round in progress (not waiting for an assignment): ids and round ids. */
  roundsInProgress(): Array<{ islandId: string; roundId: number }> {
    const out: Array<{ islandId: string; roundId: number }> = [];
    for (const r of this.byId.values())
      if (r.status === 'online' && r.roundId !== undefined && !r.waiting)
        out.push({ islandId: r.id, roundId: r.roundId });
    return out;
  }

  /**
   * An island's record, new or known (`resumeIslandId`: its caps renewed), marked online and seen
   * now. E_BANNED for a banned one; E_FULL when no record can be made room for.
   */
  register(req: JoinRequest, cfg: CoordinatorConfig, now: number): Result<IslandRecord> {
    const caps = req.caps;
    let isl = req.resumeIslandId !== undefined ? this.byId.get(req.resumeIslandId) : undefined;
    if (isl) {
      if (isl.status === 'banned') return err(ErrorCode.BANNED, `island ${isl.id} is banned`);
      isl.caps = structuredClone(caps);
      if (caps.contributorId) isl.contributorId = caps.contributorId;
      if (caps.name) isl.name = caps.name.slice(0, 64);
      if (caps.tokensPerSec !== undefined && isl.tokensPerSec === undefined) isl.tokensPerSec = caps.tokensPerSec;
      isl.batchSize = batchSizeFor(caps, cfg);
    } else {
      if (!makeRoom(this.byId, cfg.maxIslandRecords))
        return err(ErrorCode.FULL, `the server holds its ${cfg.maxIslandRecords} island records: retry later`);
      const id = req.resumeIslandId ?? `island-${this.nextSerial++}`;
      isl = newIslandRecord(id, caps, batchSizeFor(caps, cfg), now);
      this.byId.set(id, isl);
    }
    this.setStatus(isl, 'online', 'joined');
    isl.lastSeen = now;
    return ok(isl);
  }

  /** The island's record; E_UNKNOWN_ISLAND, or E_BANNED when `live` and it is banned. */
  lookup(islandId: string, live: boolean): Result<IslandRecord> {
    const isl = this.byId.get(islandId);
    if (!isl) return err(ErrorCode.UNKNOWN_ISLAND, `no island ${islandId}`);
    if (live && isl.status === 'banned') return err(ErrorCode.BANNED, `island ${islandId} is banned`);
    return ok(isl);
  }

  /** Marks a known island, not banned, alive now. */
  heartbeat(islandId: string, now: number): Result<void> {
    const isl = this.lookup(islandId, true);
    if (!isl.ok) return isl;
    this.touch(isl.value, now);
    return ok(undefined);
  }

  /** Seen now: an offline or departed island is online again. */
  touch(isl: IslandRecord, now: number): void {
    isl.lastSeen = Math.max(isl.lastSeen, now);
    if (isl.status === 'offline' || isl.status === 'left') this.setStatus(isl, 'online', 'seen again');
  }

  setStatus(isl: IslandRecord, status: IslandStatus, reason: string): void {
    if (isl.status === status && reason !== 'joined') return;
    isl.status = status;
    this.emit({ type: 'island', islandId: isl.id, status, reason });
  }

  /** Online islands unseen for `timeoutMs` go offline (and stop waiting for work). */
  timeOut(now: number, timeoutMs: number): void {
    for (const isl of this.byId.values()) {
      if (isl.status === 'online' && now - isl.lastSeen >= timeoutMs) {
        this.setStatus(isl, 'offline', `unseen for ${now - isl.lastSeen} ms`);
        isl.waiting = false;
      }
    }
  }

  /** When the first online island times out (Infinity: none online). */
  nextTimeout(timeoutMs: number): number {
    let t = Infinity;
    for (const isl of this.byId.values()) if (isl.status === 'online') t = Math.min(t, isl.lastSeen + timeoutMs);
    return t;
  }

  /** A new display name for a known island (a volunteer saved one while connected). */
  rename(islandId: string, name: string): Result<void> {
    const found = this.lookup(islandId, false);
    if (!found.ok) return found;
    found.value.name = found.value.caps.name = name.slice(0, 64);
    return ok(undefined);
  }

  /** A validator's verdict on one of the island's deltas (audit.ts); returns its counts. */
  recordAudit(
    islandId: string,
    passed: boolean,
    seq?: number,
  ): Result<{ passed: number; failed: number; lastPassedSeq?: number }> {
    const found = this.lookup(islandId, false);
    if (!found.ok) return found;
    const a = (found.value.audits ??= { passed: 0, failed: 0 });
    if (passed) a.passed++;
    else a.failed++;
    // the last passed audit: a ban's revert reaches back to the deltas after it (server/run/delta-archive.ts)
    if (passed && seq !== undefined) a.lastPassedSeq = Math.max(a.lastPassedSeq ?? -1, seq);
    return ok({ ...a });
  }
}

/** The batch an island trains with: its own within its cap and the run's, else the run's. */
export function batchSizeFor(caps: IslandCaps, cfg: CoordinatorConfig): number {
  const cap = Math.min(cfg.maxBatchSize, caps.maxBatch ?? Infinity);
  return Math.max(1, Math.min(cap, caps.batchSize ?? cfg.batchSize));
}
