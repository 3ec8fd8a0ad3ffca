// The submit pipeline on the coordinator's state (state.ts): one delta checked (its meta, its claim
// against its assignment: validate.ts), decoded (here, or already by the host's workers), judged by
// the norm bound, counted (the ledger), and held until its round or merge window closes (close.ts).
// Never throws on input; a rejection changes neither θ nor the optimizer state, only counters.

import { decodeDelta } from '../codec/index.ts';
import { type Result, err, ok } from '../result.ts';
import { ErrorCode, validateDeltaMeta } from '../protocol.ts';
import { l2 } from './aggregate.ts';
import { maybeCloseRound } from './close.ts';
import { hold, usesTurn } from './rounds.ts';
import type { CoordState } from './state.ts';
import type { Contribution, DeltaSubmission, IslandRecord, SubmitAccepted } from './types.ts';
import { checkDelta, frameEncoding } from './validate.ts';

const KEEPS_RANGE = new Set<string>([ErrorCode.DUPLICATE, ErrorCode.PAUSED, ErrorCode.DONE]);

/** Validates, counts and holds one delta (see the durability contract in types.ts: ack from events). */
export function submitDelta(s: CoordState, sub: DeltaSubmission, now: number): Result<SubmitAccepted> {
  const r = validateAndCount(s, sub, now);
  // a shard run: a rejected Δ's range goes back to the pool (not for a resend or a retryable refusal)
  if (!r.ok && s.ranges && typeof sub.meta?.islandId === 'string' && !KEEPS_RANGE.has(r.error.code))
    s.ranges.refused(sub.meta.islandId, sub.meta.roundId);
  // sync: a member's rejected delta uses its turn, so the round no longer waits for it (no stall on a bad island)
  if (!r.ok && s.cfg.mode === 'sync' && usesTurn(s.round, sub.meta, r.error.code)) {
    s.round.failed.add(sub.meta.islandId);
    maybeCloseRound(s, now);
  }
  return r;
}

function validateAndCount(s: CoordState, sub: DeltaSubmission, now: number): Result<SubmitAccepted> {
  s.ledger.received(sub.frame?.length ?? 0);
  const metaProblem = validateDeltaMeta(sub.meta);
  if (metaProblem) return reject(s, undefined, 0, ErrorCode.BAD_REQUEST, metaProblem);
  if (!(sub.frame instanceof Uint8Array)) return reject(s, undefined, 0, ErrorCode.BAD_REQUEST, 'frame must be bytes');
  // a buffer decoded by the host is ours now: kept as the pending delta, or given back
  const held = sub.decoded?.ok ? sub.decoded.value.delta : null;
  const r = validateAndHold(s, sub, now, held);
  if (held && !r.kept) s.outerStep.release(held);
  return r.result;
}

function validateAndHold(
  s: CoordState,
  sub: DeltaSubmission,
  now: number,
  held: Float32Array | null,
): { result: Result<SubmitAccepted>; kept: boolean } {
  const no = (r: Result<never>) => ({ result: r, kept: false });
  const at = {
    cfg: s.cfg,
    version: s.version,
    paused: s.paused,
    done: s.done,
    roundId: s.round.id,
    roundBaseVersion: s.round.baseVersion,
    assignSerial: s.assignSerial,
  };
  const encoding = frameEncoding(sub.frame); // byte 5 alone: the frame's encoding must be its assignment's
  const chk = checkDelta(sub.meta, encoding, s.book.byId, at, now, (isl) => s.book.touch(isl, now));
  if (!chk.ok) return no(reject(s, chk.isl, chk.tokens, chk.code, chk.message));
  const { isl, m, steps, normSteps, tau, late } = chk;

  const decoded = sub.decoded ?? decodeHere(s, sub.frame);
  if (!decoded.ok) return no(reject(s, isl, m.tokens, decoded.error.code, decoded.error.message));
  const { delta, norm } = decoded.value;
  const nb = s.cfg.normBound;
  const { score, bound, over } = s.norms.judge(norm, steps, nb, s.round.pending, normSteps);
  if (over) {
    const why = `‖Δ‖/√normSteps = ${score.toPrecision(4)} exceeds its bound ${bound.toPrecision(4)}`;
    const lr = `at its learning rates, ${normSteps.toPrecision(3)} normSteps`;
    const what = `${nb.factor} × the median, for ${steps} steps ${lr}`;
    return no(reject(s, isl, m.tokens, ErrorCode.NORM_BOUND, `${why} (${what})`));
  }

  // counted from here on
  s.ledger.accept(isl, m, tau, { raw: 4 * s.paramCount, frame: sub.frame.length });
  const base: Contribution = {
    islandId: isl.id,
    seq: m.seq,
    roundId: m.roundId,
    baseVersion: m.baseVersion,
    staleness: tau,
    tokens: m.tokens,
    weight: 0,
  };
  // hold it until the round (sync) or the merge window (async) closes
  const buf = held ?? s.outerStep.take();
  if (!held) buf.set(delta);
  const pending = { ...base, delta: buf, score, steps, lossMean: m.lossMean, arrivedAt: now };
  hold(s.round, pending, isl, s.cfg.mode === 'sync', late, now);
  s.ranges?.submitted(isl.id, m.roundId);
  isl.accepted += 1;
  const roundBefore = s.round.id;
  maybeCloseRound(s, now);
  const status = s.round.id !== roundBefore ? 'applied' : 'pending';
  const accepted = { status, version: s.version, roundId: m.roundId, staleness: tau, norm, steps, score } as const;
  return { result: ok(accepted), kept: true };
}

/** Δ decoded into the scratch buffer, and ‖Δ‖. */
function decodeHere(s: CoordState, frame: Uint8Array): Result<{ delta: Float32Array; norm: number }> {
  const d = decodeDelta(frame, s.paramCount, s.decodeBuf);
  return d.ok ? ok({ delta: d.value, norm: l2(d.value) }) : d;
}

function reject(
  s: CoordState,
  isl: IslandRecord | undefined,
  tokens: number,
  code: string,
  message: string,
): Result<never> {
  s.ledger.reject(isl, code, tokens);
  return err(code, message);
}
