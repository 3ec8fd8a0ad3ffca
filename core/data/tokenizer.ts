// Tokenizers: `byte` (a token is a UTF-8 byte, vocab 256, so any text is valid input) and `gpt2`
// (GPT-2's BPE, r50k_base: 50,257 ids, from js-tiktoken's bundled ranks, so nothing is fetched at
// run time). The page, Node and the HF export all read the same ranks, so they give the same ids.
// The tokenizer is part of θ's identity: a model's vocabSize must be its vocabulary, and an island
// with another tokenizer is refused at hello.

import type { GPTConfig } from '../model/config.ts';

export const TOKENIZER_NAMES = ['byte', 'gpt2'] as const;
export type TokenizerName = (typeof TOKENIZER_NAMES)[number];

/** Token ids as stored: bytes for `byte`, uint16 for `gpt2` (as llm.c's shards). */
export type TokenArray = Uint8Array | Uint16Array;

export interface Tokenizer {
  readonly name: TokenizerName;
  readonly vocabSize: number;
  /** The id that starts each document (GPT-2's <|endoftext|>, as llm.c and nanoGPT write it); byte: none. */
  readonly eot: number | null;
  /** Plain text to ids; special-token text such as "<|endoftext|>" is encoded as ordinary text. */
  encode(text: string): TokenArray;
  /** Ids to text; invalid UTF-8 (a sample cut mid-character) becomes U+FFFD. */
  decode(ids: ArrayLike<number>): string;
}

export const VOCAB_SIZE: Record<TokenizerName, number> = { byte: 256, gpt2: 50257 };

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: false });

export function encodeText(text: string): Uint8Array {
  return encoder.encode(text);
}

/** Decodes bytes; invalid UTF-8 (a sample cut mid-character) becomes U+FFFD. */
export function decodeTokens(tokens: ArrayLike<number>): string {
  return decoder.decode(Uint8Array.from(tokens));
}

export const byteTokenizer: Tokenizer = {
  name: 'byte',
  vocabSize: 256,
  eot: null,
  encode: encodeText,
  decode: decodeTokens,
};

/** Ids as UTF-8 bytes to show: byte ids as they are (unreadable bytes stay visible), others decoded. */
export function textBytes(tokenizer: Tokenizer, ids: ArrayLike<number>): Uint8Array {
  return tokenizer.name === 'byte' ? Uint8Array.from(ids) : encodeText(tokenizer.decode(ids));
}

export class TokenizerError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

export function isTokenizerName(s: unknown): s is TokenizerName {
  return typeof s === 'string' && (TOKENIZER_NAMES as readonly string[]).includes(s);
}

export function tokenizerName(s: string): TokenizerName {
  if (!isTokenizerName(s))
    throw new TokenizerError('E_BAD_TOKENIZER', `unknown tokenizer '${s}' (expected ${TOKENIZER_NAMES.join(' or ')})`);
  return s;
}

/** js-tiktoken's rank file: each line "<prefix> <first rank> <base64 token> <base64 token> …". */
export interface RankFile {
  bpe_ranks: string;
  special_tokens: Record<string, number>;
  pat_str: string;
}

let gpt2: Promise<Tokenizer> | null = null;
let ranks: Promise<RankFile> | null = null;

/**
 * GPT-2's ranks (r50k_base) from the js-tiktoken package: a dynamic import, so a page loads them only for a gpt2 run.
 */
export function gpt2Ranks(): Promise<RankFile> {
  ranks ??= import('js-tiktoken/ranks/gpt2').then((m) => m.default as RankFile);
  return ranks;
}

/** The byte string of each id below the special tokens, in rank order (the export's vocab and merges). */
export function rankBytes(file: RankFile): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const line of file.bpe_ranks.split('\n')) {
    if (!line) continue;
    const [, first, ...tokens] = line.split(' ');
    tokens.forEach((b64, i) => {
      out[Number(first) + i] = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    });
  }
  return out;
}

async function makeGpt2(): Promise<Tokenizer> {
  const [{ Tiktoken }, file] = await Promise.all([import('js-tiktoken/lite'), gpt2Ranks()]);
  const enc = new Tiktoken(file);
  const eot = file.special_tokens['<|endoftext|>'];
  return {
    name: 'gpt2',
    vocabSize: VOCAB_SIZE.gpt2,
    eot,
    encode: (text) => Uint16Array.from(enc.encode(text, [], [])),
    decode: (ids) => enc.decode(Array.from(ids)),
  };
}

/** The tokenizer by name (gpt2's ranks are parsed once per process). */
export function loadTokenizer(name: TokenizerName): Promise<Tokenizer> {
  if (name === 'byte') return Promise.resolve(byteTokenizer);
  gpt2 ??= makeGpt2();
  return gpt2;
}

/** A model whose vocabulary is not the tokenizer's is refused (its head would emit ids no one can decode). */
export function checkVocab(config: GPTConfig, tokenizer: TokenizerName): void {
  if (config.vocabSize !== VOCAB_SIZE[tokenizer])
    throw new TokenizerError(
      'E_VOCAB_MISMATCH',
      `model.vocabSize ${config.vocabSize} does not fit the ${tokenizer} tokenizer (${VOCAB_SIZE[tokenizer]} ids)`,
    );
}

/** An island's tokenizer (hello's caps.tokenizer) against the run's: why it is refused, or null (none: the run's). */
export function checkIslandTokenizer(island: string | undefined, run: TokenizerName): string | null {
  if (island === undefined || island === run) return null;
  return `this run's tokenizer is ${run}, the island's ${island}: it would train on other ids`;
}

/** The tokenizer whose vocabulary is `vocabSize` ids, if any. */
export function tokenizerOfVocab(vocabSize: number): TokenizerName | undefined {
  return TOKENIZER_NAMES.find((n) => VOCAB_SIZE[n] === vocabSize);
}

/** The tokenizer a checkpoint was trained with: its meta's, else the one its vocabulary fits. */
export function checkpointTokenizer(meta: Record<string, string>, config: GPTConfig): TokenizerName {
  if (meta.tokenizer !== undefined) return tokenizerName(meta.tokenizer);
  const byVocab = tokenizerOfVocab(config.vocabSize);
  if (!byVocab)
    throw new TokenizerError('E_VOCAB_MISMATCH', `vocabSize ${config.vocabSize} fits no tokenizer, and none is named`);
  return byVocab;
}
