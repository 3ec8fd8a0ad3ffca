// Island records out of the checkpoint. A checkpoint holds, per island, only what resuming needs to
// stay exact: the full record of each island that is online (it may have work in flight), and for
// every other one a short tuple: its replay guard (last counted seq, rounds counted), status, credit
// and accepted count. The full records (names, caps, statistics, assignments) go to their own file,
// `<run>/islands.json`, rewritten whole (so it is always compact: one record per island) at most
// once per ISLANDS_FILE_MS and when the run closes or checkpoints on request. On restore, the file's
// records are taken and the checkpoint's figures laid over them (the checkpoint is never older).

import { existsSync, readFileSync } from 'node:fs';
import type { IslandRecord } from '../../core/coord/index.ts';
import { newIslandRecord } from '../../core/coord/types.ts';
import { writeFileAtomicAsync } from '../fsutil.ts';

/** The islands file is rewritten at most this often (ms). */
export const ISLANDS_FILE_MS = 10_000;

/**
 * [id, lastSeq, submittedRounds, status, tokensContributed, accepted, revokedTokens]: an offline island in a
 * checkpoint.
 */
export type IslandCore = [string, number, number[], IslandRecord['status'], number, number, number];

/** The checkpoint's islands: full records of the online ones, the core of the rest. */
export function splitIslands(records: IslandRecord[]): { islands: IslandRecord[]; islandCore: IslandCore[] } {
  const islands: IslandRecord[] = [];
  const islandCore: IslandCore[] = [];
  for (const r of records) {
    if (r.status === 'online' || r.waiting || r.roundId !== undefined) islands.push(r);
    else
      islandCore.push([
        r.id,
        r.lastSeq,
        r.submittedRounds,
        r.status,
        r.tokensContributed,
        r.accepted,
        r.revokedTokens ?? 0,
      ]);
  }
  return { islands, islandCore };
}

/** The records as resumed: the checkpoint's full ones, and each core laid over the file's record (or a bare one). */
export function joinIslands(
  full: IslandRecord[],
  core: IslandCore[] | undefined,
  file: Map<string, IslandRecord>,
): IslandRecord[] {
  const out = [...full];
  for (const [id, lastSeq, submittedRounds, status, tokensContributed, accepted, revokedTokens] of core ?? []) {
    const base = file.get(id) ?? newIslandRecord(id, { engine: 'cpu' }, 1, 0);
    out.push({
      ...base,
      id,
      lastSeq,
      submittedRounds,
      status,
      tokensContributed,
      accepted,
      ...(revokedTokens ? { revokedTokens } : {}),
      waiting: false,
      roundId: undefined,
    });
  }
  return out;
}

export class IslandFile {
  readonly path: string;
  private writtenAt = -Infinity;
  private writing: Promise<void> | null = null;

  /** `path`: the run folder's islands file (store.ts runPaths). */
  constructor(path: string) {
    this.path = path;
  }

  /** The records of the file, by id (empty when there is none or it does not parse). */
  read(): Map<string, IslandRecord> {
    const out = new Map<string, IslandRecord>();
    if (!existsSync(this.path)) return out;
    try {
      for (const r of JSON.parse(readFileSync(this.path, 'utf8')) as IslandRecord[]) out.set(r.id, r);
    } catch {
      /* torn or foreign: the checkpoint's figures stand alone */
    }
    return out;
  }

  /** Rewrites the file from `records()` when it is due (or `now`), one write at a time. */
  maybeWrite(records: () => IslandRecord[], force = false, now = Date.now()): Promise<void> {
    if (this.writing) return force ? this.writing.then(() => this.maybeWrite(records, true)) : this.writing;
    if (!force && now - this.writtenAt < ISLANDS_FILE_MS) return Promise.resolve();
    this.writtenAt = now;
    const json = JSON.stringify(records());
    this.writing = writeFileAtomicAsync(this.path, json).finally(() => {
      this.writing = null;
    });
    return this.writing;
  }
}
