// A folder of token shards, read and checked in full before any training: with an index.json
// (`atoll data prepare`), every shard's size, SHA-256 and token count against it; without one
// (shards llm.c's or nanoGPT's scripts wrote), every *.bin file, the one named *val* held out.

import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { INDEX_FILE, type ShardEntry, heldOutByName, parseIndex } from '../../core/data/shard-index.ts';
import { ShardError, type ShardFormat, checkIds, readShard } from '../../core/data/shards.ts';
import { type TokenizerName, VOCAB_SIZE } from '../../core/data/tokenizer.ts';

export interface ShardDataset {
  name: string;
  tokenizer: TokenizerName;
  /** The train shards' tokens, in name order (held in memory: `train` reads them all). */
  trainShards: Uint16Array[];
  heldOut: Uint16Array;
  /** Per shard: its name, format and tokens. */
  shards: { name: string; format: ShardFormat; tokens: number; heldOut: boolean }[];
}

/** Is `dir` a shard folder: an index.json, or .bin files? */
export function isShardDir(dir: string): boolean {
  try {
    if (!statSync(dir).isDirectory()) return false;
    return existsSync(join(dir, INDEX_FILE)) || readdirSync(dir).some((f) => f.endsWith('.bin'));
  } catch {
    return false;
  }
}

export const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

function readBytes(dir: string, name: string): Uint8Array {
  try {
    return new Uint8Array(readFileSync(join(dir, name)));
  } catch (e) {
    throw new ShardError('E_BAD_SHARD', `shard '${name}': cannot read it (${(e as NodeJS.ErrnoException).code})`);
  }
}

/** One shard against its index entry: the file first (E_BAD_SHARD), then what the index says of it (E_BAD_INDEX). */
function checkEntry(dir: string, e: ShardEntry, vocab: number): { format: ShardFormat; tokens: Uint16Array } {
  const bytes = readBytes(dir, e.name);
  const shard = readShard(e.name, bytes); // its header: a truncated shard says so

  if (shard.tokens.length !== e.tokens)
    throw new ShardError(
      'E_BAD_INDEX',
      `${INDEX_FILE} says shard '${e.name}' has ${e.tokens} tokens; the file holds ${shard.tokens.length}`,
    );
  if (bytes.length !== e.bytes)
    throw new ShardError(
      'E_BAD_INDEX',
      `${INDEX_FILE} says shard '${e.name}' is ${e.bytes} bytes; it is ${bytes.length}`,
    );
  const h = sha256(bytes);
  if (h !== e.sha256)
    throw new ShardError(
      'E_BAD_SHARD',
      `shard '${e.name}': its SHA-256 ${h.slice(0, 12)}… is not ${INDEX_FILE}'s ${e.sha256.slice(0, 12)}… ` +
        '(the shard or the index changed since prepare)',
    );
  checkIds(e.name, shard.tokens, vocab);
  return shard;
}

/**
 * Reads and checks a shard folder for a model of `tokenizer`'s vocabulary. Throws a ShardError
 * (E_BAD_INDEX, E_BAD_SHARD, E_TOKENIZER_MISMATCH, E_NO_HELD_OUT, E_DATA_EMPTY) before anything trains.
 */
export function loadShardDir(dir: string, tokenizer: TokenizerName): ShardDataset {
  const vocab = VOCAB_SIZE[tokenizer];
  const indexPath = join(dir, INDEX_FILE);
  let entries: { name: string; read: () => { format: ShardFormat; tokens: Uint16Array } }[];
  let heldOutName: string;
  if (existsSync(indexPath)) {
    const index = parseIndex(readFileSync(indexPath, 'utf8'));
    if (index.tokenizer !== tokenizer)
      throw new ShardError(
        'E_TOKENIZER_MISMATCH',
        `${dir}: its shards are ${index.tokenizer} ids (${index.vocabSize}); the model's vocabulary is ` +
          `${tokenizer}'s (${vocab}): pick a preset of that tokenizer or prepare the data with ` +
          `--tokenizer ${tokenizer}`,
      );
    heldOutName = index.heldOut;
    entries = index.shards.map((e) => ({ name: e.name, read: () => checkEntry(dir, e, vocab) }));
  } else {
    const names = readdirSync(dir)
      .filter((f) => f.endsWith('.bin'))
      .sort();
    if (names.length === 0) throw new ShardError('E_DATA_EMPTY', `${dir}: no ${INDEX_FILE} and no .bin shards`);
    heldOutName = heldOutByName(names);
    if (names.length < 2) throw new ShardError('E_DATA_EMPTY', `${dir}: only the held-out shard, nothing to train on`);
    entries = names.map((name) => ({ name, read: () => readShard(name, readBytes(dir, name), vocab) }));
  }
  const ds: ShardDataset = { name: basename(dir), tokenizer, trainShards: [], heldOut: new Uint16Array(), shards: [] };
  for (const e of entries) {
    const s = e.read();
    const held = e.name === heldOutName;
    if (held) ds.heldOut = s.tokens;
    else ds.trainShards.push(s.tokens);
    ds.shards.push({ name: e.name, format: s.format, tokens: s.tokens.length, heldOut: held });
  }
  return ds;
}
