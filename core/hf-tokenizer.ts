// GPT-2's tokenizer as transformers reads it (GPT2Tokenizer: vocab.json + merges.txt), derived from
// js-tiktoken's r50k_base ranks, so an exported model's AutoTokenizer gives Atoll's ids.
//
// vocab.json: each token's bytes through GPT-2's byte-to-unicode map → its rank (= its id), and
// "<|endoftext|>" → 50256. merges.txt: "#version: 0.2", then one merge per token of rank ≥ 256, in
// rank order: the two parts that BPE over the ranks below the token's own leaves of its bytes (a
// token of rank r is made by merge r − 256, so its parts are what BPE stops at just before it).

import { type RankFile, gpt2Ranks, rankBytes } from './data/tokenizer.ts';
import { type HfTokenizer, byteSymbols } from './hf.ts';

const EOT = '<|endoftext|>';

/** Bytes as a Map key: one char per byte. */
const key = (b: Uint8Array) => String.fromCharCode(...b);

/** BPE of `bytes` with only the ranks below `maxRank`: repeatedly merge the adjacent pair of lowest rank. */
function bpe(ranks: Map<string, number>, bytes: Uint8Array, maxRank: number): string[] {
  const parts = Array.from(bytes, (b) => String.fromCharCode(b));
  for (;;) {
    let best = -1;
    let bestRank = maxRank;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = ranks.get(parts[i] + parts[i + 1]);
      if (r !== undefined && r < bestRank) {
        bestRank = r;
        best = i;
      }
    }
    if (best < 0) return parts;
    parts.splice(best, 2, parts[best] + parts[best + 1]);
  }
}

export interface Gpt2TokenizerFiles {
  'vocab.json': Uint8Array;
  'merges.txt': Uint8Array;
}

/** vocab.json and merges.txt from the ranks (throws E_BAD_RANKS if a token is not one merge of two). */
export function gpt2TokenizerFiles(file: RankFile): Gpt2TokenizerFiles {
  const tokens = rankBytes(file);
  const sym = byteSymbols();
  const text = (s: string) => Array.from(s, (c) => sym[c.charCodeAt(0)]).join('');
  const ranks = new Map<string, number>();
  tokens.forEach((t, r) => ranks.set(key(t), r));
  const vocab: string[] = tokens.map((t, r) => `${JSON.stringify(text(key(t)))}: ${r}`);
  vocab.push(`${JSON.stringify(EOT)}: ${file.special_tokens[EOT]}`);
  const merges = ['#version: 0.2'];
  for (let r = 256; r < tokens.length; r++) {
    const parts = bpe(ranks, tokens[r], r);
    if (parts.length !== 2)
      throw Object.assign(new Error(`E_BAD_RANKS: token ${r} is not one merge of two lower tokens`), {
        code: 'E_BAD_RANKS',
      });
    merges.push(`${text(parts[0])} ${text(parts[1])}`);
  }
  const enc = new TextEncoder();
  return { 'vocab.json': enc.encode(`{${vocab.join(', ')}}\n`), 'merges.txt': enc.encode(merges.join('\n') + '\n') };
}

/** The folder's tokenizer files: vocab.json, merges.txt, and GPT2Tokenizer's config, <|endoftext|> as bos, eos, unk. */
export async function gpt2HfTokenizer(blockSize: number): Promise<HfTokenizer> {
  const file = await gpt2Ranks();
  const eot = file.special_tokens[EOT];
  const special = { bos_token: EOT, eos_token: EOT, unk_token: EOT };
  const json = (o: unknown) => new TextEncoder().encode(JSON.stringify(o, null, 2) + '\n');
  const config = {
    tokenizer_class: 'GPT2Tokenizer',
    model_max_length: blockSize,
    add_prefix_space: false,
    clean_up_tokenization_spaces: false,
    ...special,
    added_tokens_decoder: {
      [eot]: { content: EOT, lstrip: false, normalized: true, rstrip: false, single_word: false, special: true },
    },
  };
  const files = {
    ...gpt2TokenizerFiles(file),
    'tokenizer_config.json': json(config),
    'special_tokens_map.json': json(special),
  };
  return { files, eos: eot };
}
