// Rounds and assignments on the coordinator's state (state.ts): handing work out or telling an
// island to wait, closing a sync round or an async merge window (the norm bound's last word, the
// robust or weighted mean, the outer step), and opening the next one. The step is taken here, or by
// a host (OuterOffload.step, types.ts): then the round stays closing until the host answers, and
// calls that change rounds are refused meanwhile (coordinator.ts).

import { type Result, err, ok } from '../result.ts';
import { type Assignment, ErrorCode } from '../protocol.ts';
import { combineDeltas, isWeightedMean, weighDeltas } from './aggregate.ts';
import { momentumAnneal } from './anneal.ts';
import type { StepTaken } from './outer-step.ts';
import { assignWork, dropPending, leaveRound, newRound, outerStepOf } from './rounds.ts';
import { roundShouldClose, shortCloseReason, windowShouldClose } from './rounds.ts';
import type { CoordState } from './state.ts';
import { trustLimit } from './trust.ts';
import type { Closing, IslandRecord, PendingDelta, RejectedContribution } from './types.ts';

const budgetReached = (s: CoordState) =>
  err(ErrorCode.DONE, `the run reached its budget of ${s.cfg.totalTokens} tokens`);

/** The island's next assignment, or null: it waits (paused, or its delta is in the open round). */
export function assignOrWait(s: CoordState, isl: IslandRecord, now: number): Result<Assignment | null> {
  if (s.done) return budgetReached(s);
  if (isl.status !== 'online') s.book.setStatus(isl, 'online', 'seen again');
  // an island whose delta is in the open round (or merge window) waits for it to close: it then starts on time (τ = 0)
  if (s.paused || s.round.returned.has(isl.id) || s.round.failed.has(isl.id)) {
    isl.waiting = true;
    isl.roundId = undefined;
    return ok(null);
  }
  return ok(makeAssignment(s, isl, now));
}

function makeAssignment(s: CoordState, isl: IslandRecord, now: number): Assignment {
  const roundId = s.cfg.mode === 'sync' ? s.round.id : ++s.assignSerial;
  const ranges = s.ranges;
  // a shard run: the island's ranges whose Δ can no longer count (not among its last assignments) go back
  if (ranges) ranges.releaseIsland(isl.id, new Set((isl.work ?? []).map((w) => w.roundId)));
  const draw = ranges
    ? (steps: number, B: number) => ranges.take(isl.id, roundId, steps, B * (s.cfg.seqLen + 1))
    : undefined;
  const at = {
    roundId,
    baseVersion: s.version,
    baseHash: s.hash,
    tokensApplied: s.ledger.totals.tokensApplied,
    paramCount: s.paramCount,
    now,
  };
  return assignWork(isl, s.round, s.cfg, s.book.byId.values(), at, draw);
}

/** A shard run: ranges held by islands no longer online, with no accepted Δ, go back to the pool. */
export function releaseGoneRanges(s: CoordState): void {
  s.ranges?.releaseGone((id) => s.book.byId.get(id)?.status !== 'online');
}

/** Emits assignment events for every island told to wait. */
export function releaseWaiting(s: CoordState, now: number): void {
  if (s.paused) return;
  for (const isl of s.book.byId.values()) {
    if (!isl.waiting || isl.status !== 'online') continue;
    isl.waiting = false;
    const result: Result<Assignment> = s.done ? budgetReached(s) : ok(makeAssignment(s, isl, now));
    s.events.push({ type: 'assignment', islandId: isl.id, result });
  }
}

/** A held delta taken back out of the counts, as a rejection. */
export function rejectedFrom(s: CoordState, p: PendingDelta, code: string, message: string): RejectedContribution {
  s.ranges?.release(p.islandId, p.roundId);
  return s.ledger.unaccept(p, s.book.byId.get(p.islandId), code, message);
}

/** The island leaves the open round after `mark` changed its record; the round may close without it. */
export function leaveAs(s: CoordState, islandId: string, now: number, mark: (isl: IslandRecord) => void): Result<void> {
  const found = s.book.lookup(islandId, false);
  if (!found.ok) return found;
  mark(found.value);
  leaveRound(s.round, found.value);
  releaseGoneRanges(s);
  maybeCloseRound(s, now);
  return ok(undefined);
}

/** A ban: its credit goes (what it put into θ stays until a revert), its held deltas are rejected. */
export function banned(s: CoordState, isl: IslandRecord, reason: string): void {
  s.book.setStatus(isl, 'banned', reason);
  isl.revokedTokens = (isl.revokedTokens ?? 0) + isl.tokensContributed;
  isl.tokensContributed = 0;
  const dropped = dropPending(s.round, isl.id).map((p) => {
    s.outerStep.release(p.delta);
    return rejectedFrom(s, p, ErrorCode.BANNED, `island ${isl.id} was banned`);
  });
  if (dropped.length) s.events.push({ type: 'rejected', rejected: dropped });
}

