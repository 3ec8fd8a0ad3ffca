// Where a delta may go, and what it may claim: the checks on its work, sequence, round, base
// version and staleness that come before decoding. Pure: the coordinator counts and rejects from
// the answer.

import { type Assignment, ErrorCode, type DeltaMeta } from '../protocol.ts';
import { ENCODINGS, type Encoding, FRAME_VERSION } from '../codec/index.ts';
import { normSteps } from './aggregate.ts';
import type { CoordinatorConfig } from './config.ts';
import type { AssignedWork, IslandRecord } from './types.ts';

/** A frame's first bytes: magic 'ATLD', format version, encoding id. */
const MAGIC = [0x41, 0x54, 0x4c, 0x44];

/**
 * The encoding a frame names (header byte 5), read alone: the claim's check reads no other byte, so
 * a frame of another encoding is E_BAD_CLAIM whatever the rest of its header holds. Null when the
 * bytes do not start as a frame of this format (the codec's own codes answer that later).
 */
export function frameEncoding(frame: Uint8Array): Encoding | null {
  if (frame.length < 6 || frame[4] !== FRAME_VERSION || MAGIC.some((b, i) => frame[i] !== b)) return null;
  return ENCODINGS[frame[5]] ?? null;
}

/** Assignments kept per island to check claims against (sync rounds accept late deltas). */
const WORK_KEPT = 4;
/** Compute may take less than the round's wall time (download, upload), but not less than half. */
const MAX_SPEEDUP = 2;

export interface DeltaPlaceContext {
  cfg: CoordinatorConfig;
  version: number;
  paused: boolean;
  done: boolean;
  /** Sync: the open round's id and base version. */
  roundId: number;
  roundBaseVersion: number;
  /** Async: the last assignment serial issued. */
  assignSerial: number;
}

/** A rejection, with the tokens charged to the island's submitted count. */
export interface DeltaProblem {
  ok: false;
  code: string;
  message: string;
  tokens: number;
}
export interface DeltaPlace {
  ok: true;
  tau: number;
  late: boolean;
}

export function checkDeltaPlace(m: DeltaMeta, isl: IslandRecord, c: DeltaPlaceContext): DeltaPlace | DeltaProblem {
  const no = (code: string, message: string, tokens = m.tokens): DeltaProblem => ({ ok: false, code, message, tokens });
  const cfg = c.cfg;
  if (c.paused) return no(ErrorCode.PAUSED, 'training is paused: resubmit after resume', 0);
  if (c.done) return no(ErrorCode.DONE, `the run reached its budget of ${cfg.totalTokens} tokens`);
  if (m.seq <= isl.lastSeq) return no(ErrorCode.DUPLICATE, `seq ${m.seq} was already counted (last ${isl.lastSeq})`, 0);
  if (isl.submittedRounds.includes(m.roundId))
    return no(ErrorCode.DUPLICATE, `a delta for round ${m.roundId} was already counted`, 0);
  if (m.baseVersion > c.version)
    return no(ErrorCode.FUTURE_VERSION, `base version ${m.baseVersion} is ahead of ${c.version}`);
  const sync = cfg.mode === 'sync';
  if (sync && m.roundId > c.roundId)
    return no(ErrorCode.FUTURE_VERSION, `round ${m.roundId} has not opened (current ${c.roundId})`);
  if (!sync && m.roundId > c.assignSerial)
    return no(ErrorCode.FUTURE_VERSION, `assignment ${m.roundId} was never issued`);
  const tau = c.version - m.baseVersion;
  const late = sync && (m.roundId < c.roundId || m.baseVersion < c.roundBaseVersion);
  if (late && cfg.lateDeltas === 'drop') return no(ErrorCode.STALE, `round ${m.roundId} already closed`);
  if (tau > cfg.maxStaleness) return no(ErrorCode.STALE, `staleness ${tau} exceeds ${cfg.maxStaleness}`);
  return { ok: true, tau, late };
}

/** Keeps an assignment's figures on the island's record (the last WORK_KEPT rounds). */
export function rememberWork(isl: IslandRecord, a: Assignment): void {
  // records restored from older checkpoints have none; a round assigned again keeps only its newest
  const list = (isl.work = (isl.work ?? []).filter((w) => w.roundId !== a.roundId));
  list.push({
    roundId: a.roundId,
    baseVersion: a.baseVersion,
    encoding: a.codec.encoding,
    fresh: a.freshOptimizer === true,
    steps: a.innerSteps,
    batchSize: a.batchSize,
    issuedAt: a.issuedAt,
    data: { ...a.data },
    lr: { ...a.lr },
    gradClip: a.gradClip,
  });
  if (list.length > WORK_KEPT) list.shift();
}

