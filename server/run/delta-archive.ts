// Bans that reach back: the run keeps, per version, the deltas that made it (their frames as
// received and what the outer step read of them), so an operator can take a banned island's deltas
// out of θ exactly: θ is rebuilt from the newest kept checkpoint before the first of them by taking
// every later outer step again without them (Coordinator.replayStep), and the live coordinator
// adopts the result as a new version (Coordinator.adoptRebuilt). Replicas fetch the new θ.
//
//   <run>/deltas/v00000012.bin: u32 LE length of the JSON, the JSON ({ version, time, contributions }),
//                               the frames in order
//
// Kept as far back as the oldest kept checkpoint (a revert needs one before the first removed
// delta). Cost, measured in docs/operations.md ("Revert").

import { existsSync, mkdirSync, readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodeDelta } from '../../core/codec/index.ts';
import type { Contribution, Coordinator } from '../../core/coord/index.ts';
import { type Result, err, ok } from '../../core/result.ts';

/** One delta of a version, as the outer step read it: its contribution's identity and tokens, and more. */
export interface ArchivedDelta
  extends Pick<Contribution, 'islandId' | 'seq' | 'roundId' | 'baseVersion' | 'staleness' | 'tokens'> {
  /** The steps its assignment gave, and ‖Δ‖/√steps (the norm bound's figures). */
  steps: number;
  score: number;
  lossMean: number | null;
  bytes: number;
}

/**
 * `missing`: contributors whose frames are not kept (accepted before a restart): a replay through this version is
 * refused.
 */
interface VersionRecord {
  version: number;
  time: number;
  contributions: ArchivedDelta[];
  missing: number;
}

/** A listed delta of an island (GET /api/admin/islands/:id/deltas). */
export interface IslandDelta {
  version: number;
  seq: number;
  roundId: number;
  baseVersion: number;
  tokens: number;
}

export const RevertError = {
  /** What a revert needs is no longer kept (a checkpoint before the first delta, or a version's deltas). */
  NOT_KEPT: 'E_NOT_KEPT',
} as const;

const FILE_RE = /^v(\d{8,})\.bin$/;

export class DeltaArchive {
  readonly dir: string;
  /** Accepted deltas not yet in a version, by `islandId/seq`. */
  private readonly held = new Map<string, { d: Omit<ArchivedDelta, 'bytes'>; frame: Uint8Array }>();

  /** `dir`: the run folder's deltas folder (store.ts runPaths). */
  constructor(dir: string) {
    this.dir = dir;
    mkdirSync(this.dir, { recursive: true });
  }

  path(version: number): string {
    return join(this.dir, `v${String(version).padStart(8, '0')}.bin`);
  }

  /** An accepted delta: kept until its version is written (or it is rejected at close). */
  hold(d: Omit<ArchivedDelta, 'bytes'>, frame: Uint8Array): void {
    this.held.set(`${d.islandId}/${d.seq}`, { d, frame: frame.slice() });
  }

  drop(islandId: string, seq: number): void {
    this.held.delete(`${islandId}/${seq}`);
  }

  /** The version's deltas go to disk (before the version's commit); files older than `oldest` go. */
  write(version: number, time: number, contributors: readonly Contribution[], oldest: number): void {
    const parts: Uint8Array[] = [];
    const contributions: ArchivedDelta[] = [];
    let missing = 0;
    for (const c of contributors) {
      const key = `${c.islandId}/${c.seq}`;
      const h = this.held.get(key);
      if (!h) {
        missing++;
        continue;
      } // accepted before a restart: its frame is not kept
      this.held.delete(key);
      contributions.push({ ...h.d, staleness: c.staleness, bytes: h.frame.length });
      parts.push(h.frame);
    }
    const json = Buffer.from(JSON.stringify({ version, time, contributions, missing } satisfies VersionRecord));
    const head = Buffer.alloc(4);
    head.writeUInt32LE(json.length, 0);
    writeFileSync(this.path(version), Buffer.concat([head, json, ...parts]));
    for (const v of this.versions())
      if (v < oldest) {
        try {
          unlinkSync(this.path(v));
        } catch {
          /* gone */
        }
      }
  }

