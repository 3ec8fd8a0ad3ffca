// Token shards as llm.c writes them (dev/data/data_common.py): a header of 256 little-endian int32
// — [0] magic 20240520, [1] version 1 (uint16 tokens), [2] the token count, the rest 0 — then the
// tokens as little-endian uint16. nanoGPT's prepare.py writes the tokens alone (a flat uint16 file,
// no header). A file is told apart by its first int32: the magic → llm.c's shard, checked in full;
// another llm.c magic (a model file, an eval file) → refused; anything else → nanoGPT's header-less
// shard, which must have an even, non-zero size. Every id must be below the tokenizer's vocabulary.

import type { Batch } from '../engine/index.ts';
import { mixSeed, mulberry32 } from '../random.ts';
import { allocBatch } from './dataset.ts';
import type { TokenArray } from './tokenizer.ts';

export const SHARD_MAGIC = 20240520;
export const SHARD_VERSION = 1;
export const HEADER_INTS = 256;
export const HEADER_BYTES = HEADER_INTS * 4;

/** Other magics of llm.c's files, so such a file is named, not misread as header-less tokens. */
const OTHER_MAGICS: Record<number, string> = {
  20240326: 'an llm.c model checkpoint (magic 20240326), not a token shard',
  20240327: 'an llm.c bf16 model checkpoint (magic 20240327), not a token shard',
  20240328: 'an llm.c tokenizer file (magic 20240328), not a token shard',
  20240522: 'an llm.c eval file (magic 20240522, e.g. HellaSwag), not a token shard',
};

export type ShardFormat = 'llmc' | 'nanogpt';

export interface Shard {
  format: ShardFormat;
  tokens: Uint16Array;
}

export class ShardError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

const bad = (name: string, why: string) => new ShardError('E_BAD_SHARD', `shard '${name}': ${why}`);

/** The 1,024-byte header of a shard of `count` tokens. */
export function shardHeader(count: number): Uint8Array {
  const h = new Uint8Array(HEADER_BYTES);
  const v = new DataView(h.buffer);
  v.setInt32(0, SHARD_MAGIC, true);
  v.setInt32(4, SHARD_VERSION, true);
  v.setInt32(8, count, true);
  return h;
}

/** A whole shard file: header, then the tokens (little-endian on every host). */
export function encodeShard(tokens: Uint16Array): Uint8Array {
  const out = new Uint8Array(HEADER_BYTES + tokens.length * 2);
  out.set(shardHeader(tokens.length));
  const v = new DataView(out.buffer);
  for (let i = 0; i < tokens.length; i++) v.setUint16(HEADER_BYTES + 2 * i, tokens[i], true);
  return out;
}

/** uint16s from a little-endian byte range (a copy when unaligned or on a big-endian host). */
function uint16s(bytes: Uint8Array, from: number): Uint16Array {
  const n = (bytes.length - from) >> 1;
  const at = bytes.byteOffset + from;
  if (at % 2 === 0 && LITTLE_ENDIAN) return new Uint16Array(bytes.buffer, at, n);
  const out = new Uint16Array(n);
  const v = new DataView(bytes.buffer, at, n * 2);
  for (let i = 0; i < n; i++) out[i] = v.getUint16(2 * i, true);
  return out;
}
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The format a file's first bytes say, before reading it all (what `detect` documents). */
export function shardFormat(name: string, head: Uint8Array, size: number): ShardFormat {
  if (size < 4) throw bad(name, `${size} bytes: too short for a shard`);
  const magic = new DataView(head.buffer, head.byteOffset, 4).getInt32(0, true);
  if (magic === SHARD_MAGIC) return 'llmc';
  if (OTHER_MAGICS[magic]) throw bad(name, OTHER_MAGICS[magic]);
  if (size % 2 !== 0) throw bad(name, `${size} bytes, odd: neither an llm.c shard (no magic) nor uint16 tokens`);
  return 'nanogpt';
}

/**
 * A shard's tokens, checked: the header (magic, version, count against the file's size) and, given
 * `vocabSize`, every id below it. Refuses with E_BAD_SHARD, naming the shard and what is wrong.
 */
