// The synthetic pseudo-gradient `bench codec` encodes (codec.ts, codec-round.ts).

import { gaussian, mulberry32 } from '../../core/random.ts';

/**
 * A delta shaped like a real one: Gaussian entries whose scale varies per row of 768 (log-normal
 * over two decades, as across embeddings, attention and MLP weights), times a typical Δ magnitude.
 */
export function syntheticDelta(n: number, seed = 1234): Float32Array {
  const rand = mulberry32(seed);
  const normal = gaussian(rand);
  const out = new Float32Array(n);
  const row = 768;
  for (let start = 0; start < n; start += row) {
    const scale = 1e-3 * Math.exp(normal() * 1.15);
    const end = Math.min(start + row, n);
    for (let i = start; i < end; i++) out[i] = normal() * scale;
  }
  return out;
}
