// Sync rounds (when one closes) and the sizing of an assignment (DyLU, the token budget, the
// run tokens per step that drive the inner learning-rate schedule).

import { maxFrameBytes } from '../codec/index.ts';
import { type Assignment, type DeltaMeta, ErrorCode } from '../protocol.ts';
import { median } from './aggregate.ts';
import { AUDITABLE_ENCODINGS } from './audit.ts';
import { type CoordinatorConfig, roundStepsCap, stalenessWeight } from './config.ts';
import { dyluInnerSteps } from './dylu.ts';
import { batchSizeFor } from './island-book.ts';
import type { TokenRange } from './data-ranges.ts';
import type { IslandRecord, PendingDelta, RoundState, ShortClose } from './types.ts';
import { rememberWork } from './validate.ts';

export function onlineCount(islands: Iterable<IslandRecord>): number {
  let n = 0;
  for (const isl of islands) if (isl.status === 'online') n++;
  return n;
}

export function newRound(id: number, baseVersion: number, now: number): RoundState {
  return { id, baseVersion, openedAt: now, members: new Set(), returned: new Map(), failed: new Set(), pending: [] };
}

/** Members still expected or already in: returned, or online without a rejected delta. */
export function liveMembers(r: RoundState, islands: ReadonlyMap<string, IslandRecord>): number {
  let live = 0;
  for (const id of r.members) {
    const isl = islands.get(id);
    if (r.returned.has(id) || (isl && isl.status === 'online' && !r.failed.has(id))) live++;
  }
  return live;
}

export function quorumMet(r: RoundState, islands: ReadonlyMap<string, IslandRecord>, cfg: CoordinatorConfig): boolean {
  const need = Math.max(cfg.minContributors, Math.ceil(cfg.quorum * liveMembers(r, islands)));
  return r.returned.size >= need;
}

/** openedAt + clamp(factor × median return time of this round so far, floor, cap). */
export function graceDeadline(r: RoundState, g: CoordinatorConfig['grace']): number {
  const times = [...r.returned.values()];
  const med = times.length ? median(times) : 0;
  return r.openedAt + Math.min(g.capMs, Math.max(g.floorMs, g.factor * med));
}

/**
 * Why a sync round that holds fewer than `minContributors` deltas closes anyway, or null (it waits):
 * every live member is in and the grace deadline passed ('members-in': nobody else can add to it, and
 * the grace gave a joiner time to), the round timed out ('timeout'), or no member is alive any more
 * ('none-live'). With no delta at all it never closes this way.
 */
export function shortCloseReason(
  r: RoundState,
  islands: ReadonlyMap<string, IslandRecord>,
  cfg: CoordinatorConfig,
  now: number,
): ShortClose | null {
  if (r.pending.length === 0 || r.pending.length >= cfg.minContributors) return null;
  const live = liveMembers(r, islands);
  if (live === 0) return 'none-live';
  if (now >= r.openedAt + cfg.roundTimeoutMs) return 'timeout';
  if (r.returned.size >= live && now >= graceDeadline(r, cfg.grace)) return 'members-in';
  return null;
}

/**
 * All live members in, quorum and grace over, timed out, or only late deltas with nobody to wait for;
 * or every member's delta rejected at submit (an empty close: a fresh round on the same version, else
 * they would wait for this one forever). Short of minContributors: shortCloseReason.
 */
export function roundShouldClose(
  r: RoundState,
  islands: ReadonlyMap<string, IslandRecord>,
  cfg: CoordinatorConfig,
  now: number,
): boolean {
  const live = liveMembers(r, islands);
  if (r.pending.length === 0 && r.failed.size > 0 && live === 0) return true;
  if (r.pending.length < cfg.minContributors) return shortCloseReason(r, islands, cfg, now) !== null;
  const allIn = live > 0 && r.returned.size >= live;
  const byGrace = quorumMet(r, islands, cfg) && now >= graceDeadline(r, cfg.grace);
  const byTimeout = now >= r.openedAt + cfg.roundTimeoutMs;
  return allIn || byGrace || byTimeout || live === 0;
}

/**
 * Whether a rejection (by `code`) of `m` counts as its island's turn in round `r` (not a retryable or repeated one).
 */
export function usesTurn(r: RoundState, m: DeltaMeta | undefined, code: string): boolean {
  return (
    !!m &&
    typeof m.islandId === 'string' &&
    m.roundId === r.id &&
    r.members.has(m.islandId) &&
    !r.returned.has(m.islandId) &&
    code !== ErrorCode.PAUSED &&
    code !== ErrorCode.DUPLICATE &&
    code !== ErrorCode.DONE
  );
}

