// A corpus split into train and held-out tokens, with deterministic batch sampling.

import type { Batch } from '../engine/index.ts';
import { hashString, mixSeed, mulberry32 } from '../random.ts';
import type { TokenArray, TokenizerName } from './tokenizer.ts';

/** The corpus is cut into chunks; every HELD_OUT_EVERY-th chunk is held out, so eval spans the whole text. */
export const SPLIT_CHUNK = 8192;
export const HELD_OUT_EVERY = 10;

export interface TextDataset {
  name: string;
  /** The ids' tokenizer: the model's vocabulary must be its. */
  tokenizer: TokenizerName;
  train: TokenArray;
  heldOut: TokenArray;
}

/** Fixed train / held-out split of a corpus's tokens (never depends on a seed). */
export function splitCorpus(name: string, bytes: TokenArray, tokenizer: TokenizerName = 'byte'): TextDataset {
  const nChunks = Math.ceil(bytes.length / SPLIT_CHUNK);
  const heldIdx: number[] = [];
  const trainIdx: number[] = [];
  for (let i = 0; i < nChunks; i++) (i % HELD_OUT_EVERY === HELD_OUT_EVERY - 1 ? heldIdx : trainIdx).push(i);
  if (heldIdx.length === 0 && nChunks > 1) heldIdx.push(trainIdx.pop()!);
  const gather = (idx: number[]) => {
    const parts = idx.map((i) => bytes.subarray(i * SPLIT_CHUNK, Math.min(bytes.length, (i + 1) * SPLIT_CHUNK)));
    const n = parts.reduce((a, p) => a + p.length, 0);
    const out = bytes instanceof Uint16Array ? new Uint16Array(n) : new Uint8Array(n);
    let o = 0;
    for (const p of parts) {
      out.set(p, o);
      o += p.length;
    }
    return out;
  };
  return { name, tokenizer, train: gather(trainIdx), heldOut: nChunks > 1 ? gather(heldIdx) : bytes.slice() };
}

/** uint16 rows: any tokenizer's ids fit (GPT-2's 50,257 as in llm.c's shards). */
export function allocBatch(B: number, T: number): Batch {
  return { inputs: new Uint16Array(B * T), targets: new Uint16Array(B * T), B, T };
}

/** The per-island stream id: different islands see different data for the same (seed, step). */
export function streamId(islandId: string | number): number {
  return typeof islandId === 'number' ? islandId >>> 0 : hashString(islandId);
}

/**
 * Deterministic batch from (seed, stream, step): row b starts at an offset drawn
 * from a PRNG seeded by all four, so a run can be replayed exactly.
 * Fills `out` when given (no allocation on the hot path).
 */
export function sampleBatch(
  data: TokenArray,
  B: number,
  T: number,
  seed: number,
  stream: number,
  step: number,
  out?: Batch,
): Batch {
  if (data.length < T + 1)
    throw new Error(`E_DATA_TOO_SMALL: ${data.length} tokens cannot make sequences of length ${T}`);
  const batch = out ?? allocBatch(B, T);
  batch.B = B;
  batch.T = T;
  const span = data.length - T - 1;
  for (let b = 0; b < B; b++) {
    const rand = mulberry32(mixSeed(seed, stream, step, b));
    const off = Math.floor(rand() * (span + 1));
    batch.inputs.set(data.subarray(off, off + T), b * T);
    batch.targets.set(data.subarray(off + 1, off + T + 1), b * T);
  }
  return batch;
}

/** A fixed set of held-out batches at evenly spaced offsets: the same for every eval. */
export function evalBatches(heldOut: TokenArray, B: number, T: number, nBatches: number): Batch[] {
  const span = heldOut.length - T - 1;
  if (span < 0) throw new Error(`E_DATA_TOO_SMALL: held-out split has ${heldOut.length} tokens, need > ${T}`);
  const total = B * nBatches;
  const batches: Batch[] = [];
  for (let k = 0; k < nBatches; k++) {
    const batch = allocBatch(B, T);
    for (let b = 0; b < B; b++) {
      const off = Math.floor(((k * B + b) * span) / Math.max(1, total - 1));
      batch.inputs.set(heldOut.subarray(off, off + T), b * T);
      batch.targets.set(heldOut.subarray(off + 1, off + T + 1), b * T);
    }
    batches.push(batch);
  }
  return batches;
}
