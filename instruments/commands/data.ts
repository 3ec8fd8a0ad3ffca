// `atoll data prepare`: the command and its flags (the work is loaded lazily from data-prepare.ts).

import { type Command, Option } from 'commander';
import { intIn } from '../knob-flags.ts';

/** A shard's tokens: up to 10^9 (2 GB of uint16; llm.c's header counts in an int32). */
const TOKENS = intIn(1, 1_000_000_000);

export function registerData(program: Command): void {
  const data = program
    .command('data')
    .description('token shards for `atoll train --data DIR`: prepare (text, .jsonl, .parquet → llm.c shards)');
  data
    .command('prepare')
    .description(
      "tokenize text into shards in llm.c's format (1,024-byte header, then uint16 tokens) and an index.json; " +
        'shard 0 is the held-out shard; a stopped prepare resumes from its last good shard',
    )
    .argument(
      '<inputs...>',
      'text files (.txt, .md: one document each), folders (walked recursively for those and the next two), ' +
        '.jsonl (a "text" field per line), .parquet (a "text" column)',
    )
    .addOption(new Option('--tokenizer <name>', 'token ids to write').choices(['gpt2', 'byte']).default('gpt2'))
    .requiredOption('--out <dir>', 'the shard folder (new or empty, or a stopped prepare of the same inputs to resume)')
    .option('--shard-tokens <n>', 'tokens per train shard, 1..10^9 (llm.c: 100M)', TOKENS, 100_000_000)
    .option('--held-out-tokens <n>', 'tokens of the held-out shard (shard 0), 1..10^9', TOKENS, 100_000)
    .option('--json', 'print the index (and totals) as one JSON object on stdout')
    .action(async (inputs: string[], o) => {
      const { prepare } = await import('./data-prepare.ts');
      const r = await prepare({
        tokenizer: o.tokenizer,
        out: o.out,
        inputs,
        shardTokens: o.shardTokens,
        heldOutTokens: o.heldOutTokens,
      });
      if (o.json) process.stdout.write(JSON.stringify(r) + '\n');
      else
        process.stderr.write(
          `wrote ${r.shards.length} shards (${r.tokens.toLocaleString()} ${r.tokenizer} tokens, held out: ` +
            `${r.heldOut}${r.resumed ? `; ${r.resumed} kept from the stopped run` : ''}) and ${r.out}/index.json\n`,
        );
    });
}