export function readShard(name: string, bytes: Uint8Array, vocabSize?: number): Shard {
  const format = shardFormat(name, bytes, bytes.length);
  let tokens: Uint16Array;
  if (format === 'llmc') {
    if (bytes.length < HEADER_BYTES) throw bad(name, `${bytes.length} bytes: truncated inside its 1,024-byte header`);
    const v = new DataView(bytes.buffer, bytes.byteOffset, HEADER_BYTES);
    const version = v.getInt32(4, true);
    if (version === 2) throw bad(name, 'version 2 (uint32 tokens, e.g. LLaMA 3): only version 1, uint16, is read');
    if (version !== SHARD_VERSION) throw bad(name, `header version ${version}, expected ${SHARD_VERSION}`);
    const count = v.getInt32(8, true);
    const want = HEADER_BYTES + 2 * count;
    if (count < 0 || bytes.length < want)
      throw bad(name, `truncated: its header says ${count} tokens (${want} bytes), the file has ${bytes.length} bytes`);
    if (bytes.length > want) throw bad(name, `${bytes.length - want} bytes past the ${count} tokens its header says`);
    tokens = uint16s(bytes, HEADER_BYTES);
  } else {
    tokens = uint16s(bytes, 0);
  }
  if (tokens.length === 0) throw bad(name, 'no tokens');
  if (vocabSize !== undefined) checkIds(name, tokens, vocabSize);
  return { format, tokens };
}

/** Every id below the tokenizer's vocabulary (ids from another tokenizer usually are not). */
export function checkIds(name: string, tokens: Uint16Array, vocabSize: number): void {
  for (let i = 0; i < tokens.length; i++)
    if (tokens[i] >= vocabSize)
      throw bad(name, `token ${i} is id ${tokens[i]}, beyond the tokenizer's ${vocabSize} ids (another tokenizer?)`);
}

/**
 * A deterministic batch over several shards: row b starts at a position drawn from (seed, stream,
 * step, b) over every shard's start positions, so no row crosses a shard's end. Over one shard it
 * is sampleBatch's batch, bit for bit (a text corpus is a one-shard dataset).
 */
export function sampleShardBatch(
  shards: readonly TokenArray[],
  B: number,
  T: number,
  seed: number,
  stream: number,
  step: number,
  out?: Batch,
): Batch {
  const spans = shards.map((s) => Math.max(0, s.length - T));
  const total = spans.reduce((a, b) => a + b, 0);
  if (total === 0) throw new ShardError('E_DATA_TOO_SMALL', `no train shard has more than ${T} tokens`);
  const batch = out ?? allocBatch(B, T);
  batch.B = B;
  batch.T = T;
  for (let b = 0; b < B; b++) {
    let at = Math.floor(mulberry32(mixSeed(seed, stream, step, b))() * total);
    let k = 0;
    while (at >= spans[k]) at -= spans[k++];
    batch.inputs.set(shards[k].subarray(at, at + T), b * T);
    batch.targets.set(shards[k].subarray(at + 1, at + T + 1), b * T);
  }
  return batch;
}

/**
 * Batch `step` of a shard run's round from its range's tokens: row b reads the T + 1 tokens from
 * (step × B + b) × (T + 1), so a round of `steps` steps reads its range of steps × B × (T + 1) tokens
 * once, in order (inputs the first T, targets the last T).
 */
export function rangeBatch(tokens: TokenArray, B: number, T: number, step: number, out?: Batch): Batch {
  const need = (step + 1) * B * (T + 1);
  if (tokens.length < need)
    throw new ShardError('E_RANGE_SHORT', `step ${step} needs ${need} tokens of the range; it holds ${tokens.length}`);
  const batch = out ?? allocBatch(B, T);
  batch.B = B;
  batch.T = T;
  for (let b = 0; b < B; b++) {
    const at = (step * B + b) * (T + 1);
    batch.inputs.set(tokens.subarray(at, at + T), b * T);
    batch.targets.set(tokens.subarray(at + 1, at + T + 1), b * T);
  }
  return batch;
}
