// head.wgsl's dispatches: the LM head's cross-entropy over one vocabulary chunk of logits (the
// chunked head of client/island/engine/webgpu-step.ts), forward into per-row online softmax
// statistics, backward into the chunk's dlogits in place.

import {
  crossEntropyChunkBackward as chunkBackwardCpu,
  crossEntropyChunkForward as chunkForwardCpu,
} from '../core/model/ops-head.ts';
import { type DispatchSpec, defineKernel, grid1, lossRows, rows } from './kernel.ts';
import src from './head.wgsl?raw';

export { HEAD_STATS } from '../core/model/ops-head.ts';

export const head = defineKernel('head', src, {
  ce_chunk_forward: chunkForwardCpu,
  ce_chunk_backward: chunkBackwardCpu,
});

/** A chunk of the vocabulary: ids [v0, v0 + width). */
export interface VocabChunk {
  v0: number;
  width: number;
}

/**
 * Folds `logits` (B·T, width), ids [v0, v0 + width), into `stats` (B·T × 4 floats); `first` starts them,
 * `last` writes losses = logsumexp − the target's logit.
 */
export function crossEntropyChunkForward(
  stats: GPUBuffer,
  losses: GPUBuffer,
  logits: GPUBuffer,
  targets: GPUBuffer,
  d: VocabChunk & { first: boolean; last: boolean },
): DispatchSpec {
  return head.dispatch({
    entry: 'ce_chunk_forward',
    buffers: { stats, losses, logits, targets },
    params: (s) => ({ N: rows(s), W: d.width, v0: d.v0, flags: (d.first ? 1 : 0) | (d.last ? 2 : 0) }),
    grid: (s) => grid1(rows(s), 1),
  });
}

/**
 * In place: the chunk's logits (B·T, width) become dlogits = (softmax − onehot)·dloss, dloss = 1/lossRows (the mean
 * loss; of the whole batch where this is one of its micro-batches).
 */
export function crossEntropyChunkBackward(
  dlogits: GPUBuffer,
  stats: GPUBuffer,
  targets: GPUBuffer,
  d: VocabChunk,
): DispatchSpec {
  return head.dispatch({
    entry: 'ce_chunk_backward',
    buffers: { dlogits, stats_in: stats, targets },
    params: (s) => ({ N: rows(s), W: d.width, v0: d.v0, dloss: 1 / lossRows(s) }),
    grid: (s) => grid1(rows(s) * d.width, 256),
  });
}

/** The vocabulary V in chunks of `chunk` ids (the last one ragged; one chunk where chunk ≥ V). */
export function vocabChunks(V: number, chunk: number): VocabChunk[] {
  const out: VocabChunk[] = [];
  for (let v0 = 0; v0 < V; v0 += chunk) out.push({ v0, width: Math.min(chunk, V - v0) });
  return out;
}