  /** Versions kept on disk, oldest first. */
  versions(): number[] {
    return readdirSync(this.dir)
      .map((f) => FILE_RE.exec(f))
      .filter((m) => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
  }

  read(
    version: number,
    paramCount: number,
  ): Result<{ time: number; deltas: Array<ArchivedDelta & { delta: Float32Array }> }> {
    const p = this.path(version);
    if (!existsSync(p)) return err(RevertError.NOT_KEPT, `the deltas of version ${version} are not kept`);
    const buf = readFileSync(p);
    const n = buf.readUInt32LE(0);
    const rec = JSON.parse(buf.subarray(4, 4 + n).toString('utf8')) as VersionRecord;
    if (rec.missing > 0)
      return err(
        RevertError.NOT_KEPT,
        `${rec.missing} delta(s) of version ${version} were accepted before a restart and are not kept`,
      );
    const deltas: Array<ArchivedDelta & { delta: Float32Array }> = [];
    let at = 4 + n;
    for (const c of rec.contributions) {
      const frame = new Uint8Array(buf.buffer, buf.byteOffset + at, c.bytes);
      at += c.bytes;
      const d = decodeDelta(frame, paramCount);
      if (!d.ok) return err(RevertError.NOT_KEPT, `a delta of version ${version} does not decode: ${d.error.message}`);
      deltas.push({ ...c, delta: d.value.slice() });
    }
    return ok({ time: rec.time, deltas });
  }

  /** An island's kept deltas with seq above `afterSeq`, oldest first. */
  list(islandId: string, afterSeq: number): IslandDelta[] {
    const out: IslandDelta[] = [];
    for (const v of this.versions()) {
      const buf = readFileSync(this.path(v));
      const rec = JSON.parse(buf.subarray(4, 4 + buf.readUInt32LE(0)).toString('utf8')) as VersionRecord;
      for (const c of rec.contributions) {
        if (c.islandId === islandId && c.seq > afterSeq)
          out.push({ version: v, seq: c.seq, roundId: c.roundId, baseVersion: c.baseVersion, tokens: c.tokens });
      }
    }
    return out;
  }
}

export interface RevertPlan {
  islandId: string;
  /** Its deltas taken out (seq above its last passed audit). */
  removed: IslandDelta[];
  /** The checkpoint the rebuild starts from, and the versions taken again. */
  fromCheckpoint: number;
  replayed: number;
}

/**
 * Rebuilds θ without the island's deltas after `afterSeq`: from `checkpoint` (a restored
 * coordinator of the newest kept checkpoint before the first of them), every later version's
 * outer step again without them, then `live` adopts it.
 */
export function rebuildWithout(
  live: Coordinator,
  archive: DeltaArchive,
  islandId: string,
  afterSeq: number,
  checkpointBefore: (version: number) => Result<{ version: number; coord: Coordinator }>,
): Result<RevertPlan> {
  const removed = archive.list(islandId, afterSeq);
  if (removed.length === 0)
    return err(RevertError.NOT_KEPT, `no kept delta of ${islandId} after seq ${afterSeq} (nothing to revert)`);
  const ck = checkpointBefore(removed[0].version);
  if (!ck.ok) return ck;
  const replay = ck.value.coord;
  let replayed = 0;
  for (let v = ck.value.version + 1; v <= live.version; v++) {
    const rec = archive.read(v, live.paramCount);
    if (!rec.ok) return rec;
    const kept = rec.value.deltas.filter((d) => !(d.islandId === islandId && d.seq > afterSeq));
    if (kept.length === 0) continue;
    replay.replayStep(
      kept.map((d) => ({ ...d, lossMean: d.lossMean ?? NaN })),
      rec.value.time,
    );
    replayed++;
  }
  live.adoptRebuilt(
    replay,
    removed.reduce((a, d) => a + d.tokens, 0),
  );
  return ok({ islandId, removed, fromCheckpoint: ck.value.version, replayed });
}