/** The host released an assignment on an older (durable) base than it was made on (async): its record follows. */
export function rebaseWork(isl: IslandRecord, roundId: number, baseVersion: number): void {
  for (const w of isl.work ?? []) if (w.roundId === roundId) w.baseVersion = baseVersion;
}

export interface DerivedWork {
  ok: true;
  meta: DeltaMeta;
  assignedSteps: number;
  work: AssignedWork;
}
/** A Δ's meta as claimed: `tokens` may be left out where the protocol derives it (`mix:ready`). */
export type ClaimedMeta = Omit<DeltaMeta, 'tokens'> & { tokens?: number };

/**
 * Work is derived, not claimed: a Δ names its assignment (roundId), which must be one of the
 * island's last WORK_KEPT, and matches it. Its base version is the assignment's (async: or a
 * newer one, up to the current version: the island caught up before training); its frame uses the
 * assignment's encoding; `steps` may not exceed the assignment's; `tokens` must be exactly
 * steps × batchSize × seqLen of the assignment (absent: taken as that); the speed (tokens / elapsedMs)
 * may exceed the one the server observed (tokens over the time since it issued the assignment) by
 * MAX_SPEEDUP at most.
 * Every failure is E_BAD_CLAIM, charged nothing.
 */
export function checkWork(
  m: ClaimedMeta,
  frameEncoding: Encoding | null,
  isl: IslandRecord,
  cfg: CoordinatorConfig,
  now: number,
): DerivedWork | DeltaProblem {
  const no = (message: string): DeltaProblem => ({ ok: false, code: ErrorCode.BAD_CLAIM, message, tokens: 0 });
  const a = isl.work?.find((w) => w.roundId === m.roundId);
  if (!a)
    return no(
      `round ${m.roundId} is not one of the assignments this server holds for ${isl.id} ` +
        `(its last ${WORK_KEPT}): take the next assignment`,
    );
  if (a.baseVersion !== undefined) {
    const fits = cfg.mode === 'sync' ? m.baseVersion === a.baseVersion : m.baseVersion >= a.baseVersion;
    if (!fits)
      return no(
        `base version ${m.baseVersion} does not match assignment ${a.roundId}'s ` +
          `${cfg.mode === 'sync' ? '' : 'at least '}${a.baseVersion}`,
      );
  }
  if (a.encoding !== undefined && frameEncoding !== null && frameEncoding !== a.encoding)
    return no(`frame encoding ${frameEncoding} is not assignment ${a.roundId}'s ${a.encoding}`);
  if (m.steps > a.steps) return no(`steps ${m.steps} exceed the assignment's ${a.steps}`);
  const tokens = m.steps * a.batchSize * cfg.seqLen;
  if (m.tokens !== undefined && m.tokens !== tokens)
    return no(`tokens ${m.tokens} ≠ steps × batchSize × seqLen = ${m.steps} × ${a.batchSize} × ${cfg.seqLen}`);
  const elapsedMs = Math.max(m.elapsedMs, (now - a.issuedAt) / MAX_SPEEDUP);
  return { ok: true, meta: { ...m, tokens, elapsedMs }, assignedSteps: a.steps, work: a };
}

/**
 * Every check before decoding, in order: a known island, not banned (then `seen` marks it alive),
 * its work derived (checkWork), the delta's place (checkDeltaPlace). A problem names the island
 * when it is known, for the counts.
 */
export function checkDelta(
  meta: DeltaMeta,
  frameEncoding: Encoding | null,
  islands: ReadonlyMap<string, IslandRecord>,
  c: DeltaPlaceContext,
  now: number,
  seen: (isl: IslandRecord) => void,
):
  | { ok: true; isl: IslandRecord; m: DeltaMeta; steps: number; normSteps: number; tau: number; late: boolean }
  | (DeltaProblem & { isl?: IslandRecord }) {
  const isl = islands.get(meta.islandId);
  if (!isl) return { ok: false, code: ErrorCode.UNKNOWN_ISLAND, message: `no island ${meta.islandId}`, tokens: 0 };
  if (isl.status === 'banned')
    return { ok: false, isl, code: ErrorCode.BANNED, message: `island ${isl.id} is banned`, tokens: 0 };
  seen(isl);
  // from here on, tokens, steps and speed are the server's figures
  const work = checkWork(meta, frameEncoding, isl, c.cfg, now);
  if (!work.ok) return { ...work, isl };
  const place = checkDeltaPlace(work.meta, isl, c);
  if (!place.ok) return { ...place, isl };
  const w = work.work;
  return {
    ok: true,
    isl,
    m: work.meta,
    steps: work.assignedSteps,
    normSteps: normSteps(w.lr, work.assignedSteps, w.fresh ? 0 : (w.data?.stepStart ?? 0)),
    tau: place.tau,
    late: place.late,
  };
}