export interface AssignmentSize {
  steps: number;
  /** The steps before the budget's last round clipped them (DyLU's or the configured H). */
  nominalSteps: number;
  /** Run tokens that pass per inner step of this island (the inner lr schedule's clock). */
  tokensPerStep: number;
}

/**
 * Inner steps for `isl` (DyLU, then never past the token budget split over the online islands) and
 * the run tokens per step: (all islands' tokens/s) × (this island's step time), or N × B × T when
 * speeds are unknown.
 */
export function sizeAssignment(
  isl: IslandRecord,
  islands: Iterable<IslandRecord>,
  cfg: CoordinatorConfig,
  tokensApplied: number,
  remainingMs: number | undefined,
): AssignmentSize {
  // the run's batch may have changed since the island joined (PATCH /api/admin/config batch)
  isl.batchSize = batchSizeFor(isl.caps, cfg);
  const B = isl.batchSize,
    T = cfg.seqLen;
  let fastest: number | undefined;
  let agg = 0,
    allKnown = true,
    online = 0;
  for (const o of islands) {
    if (o.status !== 'online') continue;
    online++;
    if (o.tokensPerSec === undefined) allKnown = false;
    else {
      agg += o.tokensPerSec;
      fastest = Math.max(fastest ?? 0, o.tokensPerSec / (o.batchSize * T));
    }
  }
  let steps = cfg.dylu
    ? dyluInnerSteps({
        tokensPerSec: isl.tokensPerSec,
        fastestStepsPerSec: fastest,
        batchSize: B,
        seqLen: T,
        innerSteps: cfg.innerSteps,
        minInnerSteps: cfg.minInnerSteps,
        maxInnerSteps: roundStepsCap(cfg),
        targetRoundMs: cfg.targetRoundMs,
        remainingMs,
      })
    : Math.min(cfg.innerSteps, roundStepsCap(cfg));
  const nominalSteps = steps;
  if (cfg.totalTokens > 0) {
    // the budget's last round takes all that is left (up to 1.5 H): no one-step tail round that
    // uploads a whole frame and takes a whole momentum step for a few tokens
    const need = Math.ceil(Math.max(0, cfg.totalTokens - tokensApplied) / (Math.max(1, online) * B * T));
    if (need <= Math.ceil(1.5 * steps)) steps = Math.max(1, Math.min(need, roundStepsCap(cfg)));
  }
  // how far the run moves per step of this island: islands step side by side at their speeds, which
  // holds when rounds are sized by speed (async, or DyLU); sync rounds of equal steps move it by every
  // member's step (a fast island's speed there made a slow one's lr schedule race to its end)
  const bySpeed = allKnown && isl.tokensPerSec && (cfg.mode === 'async' || cfg.dylu);
  const tokensPerStep = bySpeed ? (agg * B * T) / isl.tokensPerSec! : Math.max(1, online) * B * T;
  return { steps, nominalSteps, tokensPerStep };
}

/**
 * A fresh assignment for `isl` in the open round (sync) or under a new serial (async): sized by DyLU
 * and the budget, recorded on the island. A round nobody trains in starts again with its first
 * member (an island joining an idle or a fresh server gets a whole round, not the time left of an
 * empty one); a late joiner of a sync round gets the time left in it (not an island back after its
 * ack's round trip).
 */
export function assignWork(
  isl: IslandRecord,
  r: RoundState,
  cfg: CoordinatorConfig,
  islands: Iterable<IslandRecord>,
  at: {
    roundId: number;
    baseVersion: number;
    baseHash: string;
    tokensApplied: number;
    paramCount: number;
    now: number;
  },
  draw?: (steps: number, batchSize: number) => { steps: number; range: TokenRange } | null,
): Assignment {
  const sync = cfg.mode === 'sync',
    now = at.now;
  if (sync && r.members.size === 0 && r.pending.length === 0) r.openedAt = now;
  if (sync) r.members.add(isl.id);
  const late = now - r.openedAt;
  const remainingMs =
    sync && cfg.targetRoundMs > 0 && late > 0.25 * cfg.targetRoundMs
      ? Math.max(0, cfg.targetRoundMs - late)
      : undefined;
  const size = sizeAssignment(isl, islands, cfg, at.tokensApplied, remainingMs);
  // a shard run: the round trains its range (a shard's end may shorten it)
  const drawn = draw?.(size.steps, isl.batchSize);
  if (drawn) size.steps = drawn.steps;
  const a = assignmentMessage(isl, cfg, size, at);
  if (drawn) a.data.range = drawn.range;
  Object.assign(isl, {
    roundId: at.roundId,
    assignedSteps: size.steps,
    nominalSteps: size.nominalSteps,
    assignedAt: now,
    waiting: false,
    dataSteps: isl.dataSteps + size.steps,
  });
  rememberWork(isl, a);
  return a;
}