export function maybeCloseRound(s: CoordState, now: number): void {
  if (s.paused || s.closing) return;
  const close =
    s.cfg.mode === 'sync'
      ? roundShouldClose(s.round, s.book.byId, s.cfg, now)
      : windowShouldClose(s.round, s.book.byId.values(), s.cfg.asyncWindow, now);
  if (close) closeRound(s, now);
}

/** Closes the open round: its step taken here (or handed to the host), the next round opened. */
export function closeRound(s: CoordState, now: number): void {
  const r = s.round;
  const cfg = s.cfg;
  const { kept, over } = s.norms.split(r.pending, cfg.normBound);
  const rejected = over.map(({ p, limit }) => {
    s.outerStep.release(p.delta);
    const why = `‖Δ‖/√normSteps = ${p.score.toPrecision(4)} exceeds the round's bound ${limit.toPrecision(4)}`;
    return rejectedFrom(s, p, ErrorCode.NORM_BOUND, `${why} for ${p.steps} steps`);
  });
  // a sync round short of minContributors closes with those present (rounds.ts, shortCloseReason)
  const shortClose = cfg.mode === 'sync' ? (shortCloseReason(r, s.book.byId, cfg, now) ?? undefined) : undefined;
  const closed = { roundId: r.id, baseVersion: r.baseVersion, members: r.members.size, time: now };
  s.events.push({ type: 'round', state: 'closed', ...closed, ...(shortClose ? { shortClose } : {}) });
  const c: Closing = { now, kept, rejected, shortClose };
  if (kept.length === 0) {
    finishClose(s, c, null);
    return;
  }
  // with an offload, the host's workers take the weighted mean (and each delta's agreement with it)
  const host = s.outerStep.offload;
  const inHost = host !== null && isWeightedMean(kept.length, cfg);
  if (inHost) weighDeltas(kept, cfg, s.version);
  else combineDeltas(kept, cfg, s.version, s.outerStep.g, s.accBuf);
  const history = s.ledger.history;
  const anneal = momentumAnneal(cfg, s.ledger.totals.tokensApplied, history[history.length - 1]);
  const size = { ...outerStepOf(cfg, kept, s.book.byId.values()), anneal };
  const taken = s.outerStep.begin(cfg, kept, inHost, size, trustLimit(history, cfg.trustRegion));
  if (taken || !host || !s.outerStep.request) {
    finishClose(s, c, taken);
    return;
  }
  // the host takes it; the round closes when it answers (a throw: a worker died, whenIdle rejects)
  s.closing = c;
  s.inFlight = host.step(s.outerStep.request).then((res) => {
    s.closing = null;
    s.inFlight = null;
    finishClose(s, c, s.outerStep.complete(res, c.kept));
  });
}

/** The round's step taken (or failed, or none: null): record it, then open the next round on the (new) version. */
function finishClose(s: CoordState, c: Closing, taken: Result<StepTaken> | null): void {
  if (taken?.ok) {
    // the steps it trained are its claim (p.tokens = steps × batchSize × seqLen), p.steps the assigned ones
    if (s.ranges) for (const p of c.kept) s.ranges.trainedTokens(p.islandId, p.roundId, p.tokens, s.cfg.seqLen);
    recordUpdate(s, taken.value, c);
    for (const p of c.kept) s.norms.push(p, s.cfg.normBound.window);
  } else {
    if (taken) for (const p of c.kept) c.rejected.push(rejectedFrom(s, p, taken.error.code, taken.error.message));
    if (c.rejected.length) s.events.push({ type: 'rejected', rejected: c.rejected });
  }
  for (const p of c.kept) s.outerStep.release(p.delta);
  // everyone waiting joins the next round
  s.round = newRound(s.round.id + 1, s.version, c.now);
  s.events.push({ type: 'round', roundId: s.round.id, baseVersion: s.version, state: 'open', members: 0, time: c.now });
  releaseWaiting(s, c.now);
}

/** The new version: counters, credit, history (the ledger), the update message; emits the 'update' event. */
function recordUpdate(s: CoordState, step: StepTaken, c: Closing): void {
  const cfg = s.cfg;
  const next = {
    version: s.version + 1,
    prevHash: s.hash,
    hash: step.hash,
    frame: step.frame,
    time: c.now,
    updateNorm: step.updateNorm,
    shortClose: c.shortClose,
    trustGain: step.trustGain,
  };
  const { update, contributors, stats } = s.ledger.closeVersion(c.kept, s.book.byId, next, cfg.historyLimit);
  s.version = update.version;
  s.hash = update.hash;
  s.outerStep.downlink.keep(update, cfg.keepUpdates);
  s.events.push({ type: 'update', update, contributors, rejected: c.rejected, stats });
  if (cfg.totalTokens > 0 && update.totalTokens >= cfg.totalTokens && !s.done) {
    s.done = true;
    s.events.push({ type: 'done', version: s.version, totalTokens: update.totalTokens });
  }
}
