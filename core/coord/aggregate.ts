// Robust aggregation of pseudo-gradients: the norm bound, the staleness- and token-weighted mean,
// and the coordinate-wise trimmed mean.

import type { InnerLrPlan } from '../protocol.ts';
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

/** A delta's norm-bound statistic and the steps it was assigned. */
export interface NormSample {
  score: number;
  steps: number;
}

/**
 * The steps a delta is judged as: Σ w_i² over its assigned steps, w_i the fresh-AdamW warmup's
 * factor on the island's lr at that step (InnerLrPlan.localWarmupSteps), counted from the
 * `stepsBefore` steps assigned to it earlier. Past the warmup these are the steps; a round in it
 * counts for less, so a newcomer is judged at its own learning rate: an honest second round, 2.5×
 * the first's lr, was rejected against a history of first rounds. The run's own schedule (warmup,
 * cosine) moves every island together, and the history follows it. The server's figures only: an
 * island that reloaded (a fresh AdamW, its old steps counted) is judged more leniently, never less.
 */
export function normSteps(
  lr: Pick<InnerLrPlan, 'localWarmupSteps'> | undefined,
  steps: number,
  stepsBefore: number,
): number {
  const n = lr?.localWarmupSteps ?? 0;
  if (!(n > 0) || stepsBefore >= n) return steps;
  let w = 0;
  for (let i = 0; i < steps; i++) w += Math.min(1, (stepsBefore + i + 1) / n) ** 2;
  return w;
}

/**
 * The norm bound: a delta's score ‖Δ‖/√steps may be at most factor × the median score of the last
 * `window` judged deltas ∪ `extra` (the open round's or window's deltas), once `minHistory` exist.
 * Judged: accepted, or rejected by this bound. A history of accepted scores alone never grows past
 * honest deltas that all outgrow it (the lr warmup's first window), and each rejection, put back
 * into the island's residual, grows the next delta: a livelock. A minority's scores cannot move the median.
 * A delta of more steps than the median one is allowed √(steps / median steps) more: Adam moves each
 * weight about lr per step, so an honest ‖Δ‖ grows between √steps (noise) and steps (a steady
 * direction), and a long round (a fast island's, or a CPU island's among short GPU rounds) must not
 * be judged by the short rounds' √ rule. Steps are the server's, so the allowance cannot be claimed.
 */
export class NormHistory {
  scores: number[] = [];
  /** The assigned steps of each score (0: unknown, from a checkpoint that predates them). */
  steps: number[] = [];

  /** The bound as a function of a delta's assigned steps, against history ∪ `extra`. */
  limiter(nb: CoordinatorConfig['normBound'], extra: NormSample[] = []): (steps: number) => number {
    const xs = this.scores.concat(extra.map((e) => e.score));
    if (nb.factor <= 0 || xs.length < nb.minHistory) return () => Infinity;
    const known = this.steps.concat(extra.map((e) => e.steps)).filter((n) => n > 0);
    const ref = known.length ? median(known) : 0;
    const base = nb.factor * median(xs);
    return (steps) => base * Math.sqrt(Math.max(1, steps > 0 && ref > 0 ? steps / ref : 1));
  }

  /**
   * A delta's score ‖Δ‖/√normSteps on arrival (its assigned steps at their learning rates; the
   * steps themselves at a constant lr), and its bound for its assigned steps: once a history exists,
   * against history ∪ the open window, as at close (the window shares this delta's learning rate and
   * residual carry-over, where early, smaller deltas alone would reject honest ones, and each
   * rejection, put back into the residual, grows the next delta). A score over its bound enters the history.
   */
  judge(
    norm: number,
    steps: number,
    nb: CoordinatorConfig['normBound'],
    pending: NormSample[],
    normSteps = steps,
  ): { score: number; bound: number; over: boolean } {
    const score = norm / Math.sqrt(Math.max(1e-6, normSteps));
    const bound = this.scores.length < nb.minHistory ? Infinity : this.limiter(nb, pending)(steps);
    const over = score > bound;
    if (over) this.push({ score, steps }, nb.window);
    return { score, bound, over };
  }

  /**
   * The close-time bound, against history ∪ the round (it catches a bad delta in the first round):
   * the deltas within it, and those over it with their bound (their scores enter the history).
   */
  split<T extends NormSample>(
    pending: T[],
    nb: CoordinatorConfig['normBound'],
  ): { kept: T[]; over: Array<{ p: T; limit: number }> } {
    const bound = this.limiter(nb, pending);
    const kept = pending.filter((p) => p.score <= bound(p.steps));
    const over = pending.filter((p) => p.score > bound(p.steps)).map((p) => ({ p, limit: bound(p.steps) }));
    for (const { p } of over) this.push(p, nb.window);
    return { kept, over };
  }

  push(sample: NormSample, window: number): void {
    this.scores.push(sample.score);
    this.steps.push(sample.steps);
    const over = this.scores.length - window;
    if (over > 0) {
      this.scores.splice(0, over);
      this.steps.splice(0, over);
    }
  }

  /** Restores from a checkpoint; steps missing or mismatched are unknown (the plain √ rule). */
  restore(scores: number[], steps: number[] | undefined): void {
    this.scores = scores.slice();
    this.steps = steps && steps.length === scores.length ? steps.slice() : scores.map(() => 0);
  }
}

/**
 * Sets each delta's staleness (against `version`) and normalised weight tokens × s(τ), then writes
 * their combination into g by `cfg.aggregation`: the weighted mean (accumulated in f64 in `acc`),
 * the token-weighted trimmed mean (trimFraction of the weight off each end, per coordinate), or
 * CenteredClip (a trimFraction > 0 with 'mean' means the trimmed mean); then each delta's cosine and
 * norm ratio (agreement).
 */