/** Takes a banned island's deltas out of the open round (it no longer waits for them); returns them. */
export function dropPending(r: RoundState, islandId: string): PendingDelta[] {
  const dropped = r.pending.filter((p) => p.islandId === islandId);
  r.pending = r.pending.filter((p) => p.islandId !== islandId);
  r.returned.delete(islandId);
  r.failed.delete(islandId);
  return dropped;
}

/**
 * When the open round (sync: its timeout, or its grace once quorate or short with every live member in) or
 * merge window (async) must close; Infinity when it holds nothing.
 */
export function roundDeadline(
  r: RoundState,
  islands: ReadonlyMap<string, IslandRecord>,
  cfg: CoordinatorConfig,
): number {
  if (r.pending.length === 0) return Infinity;
  if (cfg.mode === 'async') return windowDeadline(r, cfg.asyncWindow);
  const timeout = r.openedAt + cfg.roundTimeoutMs;
  // short of minContributors: its live members all in, it closes at the grace deadline (shortCloseReason)
  const short = r.pending.length < cfg.minContributors && r.returned.size >= liveMembers(r, islands);
  return quorumMet(r, islands, cfg) || short ? Math.min(timeout, graceDeadline(r, cfg.grace)) : timeout;
}

/** The island stops taking part in the open round (it left or was banned): not a member, no work. */
export function leaveRound(r: RoundState, isl: IslandRecord): void {
  isl.waiting = false;
  isl.roundId = undefined;
  r.members.delete(isl.id);
}

/** The assignment message for `isl` (data starts at its next unused step). */
export function assignmentMessage(
  isl: IslandRecord,
  cfg: CoordinatorConfig,
  size: AssignmentSize,
  at: {
    roundId: number;
    baseVersion: number;
    baseHash: string;
    tokensApplied: number;
    paramCount: number;
    now: number;
  },
): Assignment {
  return {
    islandId: isl.id,
    mode: cfg.mode,
    roundId: at.roundId,
    baseVersion: at.baseVersion,
    baseHash: at.baseHash,
    innerSteps: size.steps,
    batchSize: isl.batchSize,
    seqLen: cfg.seqLen,
    lr: {
      maxLr: cfg.innerLr.maxLr,
      minLr: cfg.innerLr.minLr,
      warmupTokens: cfg.innerLr.warmupTokens,
      totalTokens: cfg.totalTokens,
      tokensStart: at.tokensApplied,
      tokensPerStep: size.tokensPerStep,
      localWarmupSteps: cfg.innerLr.localWarmupSteps,
      weightDecay: cfg.innerLr.weightDecay,
    },
    gradClip: cfg.gradClip,
    freshOptimizer: cfg.freshInnerOptimizer && AUDITABLE_ENCODINGS.includes(cfg.uplink.encoding),
    data: { seed: cfg.dataSeed, stream: isl.stream, stepStart: isl.dataSteps },
    codec: structuredClone(cfg.uplink),
    paramCount: at.paramCount,
    maxFrameBytes: maxFrameBytes(at.paramCount),
    maxStaleness: cfg.maxStaleness,
    targetRoundMs: cfg.targetRoundMs,
    issuedAt: at.now,
    minSeq: isl.lastSeq + 1,
  };
}

/**
 * Async, applied on arrival: weight s(τ) · min(cap, tokens / expected) with expected the mean
 * assigned tokens over online islands; scale weight / N and delayed-Nesterov period N (N online islands).
 */
export function asyncStep(
  cfg: CoordinatorConfig,
  tau: number,
  tokens: number,
  islands: Iterable<IslandRecord>,
): { weight: number; scale: number; period: number } {
  let n = 0,
    assigned = 0,
    sum = 0;
  for (const isl of islands) {
    if (isl.status !== 'online') continue;
    n++;
    if (isl.assignedSteps > 0) {
      sum += isl.assignedSteps * isl.batchSize * cfg.seqLen;
      assigned++;
    }
  }
  n = Math.max(1, n);
  const expected = assigned > 0 ? sum / assigned : cfg.innerSteps * cfg.batchSize * cfg.seqLen;
  const weight = stalenessWeight(cfg.staleness, tau) * Math.min(cfg.maxTokenWeight, tokens / Math.max(1, expected));
  return { weight, scale: weight / n, period: cfg.outer.dnPeriod > 0 ? cfg.outer.dnPeriod : n };
}

