// The outer step's trust region: an update u may not be much longer than the run's recent ones.
// The limit is `factor` × the median ‖u‖ of the last `window` versions (none until there are that
// many: the warm-up). A step whose ‖u‖ is over it takes the round's pseudo-gradient at a gain
// γ < 1 (g' = γ·s·g; the momentum takes γ·s·g too) such that ‖u(γ)‖ = limit.
//
// u is affine in γ for every optimizer (u = γA + B, B the momentum's part), so ‖u(γ)‖² is a
// quadratic; the proposals at γ = 1, 0 and −1 (each a Σu² the step already computes) give it
// exactly, in the coordinator's own step (outer-step.ts) and on the server's outer workers
// (server/outer/pool.ts) alike. γ is cut to a 2^-20 grid, so both arrive at the same bits.

import type { CoordinatorConfig } from './config.ts';
import { median } from './aggregate.ts';
import type { VersionStats } from './types.ts';

/** The gains the trust region probes after an over-long proposal at γ = 1. */
export const TRUST_PROBES = [0, -1] as const;

/**
 * The longest ‖u‖ the next step may take: factor × the median of the last `window` ‖u‖ (Infinity: off,
 * warm-up).
 */
export function trustLimit(history: readonly VersionStats[], t: CoordinatorConfig['trustRegion']): number {
  if (!(t.factor > 0) || t.window < 1 || history.length < t.window) return Infinity;
  const norms: number[] = [];
  for (let i = history.length - t.window; i < history.length; i++) norms.push(history[i].updateNorm);
  const m = median(norms);
  return m > 0 && Number.isFinite(m) ? t.factor * m : Infinity;
}

/** Whether a proposal of Σu² = `sumSq` breaks the limit. */
export function overLimit(sumSq: number, limit: number): boolean {
  return Number.isFinite(limit) && Math.sqrt(sumSq) > limit;
}

/**
 * γ in [0, 1) with ‖u(γ)‖ = limit, from Σu² at γ = 1, 0 and −1; where even γ = 0 (the momentum
 * alone) is over the limit, the γ ≥ 0 that makes ‖u‖ shortest.
 */
export function trustGain(q1: number, q0: number, qm1: number, limit: number): number {
  const a = (q1 + qm1) / 2 - q0; // ‖A‖²
  const b = (q1 - qm1) / 4; // A·B
  const c = q0; // ‖B‖²
  const L2 = limit * limit;
  let g: number;
  if (!(a > 0)) g = 0;
  else if (c >= L2) g = Math.max(0, -b / a);
  else g = (-b + Math.sqrt(Math.max(0, b * b - a * (c - L2)))) / a;
  if (!Number.isFinite(g)) g = 0;
  return Math.floor(Math.min(1, Math.max(0, g)) * 2 ** 20) / 2 ** 20;
}