export function combineDeltas(
  kept: PendingDelta[],
  cfg: CoordinatorConfig,
  version: number,
  g: Float32Array,
  acc: Float64Array,
): void {
  weighDeltas(kept, cfg, version);
  const ds = kept.map((p) => p.delta),
    ws = kept.map((p) => p.weight);
  const trim = cfg.trimFraction > 0 ? cfg.trimFraction : 0.125;
  if (isWeightedMean(kept.length, cfg)) weightedMean(ds, ws, g, acc);
  else if (cfg.aggregation === 'centered-clip') centeredClip(ds, ws, trim, cfg.clip, g, acc);
  else weightedTrimmedMean(ds, ws, trim, g);
  const gn = l2(g);
  agreement(
    kept,
    kept.map((p) => {
      let dot = 0;
      const d = p.delta;
      for (let i = 0; i < d.length; i++) dot += d[i] * g[i];
      const dn = l2(d);
      return dn > 0 && gn > 0 ? dot / (dn * gn) : 0;
    }),
  );
}

/** Each delta's staleness (against `version`) and its normalised weight tokens × s(τ). */
export function weighDeltas(kept: PendingDelta[], cfg: CoordinatorConfig, version: number): void {
  let wsum = 0;
  for (const p of kept) {
    p.staleness = version - p.baseVersion;
    p.weight = p.tokens * stalenessWeight(cfg.staleness, p.staleness);
    wsum += p.weight;
  }
  for (const p of kept) p.weight = wsum > 0 ? p.weight / wsum : 1 / kept.length;
}

/** Whether `k` deltas combine by the plain weighted mean (robust rules need 3 or more). */
export function isWeightedMean(k: number, cfg: CoordinatorConfig): boolean {
  if (k < 3) return true;
  return cfg.aggregation === 'mean' && cfg.trimFraction <= 0;
}

/** Each delta's quality in its round: its cosine with the merged g, and its score against the round's median. */
export function agreement(kept: PendingDelta[], cosines: number[]): void {
  const mid = median(kept.map((p) => p.score));
  kept.forEach((p, j) => {
    p.cosine = cosines[j];
    p.normRatio = mid > 0 ? p.score / mid : 1;
  });
}

export function weightedMean(ds: Float32Array[], ws: number[], out: Float32Array, acc: Float64Array): void {
  acc.fill(0);
  for (let j = 0; j < ds.length; j++) {
    const d = ds[j],
      w = ws[j];
    for (let i = 0; i < d.length; i++) acc[i] += w * d[i];
  }
  for (let i = 0; i < out.length; i++) out[i] = acc[i];
}

/**
 * Per coordinate: sort the values, drop `beta` of the total weight from each end (partially where
 * the cut falls inside one weight), and take the weighted mean of what is left.
 */
export function weightedTrimmedMean(ds: Float32Array[], ws: number[], beta: number, out: Float32Array): void {
  const k = ds.length;
  const W = ws.reduce((a, b) => a + b, 0);
  const lo = beta * W,
    hi = (1 - beta) * W;
  const val = new Float64Array(k),
    wt = new Float64Array(k);
  for (let i = 0; i < out.length; i++) {
    for (let j = 0; j < k; j++) {
      // insertion sort of (value, weight) into val/wt[0..j]
      const v = ds[j][i];
      let p = j - 1;
      while (p >= 0 && val[p] > v) {
        val[p + 1] = val[p];
        wt[p + 1] = wt[p];
        p--;
      }
      val[p + 1] = v;
      wt[p + 1] = ws[j];
    }
    let c = 0,
      s = 0;
    for (let j = 0; j < k; j++) {
      const a = Math.max(c, lo),
        b = Math.min(c + wt[j], hi);
      if (b > a) s += (b - a) * val[j];
      c += wt[j];
    }
    out[i] = s / (hi - lo);
  }
}

/** Coordinate-wise mean of `ds` after dropping the t smallest and t largest values per coordinate. */
export function trimmedMean(ds: Float32Array[], t: number, out: Float32Array): void {
  weightedTrimmedMean(
    ds,
    ds.map(() => 1),
    t / ds.length,
    out,
  );
}

/**
 * CenteredClip (Karimireddy et al.; BTARD's rule): start at the weighted trimmed mean v, then
 * `iterations` times v ← v + Σ w_i · min(1, τ / ‖x_i − v‖) · (x_i − v), with τ = factor × the
 * median distance from the start. A far-off delta moves v by at most w_i · τ.
 */
export function centeredClip(
  ds: Float32Array[],
  ws: number[],
  beta: number,
  clip: CoordinatorConfig['clip'],
  out: Float32Array,
  acc: Float64Array,
): void {
  weightedTrimmedMean(ds, ws, beta, out);
  const W = ws.reduce((a, b) => a + b, 0);
  let tau = 0;
  for (let it = 0; it < clip.iterations; it++) {
    const dist = ds.map((d) => {
      let s = 0;
      for (let i = 0; i < d.length; i++) {
        const x = d[i] - out[i];
        s += x * x;
      }
      return Math.sqrt(s);
    });
    if (it === 0) tau = clip.factor * median(dist);
    acc.fill(0);
    for (let j = 0; j < ds.length; j++) {
      const c = (ws[j] / W) * (dist[j] > tau ? tau / dist[j] : 1),
        d = ds[j];
      for (let i = 0; i < d.length; i++) acc[i] += c * (d[i] - out[i]);
    }
    for (let i = 0; i < out.length; i++) out[i] += acc[i];
  }
}
