// Error feedback on the island: the residual of what compression dropped (ErrorFeedback), and one
// round that encodes Δ + e into a frame and keeps what the frame did not carry (encodeWithFeedback).

import { type Result, err, ok } from '../result.ts';
import { CodecErrorCode } from './errors.ts';
import { type CodecOptions, type CodecScratch, decodeDelta, encodeDelta } from './frame.ts';
import { nonFinite } from './payloads.ts';

/**
 * Error feedback (EF / EF21-style memory) kept on the island across rounds.
 *
 * Each round the island sends C(Δ + e) and keeps e ← (Δ + e) − decode(C(Δ + e)), so whatever
 * compression drops is sent later instead of lost: the sum of what was sent tracks the sum of the
 * true Δs up to the bounded residual e. `encodeWithFeedback` below does the whole round; the
 * two methods below are the same steps for callers that encode themselves.
 */
export class ErrorFeedback {
  /** e: what has been intended but not yet sent, in the flat parameter layout (a worker swaps in its next one). */
  residual: Float32Array;

  constructor(n: number) {
    this.residual = new Float32Array(n);
  }

  /** delta ← delta + e, in place. Encode the result, then call `update`. */
  compensate(delta: Float32Array): void {
    const e = this.residual;
    const n = Math.min(e.length, delta.length);
    for (let i = 0; i < n; i++) delta[i] += e[i];
  }

  /** e ← intended − sent, where intended is the compensated delta and sent is its decoded frame. */
  update(sent: Float32Array, intended: Float32Array): void {
    const e = this.residual;
    const n = e.length;
    for (let i = 0; i < n; i++) e[i] = intended[i] - sent[i];
  }

  /** e ← e + sent: the server did not take what was sent (rejected or lost), so it is owed again. */
  unsend(sent: Float32Array): void {
    const e = this.residual;
    for (let i = 0; i < e.length; i++) e[i] += sent[i];
  }

  /** Drops the memory, e.g. after a full resync with the server. */
  reset(): void {
    this.residual.fill(0);
  }
}

/**
 * One island round with error feedback: sends C(Δ + e) and keeps e ← (Δ + e) − decode(C(Δ + e)).
 * Uses `fb.residual` as the work buffer, so it needs no n-sized allocation beyond `decoded`
 * (which lives in `scratch` when given: valid until the next call). `delta` is not modified.
 * If Δ + e has a non-finite entry the residual is reset (it can no longer be trusted) and
 * E_NON_FINITE is returned: nothing should be sent.
 */
export function encodeWithFeedback(
  delta: Float32Array,
  fb: ErrorFeedback,
  opts: CodecOptions,
  scratch?: CodecScratch,
): Result<{ frame: Uint8Array; decoded: Float32Array }> {
  const e = fb.residual;
  const n = delta.length;
  if (e.length !== n) return err(CodecErrorCode.WRONG_SIZE, `delta holds ${n} elements, residual ${e.length}`);
  const beta = opts.feedbackDecay ?? 1;
  let probe = 0;
  for (let i = 0; i < n; i++) {
    const v = Math.fround(beta * e[i] + delta[i]);
    e[i] = v;
    probe += v * 0;
  }
  if (probe !== 0) {
    fb.reset();
    return nonFinite();
  }
  const frame = encodeDelta(e, opts, scratch);
  const decoded = decodeDelta(frame, n, scratch ? scratch.decodeBuffer(n) : undefined);
  if (!decoded.ok) {
    fb.reset();
    return decoded;
  }
  const sent = decoded.value;
  for (let i = 0; i < n; i++) e[i] -= sent[i];
  return ok({ frame, decoded: sent });
}
