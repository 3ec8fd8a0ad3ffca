// Byte-token batches of a short repetitive text, so that a few steps visibly learn something
// (the engine tests compare engines on the same batches).

import type { Batch } from '../../core/engine/index.ts';
import { mulberry32 } from '../../core/random.ts';

export const TEXT = new TextEncoder().encode(
  'Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, ' +
    'and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of the world. ',
);

/** B windows of T + 1 bytes at seeded offsets: inputs and next-byte targets. */
export function textBatch(B: number, T: number, seed: number): Batch {
  const r = mulberry32(seed);
  const inputs = new Uint8Array(B * T),
    targets = new Uint8Array(B * T);
  for (let b = 0; b < B; b++) {
    const s = Math.floor(r() * (TEXT.length - T - 1));
    inputs.set(TEXT.subarray(s, s + T), b * T);
    targets.set(TEXT.subarray(s + 1, s + T + 1), b * T);
  }
  return { inputs, targets, B, T };
}
