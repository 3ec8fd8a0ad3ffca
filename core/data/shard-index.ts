// The index of a shard folder (index.json, written by `atoll data prepare`): the tokenizer, and per
// shard its name, token count, byte size and SHA-256, and which shard is held out for eval.
//
//   { "format": "atoll-shards", "version": 1, "tokenizer": "gpt2", "vocabSize": 50257,
//     "heldOut": "data_val_000000.bin",
//     "shards": [{ "name": "data_val_000000.bin", "tokens": 100000, "bytes": 201024, "sha256": "…" }, …] }

import { ShardError } from './shards.ts';
import { type TokenizerName, VOCAB_SIZE, isTokenizerName } from './tokenizer.ts';

export const INDEX_FILE = 'index.json';
export const INDEX_FORMAT = 'atoll-shards';

export interface ShardEntry {
  name: string;
  tokens: number;
  bytes: number;
  sha256: string;
}

export interface ShardIndex {
  format: typeof INDEX_FORMAT;
  version: 1;
  tokenizer: TokenizerName;
  vocabSize: number;
  /** The shard eval reads (never trained on). */
  heldOut: string;
  shards: ShardEntry[];
}

const badIndex = (why: string) => new ShardError('E_BAD_INDEX', `${INDEX_FILE}: ${why}`);
/** A shard's file name: no folder, no dot-dot. */
const SHARD_NAME = /^[\w.-]{1,200}$/;
const isCount = (n: unknown): n is number => Number.isSafeInteger(n) && (n as number) >= 0;

/** An index's JSON text, checked field by field (throws E_BAD_INDEX naming the field). */
export function parseIndex(text: string): ShardIndex {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(text);
  } catch (e) {
    throw badIndex(`not JSON (${(e as Error).message})`);
  }
  if (typeof o !== 'object' || o === null || Array.isArray(o)) throw badIndex('not a JSON object');
  if (o.format !== INDEX_FORMAT) throw badIndex(`format ${JSON.stringify(o.format)}, expected "${INDEX_FORMAT}"`);
  if (o.version !== 1) throw badIndex(`version ${JSON.stringify(o.version)}, expected 1`);
  if (!isTokenizerName(o.tokenizer)) throw badIndex(`unknown tokenizer ${JSON.stringify(o.tokenizer)}`);
  if (o.vocabSize !== VOCAB_SIZE[o.tokenizer])
    throw badIndex(
      `vocabSize ${JSON.stringify(o.vocabSize)} is not the ${o.tokenizer} tokenizer's ${VOCAB_SIZE[o.tokenizer]}`,
    );
  if (!Array.isArray(o.shards) || o.shards.length === 0) throw badIndex('shards: a non-empty array expected');
  const names = new Set<string>();
  const shards = o.shards.map((s: Record<string, unknown>, i: number): ShardEntry => {
    const at = `shards[${i}]`;
    if (typeof s !== 'object' || s === null) throw badIndex(`${at}: not an object`);
    if (typeof s.name !== 'string' || !SHARD_NAME.test(s.name))
      throw badIndex(`${at}.name: a plain file name expected`);
    if (names.has(s.name)) throw badIndex(`${at}.name: '${s.name}' listed twice`);
    names.add(s.name);
    if (!isCount(s.tokens) || s.tokens === 0) throw badIndex(`${at}.tokens: a positive integer expected`);
    if (!isCount(s.bytes)) throw badIndex(`${at}.bytes: an integer expected`);
    if (typeof s.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(s.sha256))
      throw badIndex(`${at}.sha256: 64 lowercase hex digits expected`);
    return { name: s.name, tokens: s.tokens, bytes: s.bytes, sha256: s.sha256 };
  });
  if (typeof o.heldOut !== 'string' || !names.has(o.heldOut))
    throw badIndex(`heldOut ${JSON.stringify(o.heldOut)} is not one of its shards`);
  if (shards.length < 2) throw badIndex('one shard only: it is held out, so nothing is left to train on');
  return {
    format: INDEX_FORMAT,
    version: 1,
    tokenizer: o.tokenizer,
    vocabSize: o.vocabSize,
    heldOut: o.heldOut,
    shards,
  };
}

/** With no index (shards llm.c's or nanoGPT's scripts wrote): the held-out shard is the first named *val*. */
export function heldOutByName(names: readonly string[]): string {
  const val = names.find((n) => /(^|[^a-z])val([^a-z]|$)/i.test(n));
  if (!val)
    throw new ShardError(
      'E_NO_HELD_OUT',
      `no shard is named as held out (e.g. val.bin, fineweb_val_000000.bin) among ${names.length}: ` +
        'name one *val*, or prepare the folder with atoll data prepare',
    );
  return val;
}
