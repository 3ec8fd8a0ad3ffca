// Where a delta may go: the checks on its sequence, round, base version and staleness that come
// before decoding. Pure: the coordinator counts and rejects from the answer.

import { ErrorCode, type DeltaMeta } from '../protocol.ts';
import type { CoordinatorConfig } from './config.ts';
import type { IslandRecord } from './types.ts';

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
export interface DeltaProblem { ok: false; code: string; message: string; tokens: number }
export interface DeltaPlace { ok: true; tau: number; late: boolean }

export function checkDeltaPlace(m: DeltaMeta, isl: IslandRecord, c: DeltaPlaceContext): DeltaPlace | DeltaProblem {
  const no = (code: string, message: string, tokens = m.tokens): DeltaProblem => ({ ok: false, code, message, tokens });
  const cfg = c.cfg;
  if (c.paused) return no(ErrorCode.PAUSED, 'training is paused: resubmit after resume', 0);
  if (c.done) return no(ErrorCode.DONE, `the run reached its budget of ${cfg.totalTokens} tokens`);
  if (m.seq <= isl.lastSeq) return no(ErrorCode.DUPLICATE, `seq ${m.seq} was already counted (last ${isl.lastSeq})`, 0);
  if (isl.submittedRounds.includes(m.roundId)) return no(ErrorCode.DUPLICATE, `a delta for round ${m.roundId} was already counted`, 0);
  if (m.baseVersion > c.version) return no(ErrorCode.FUTURE_VERSION, `base version ${m.baseVersion} is ahead of ${c.version}`);
  const sync = cfg.mode === 'sync';
  if (sync && m.roundId > c.roundId) return no(ErrorCode.FUTURE_VERSION, `round ${m.roundId} has not opened (current ${c.roundId})`);
  if (!sync && m.roundId > c.assignSerial) return no(ErrorCode.FUTURE_VERSION, `assignment ${m.roundId} was never issued`);
  const tau = c.version - m.baseVersion;
  const late = sync && (m.roundId < c.roundId || m.baseVersion < c.roundBaseVersion);
  if (late && cfg.lateDeltas === 'drop') return no(ErrorCode.STALE, `round ${m.roundId} already closed`);
  if (tau > cfg.maxStaleness) return no(ErrorCode.STALE, `staleness ${tau} exceeds ${cfg.maxStaleness}`);
  return { ok: true, tau, late };
}
