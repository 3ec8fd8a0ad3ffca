// The coordinator's counters: rejections per code, and the per-version dashboard stats.

import type { DeltaMeta } from '../protocol.ts';
import { type Contribution, type CoordinatorTotals, type IslandRecord, type PerVersion, STALENESS_BUCKETS, SUBMITTED_ROUNDS_KEPT, type VersionStats } from './types.ts';

/** Counts one rejection by `code` (per version, in the totals, on the island) and charges `tokens` as submitted. */
export function countRejection(pv: PerVersion, totals: CoordinatorTotals, isl: IslandRecord | undefined, code: string, tokens: number): void {
  pv.rejected[code] = (pv.rejected[code] ?? 0) + 1;
  totals.rejected[code] = (totals.rejected[code] ?? 0) + 1;
  if (isl) {
    isl.rejected[code] = (isl.rejected[code] ?? 0) + 1;
    isl.tokensSubmitted += tokens;
  }
  totals.tokensSubmitted += tokens;
  totals.goodput = totals.tokensApplied / Math.max(1, totals.tokensSubmitted);
}

/** Token-weighted mean of the finite losses (NaN when none). */
export function meanLoss(losses: Array<{ tokens: number; loss: number }>): number {
  let lw = 0, ls = 0;
  for (const l of losses) if (Number.isFinite(l.loss)) { lw += l.tokens; ls += l.tokens * l.loss; }
  return lw > 0 ? ls / lw : NaN;
}

export function versionStats(
  u: { version: number; time: number; tokens: number; trainLoss: number; bytesOut: number; updateNorm: number },
  contributors: Contribution[], pv: PerVersion, totals: CoordinatorTotals,
): VersionStats {
  const hist = new Array<number>(STALENESS_BUCKETS).fill(0);
  for (const c of contributors) hist[Math.min(STALENESS_BUCKETS - 1, c.staleness)]++;
  return {
    version: u.version, time: u.time, tokens: u.tokens, totalTokens: totals.tokensApplied, trainLoss: u.trainLoss,
    contributors: contributors.length, stalenessHist: hist, accepted: pv.accepted, rejected: { ...pv.rejected },
    bytesIn: pv.bytesIn, bytesOut: u.bytesOut,
    compressionRatio: pv.frameBytesAccepted > 0 ? pv.rawBytesAccepted / pv.frameBytesAccepted : 0,
    goodput: totals.goodput, updateNorm: u.updateNorm,
  };
}

/** Counts a delta (per version, in the totals) and records it on its island: replay guards, staleness, tokens, speed EMA. */
export function countAccepted(
  isl: IslandRecord, m: DeltaMeta, tau: number, pv: PerVersion, totals: CoordinatorTotals, bytes: { raw: number; frame: number },
): void {
  totals.tokensSubmitted += m.tokens;
  totals.accepted += 1;
  pv.accepted += 1;
  pv.rawBytesAccepted += bytes.raw;
  pv.frameBytesAccepted += bytes.frame;
  isl.lastSeq = m.seq;
  isl.submittedRounds.push(m.roundId);
  if (isl.submittedRounds.length > SUBMITTED_ROUNDS_KEPT) isl.submittedRounds.shift();
  isl.lastBaseVersion = m.baseVersion;
  isl.lastStaleness = tau;
  isl.tokensSubmitted += m.tokens;
  if (m.elapsedMs > 0 && m.tokens > 0) {
    const v = (1000 * m.tokens) / m.elapsedMs;
    isl.tokensPerSec = isl.tokensPerSec === undefined || isl.accepted === 0 ? v : 0.5 * isl.tokensPerSec + 0.5 * v;
  }
  if (isl.roundId === m.roundId) isl.roundId = undefined;
}
