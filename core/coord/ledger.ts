// The coordinator's counters: the run's totals, this version's figures, rejections per code, and
// the per-version dashboard stats (the Ledger holds them; a new version closes its figures).

import type { DeltaMeta, UpdateMsg } from '../protocol.ts';
import {
  type Contribution,
  type CoordinatorTotals,
  type IslandRecord,
  type PendingDelta,
  type PerVersion,
  type RejectedContribution,
  STALENESS_BUCKETS,
  type ShortClose,
  SUBMITTED_ROUNDS_KEPT,
  type VersionStats,
  newPerVersion,
} from './types.ts';

/** The run's totals, the figures of the version in progress, and the stats of the versions kept. */
export class Ledger {
  totals: CoordinatorTotals = {
    version: 0,
    tokensApplied: 0,
    tokensSubmitted: 0,
    accepted: 0,
    rejected: {},
    bytesIn: 0,
    bytesOut: 0,
    goodput: 1,
  };
  perVersion: PerVersion = newPerVersion();
  history: VersionStats[] = [];

  /** Empty, or carrying on from a snapshot's figures. */
  constructor(from?: Pick<Ledger, 'totals' | 'perVersion' | 'history'>) {
    if (!from) return;
    this.totals = from.totals;
    this.perVersion = from.perVersion;
    this.history = from.history;
  }

  /** Frame bytes received, whatever becomes of them. */
  received(bytes: number): void {
    this.perVersion.bytesIn += bytes;
    this.totals.bytesIn += bytes;
  }

  /** Counts a rejection by `code`, charging `tokens` as submitted. */
  reject(isl: IslandRecord | undefined, code: string, tokens: number): void {
    countRejection(this.perVersion, this.totals, isl, code, tokens);
  }

  /** Counts a delta and records it on its island (countAccepted). */
  accept(isl: IslandRecord, m: DeltaMeta, tau: number, bytes: { raw: number; frame: number }): void {
    countAccepted(isl, m, tau, this.perVersion, this.totals, bytes);
  }

  /**
   * A held delta rejected after all (its round's norm bound, a ban, a failed step): its acceptance
   * undone, the rejection counted.
   */
  unaccept(p: PendingDelta, isl: IslandRecord | undefined, code: string, message: string): RejectedContribution {
    const { delta: _d, score: _s, lossMean: _l, arrivedAt: _a, weight: _w, ...c } = p;
    if (isl) isl.accepted -= 1;
    countRejection(this.perVersion, this.totals, isl, code, 0);
    this.perVersion.accepted -= 1;
    this.totals.accepted -= 1;
    return { ...c, error: { code, message } };
  }

  /**
   * Version `u.version` made of `kept`, published as `u.frame`: the totals, each island's credit, its
   * update message and stats (kept, the last `historyLimit`); the next version's figures start anew.
   */
  closeVersion(
    kept: PendingDelta[],
    islands: ReadonlyMap<string, IslandRecord>,
    u: {
      version: number;
      prevHash: string;
      hash: string;
      frame: Uint8Array;
      time: number;
      updateNorm: number;
      shortClose?: ShortClose;
      trustGain?: number;
    },
    historyLimit: number,
  ): { update: UpdateMsg; contributors: Contribution[]; stats: VersionStats } {
    const version = u.version,
      bytesOut = u.frame.length;
    const contributors: Contribution[] = kept.map(
      ({ islandId, seq, roundId, baseVersion, staleness, tokens, weight, cosine, normRatio }) => ({
        islandId,
        seq,
        roundId,
        baseVersion,
        staleness,
        tokens,
        weight,
        cosine,
        normRatio,
      }),
    );
    const t = this.totals;
    const tokens = contributors.reduce((a, k) => a + k.tokens, 0);
    t.tokensApplied += tokens;
    t.version = version;
    t.bytesOut += bytesOut;
    t.goodput = t.tokensApplied / Math.max(1, t.tokensSubmitted);
    if (u.shortClose) t.shortRounds = (t.shortRounds ?? 0) + 1;
    if (u.trustGain !== undefined) t.trustClips = (t.trustClips ?? 0) + 1;
    const trainLoss = meanLoss(kept.map((p) => ({ tokens: p.tokens, loss: p.lossMean })));
    for (const k of contributors) {
      const isl = islands.get(k.islandId);
      if (isl) isl.tokensContributed += k.tokens;
    }
    const stats = versionStats(
      {
        version,
        time: u.time,
        tokens,
        trainLoss,
        bytesOut,
        updateNorm: u.updateNorm,
        shortClose: u.shortClose,
        trustGain: u.trustGain,
      },
      contributors,
      this.perVersion,
      t,
    );
    this.perVersion = newPerVersion();
    this.history.push(stats);
    if (this.history.length > historyLimit) this.history.splice(0, this.history.length - historyLimit);
    const update: UpdateMsg = {
      version,
      prevVersion: version - 1,
      prevHash: u.prevHash,
      hash: u.hash,
      frame: u.frame,
      time: u.time,
      tokens,
      totalTokens: t.tokensApplied,
      contributors: contributors.length,
      trainLoss,
    };
    return { update, contributors, stats };
  }
}

/** Counts one rejection by `code` (per version, in the totals, on the island) and charges `tokens` as submitted. */
export function countRejection(
  pv: PerVersion,
  totals: CoordinatorTotals,
  isl: IslandRecord | undefined,
  code: string,
  tokens: number,
): void {
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
  let lw = 0,
    ls = 0;
  for (const l of losses)
    if (Number.isFinite(l.loss)) {
      lw += l.tokens;
      ls += l.tokens * l.loss;
    }
  return lw > 0 ? ls / lw : NaN;
}

export function versionStats(
  u: {
    version: number;
    time: number;
    tokens: number;
    trainLoss: number;
    bytesOut: number;
    updateNorm: number;
    shortClose?: ShortClose;
    trustGain?: number;
  },
  contributors: Contribution[],
  pv: PerVersion,
  totals: CoordinatorTotals,
): VersionStats {
  const hist = new Array<number>(STALENESS_BUCKETS).fill(0);
  for (const c of contributors) hist[Math.min(STALENESS_BUCKETS - 1, c.staleness)]++;
  return {
    version: u.version,
    time: u.time,
    tokens: u.tokens,
    totalTokens: totals.tokensApplied,
    trainLoss: u.trainLoss,
    contributors: contributors.length,
    stalenessHist: hist,
    accepted: pv.accepted,
    rejected: { ...pv.rejected },
    bytesIn: pv.bytesIn,
    bytesOut: u.bytesOut,
    compressionRatio: pv.frameBytesAccepted > 0 ? pv.rawBytesAccepted / pv.frameBytesAccepted : 0,
    goodput: totals.goodput,
    updateNorm: u.updateNorm,
    ...(u.shortClose ? { shortClose: u.shortClose } : {}),
    ...(u.trustGain !== undefined ? { trustGain: u.trustGain } : {}),
  };
}

/**
 * Counts a delta (per version, in the totals) and records it on its island: replay guards,
 * staleness, tokens, speed EMA.
 */
export function countAccepted(
  isl: IslandRecord,
  m: DeltaMeta,
  tau: number,
  pv: PerVersion,
  totals: CoordinatorTotals,
  bytes: { raw: number; frame: number },
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
