// CPU twins of the chunked LM head's cross-entropy (shaders/head.wgsl): the WebGPU engine computes
// the logits W vocabulary ids at a time, so no (B·T, V) buffer exists. The forward folds each chunk
// into per-row online softmax statistics; the backward turns a recomputed chunk of logits into its
// dlogits from the saved logsumexp. Over all chunks they equal softmaxCrossEntropyForward's losses and
// softmaxCrossEntropyBackward's dlogits (core/model/ops.ts) without the probabilities.

import type { Arr, Tokens } from './ops.ts';

/** Per-row statistics of the head, 4 floats a row: running max, Σ exp(x − max), target's logit, logsumexp. */
export const HEAD_STATS = 4;

/**
 * Folds one chunk into `stats` (N, 4): `logits` (N, W) are vocabulary ids [v0, v0 + W) of each row.
 * `first` starts the statistics; `last` also writes stats' logsumexp and losses[row] = logsumexp − target logit.
 */
export function crossEntropyChunkForward(
  stats: Arr,
  losses: Arr,
  logits: Arr,
  targets: Tokens,
  N: number,
  v0: number,
  W: number,
  first: boolean,
  last: boolean,
): void {
  for (let r = 0; r < N; r++) {
    const x = r * W,
      s = r * HEAD_STATS;
    let mx = -Infinity;
    for (let i = 0; i < W; i++) if (logits[x + i] > mx) mx = logits[x + i];
    let sum = 0;
    for (let i = 0; i < W; i++) sum += Math.exp(logits[x + i] - mx);
    if (first) stats.set([-Infinity, 0, 0, 0], s);
    const m = Math.max(stats[s], mx);
    stats[s + 1] = stats[s + 1] * Math.exp(stats[s] - m) + sum * Math.exp(mx - m);
    stats[s] = m;
    const y = targets[r] - v0;
    if (y >= 0 && y < W) stats[s + 2] = logits[x + y];
    if (last) {
      stats[s + 3] = m + Math.log(stats[s + 1]);
      losses[r] = stats[s + 3] - stats[s + 2];
    }
  }
}

/** In place: logits (N, W) of ids [v0, v0 + W) become dlogits = (softmax − onehot(y))·dloss (stats' logsumexp). */
export function crossEntropyChunkBackward(
  dlogits: Arr,
  stats: Arr,
  targets: Tokens,
  dloss: number,
  N: number,
  v0: number,
  W: number,
): void {
  for (let r = 0; r < N; r++) {
    const x = r * W,
      lse = stats[r * HEAD_STATS + 3],
      y = targets[r] - v0;
    for (let i = 0; i < W; i++) dlogits[x + i] = (Math.exp(dlogits[x + i] - lse) - (i === y ? 1 : 0)) * dloss;
  }
}
