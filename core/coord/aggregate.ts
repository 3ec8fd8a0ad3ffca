// Robust aggregation of pseudo-gradients: the norm bound, the staleness- and token-weighted mean,
// and the coordinate-wise trimmed mean.

import { type CoordinatorConfig, stalenessWeight } from './config.ts';
import type { PendingDelta } from './types.ts';

export function l2(x: Float32Array): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i] * x[i];
  return Math.sqrt(s);
}

export function median(xs: number[]): number {
  const a = xs.slice().sort((p, q) => p - q);
  const k = a.length >> 1;
  return a.length % 2 ? a[k] : 0.5 * (a[k - 1] + a[k]);
}

/**
 * The norm bound: a delta's score ‖Δ‖/√steps may be at most factor × the median score of the last
 * `window` accepted deltas, once `minHistory` scores exist (with `extra`, those count too).
 */
export class NormHistory {
  scores: number[] = [];

  limit(nb: CoordinatorConfig['normBound'], extra?: number[]): number {
    if (nb.factor <= 0) return Infinity;
    const xs = extra ? this.scores.concat(extra) : this.scores;
    if (xs.length < nb.minHistory) return Infinity;
    return nb.factor * median(xs);
  }

  push(score: number, window: number): void {
    this.scores.push(score);
    if (this.scores.length > window) this.scores.splice(0, this.scores.length - window);
  }
}

/**
 * Sets each delta's staleness (against `version`) and normalised weight tokens × s(τ), then writes
 * their combination into g: the trimmed mean when trimFraction drops at least one per end, else the
 * weighted mean (accumulated in f64 in `acc`); then each delta's cosine and norm ratio (agreement).
 */
export function combineDeltas(kept: PendingDelta[], cfg: CoordinatorConfig, version: number, g: Float32Array, acc: Float64Array): void {
  let wsum = 0;
  for (const p of kept) {
    p.staleness = version - p.baseVersion;
    p.weight = p.tokens * stalenessWeight(cfg.staleness, p.staleness);
    wsum += p.weight;
  }
  for (const p of kept) p.weight = wsum > 0 ? p.weight / wsum : 1 / kept.length;
  const t = Math.floor(cfg.trimFraction * kept.length);
  if (t > 0 && kept.length - 2 * t >= 1) trimmedMean(kept.map((p) => p.delta), t, g);
  else {
    acc.fill(0);
    for (const p of kept) {
      const d = p.delta, w = p.weight;
      for (let i = 0; i < d.length; i++) acc[i] += w * d[i];
    }
    for (let i = 0; i < g.length; i++) g[i] = acc[i];
  }
  agreement(kept, g);
}

/** Each delta's quality in its round: cosine with the merged g, and its score against the round's median. */
function agreement(kept: PendingDelta[], g: Float32Array): void {
  const gn = l2(g);
  const mid = median(kept.map((p) => p.score));
  for (const p of kept) {
    const d = p.delta;
    let dot = 0;
    for (let i = 0; i < d.length; i++) dot += d[i] * g[i];
    const dn = l2(d);
    p.cosine = dn > 0 && gn > 0 ? dot / (dn * gn) : 0;
    p.normRatio = mid > 0 ? p.score / mid : 1;
  }
}

/** Coordinate-wise mean of `ds` after dropping the t smallest and t largest values per coordinate. */
export function trimmedMean(ds: Float32Array[], t: number, out: Float32Array): void {
  const k = ds.length;
  const col = new Float64Array(k);
  const n = out.length;
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < k; j++) {
      // insertion sort into col[0..j]
      const v = ds[j][i];
      let p = j - 1;
      while (p >= 0 && col[p] > v) { col[p + 1] = col[p]; p--; }
      col[p + 1] = v;
    }
    let s = 0;
    for (let j = t; j < k - t; j++) s += col[j];
    out[i] = s / (k - 2 * t);
  }
}