// ── async merge windows (Decoupled DiLoCo) ───────────────────────
// Deltas that arrive close together merge into one outer step. The window opens at the first
// delta; `returned` holds each island's round duration. It closes when no online island is still
// working on an assignment, or at openedAt + clamp(fraction × median round duration, floor, cap).

export function windowDeadline(r: RoundState, w: CoordinatorConfig['asyncWindow']): number {
  const durations = [...r.returned.values()];
  const med = durations.length ? median(durations) : 0;
  return r.openedAt + Math.min(w.capMs, Math.max(w.floorMs, w.fraction * med));
}

export function windowShouldClose(
  r: RoundState,
  islands: Iterable<IslandRecord>,
  w: CoordinatorConfig['asyncWindow'],
  now: number,
): boolean {
  if (r.pending.length === 0) return false;
  if (now >= windowDeadline(r, w)) return true;
  for (const isl of islands) if (isl.status === 'online' && isl.roundId !== undefined) return false;
  return true;
}

/**
 * The outer step of a merge window: scale = the window's tokens / the tokens of one round of every
 * online island (at least a nominal one; capped at 1), so a window that holds part of the fleet
 * moves θ, momentum included, by its share (OuterOptimizer.propose's `share`); delayed Nesterov's
 * period counts windows (dnPeriod, default 1).
 */
export function windowStep(
  cfg: CoordinatorConfig,
  kept: Array<{ tokens: number }>,
  islands: Iterable<IslandRecord>,
): { scale: number; period: number; share: boolean } {
  let round = 0;
  for (const isl of islands) {
    if (isl.status !== 'online') continue;
    // a nominal round (DyLU's target time at the island's measured speed, or its steps before the
    // budget's clip), not the budget's short last assignments: tail windows of a few tokens each took
    // nearly a whole momentum step at a share of a short round and overshot (the twin of a fleet on
    // tiny with int8 deltas: eval 3.12 → 11.02 over its last two windows; 3.13 with this)
    const nominal =
      cfg.dylu && cfg.targetRoundMs > 0 && isl.tokensPerSec ? (isl.tokensPerSec * cfg.targetRoundMs) / 1000 : 0;
    round += Math.max(Math.max(isl.assignedSteps, isl.nominalSteps ?? 0) * isl.batchSize * cfg.seqLen, nominal);
  }
  const tokens = kept.reduce((a, p) => a + p.tokens, 0);
  return {
    scale: round > 0 ? Math.min(1, tokens / round) : 1,
    period: cfg.outer.dnPeriod > 0 ? cfg.outer.dnPeriod : 1,
    share: true,
  };
}

/** Holds a counted delta in the open round (sync) or merge window (async, which opens with it). */
export function hold(
  r: RoundState,
  p: PendingDelta,
  isl: IslandRecord,
  sync: boolean,
  late: boolean,
  now: number,
): void {
  if (!sync && r.pending.length === 0) r.openedAt = now;
  r.pending.push(p);
  if (!sync) r.returned.set(isl.id, now - isl.assignedAt);
  else if (!late && r.members.has(isl.id)) r.returned.set(isl.id, now - r.openedAt);
}

/**
 * The outer step for the combined deltas `kept` (their weights already set): sync scale 1; a merge
 * window windowStep; async without a window (fraction 0) each arrival alone, weighted and scaled as
 * Async Local-SGD does. One island alone (soloPlainStep) takes its Δ as it is, period 0 = a plain
 * step: momentum would amplify one island's short rounds several times over.
 */
export function outerStepOf(
  cfg: CoordinatorConfig,
  kept: PendingDelta[],
  islands: Iterable<IslandRecord>,
): { scale: number; period: number; share?: boolean } {
  const all = [...islands];
  if (cfg.soloPlainStep && kept.length === 1 && onlineCount(all) <= 1) return { scale: 1, period: 0 };
  if (cfg.mode === 'sync') return { scale: 1, period: 1 };
  if (cfg.asyncWindow.fraction > 0) return windowStep(cfg, kept, all);
  const { weight, scale, period } = asyncStep(cfg, kept[0].staleness, kept[0].tokens, all);
  kept[0].weight = weight;
  return { scale, period };
}
