// The `atoll` command line. Each subcommand lives in server/commands/ (or its
// own module) and is loaded lazily, so `atoll sample` does not pay for the server.

import { Command, InvalidArgumentError, Option } from 'commander';
import { PRESETS } from '../core/model/config.ts';

export function intArg(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`'${v}' is not a non-negative integer`);
  return n;
}

export function numArg(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n)) throw new InvalidArgumentError(`'${v}' is not a number`);
  return n;
}

const presetOption = () => new Option('--preset <name>', 'model preset').choices(Object.keys(PRESETS));
const engineOption = () => new Option('--engine <kind>', 'training engine').choices(['cpu', 'webgpu']).default('cpu');

/** Prints an error with its code and exits non-zero (never a stack trace for user errors). */
function fail(e: unknown): never {
  const err = e as Error & { code?: string };
  const code = err.code ?? (/^(E_[A-Z_]+)/.exec(err.message)?.[1]) ?? 'E_FAILED';
  process.stderr.write(`atoll: error ${code}: ${err.message.replace(/^E_[A-Z_]+:\s*/, '')}\n`);
  process.exit(1);
}

export function buildProgram(): Command {
  const program = new Command('atoll')
    .description('Train one language model across islands of compute: browsers on WebGPU and GPU servers, synced by compressed DiLoCo deltas.')
    .showHelpAfterError();

  program.command('train')
    .description('train one island locally (no server), evaluate on the held-out split, write a checkpoint')
    .addOption(presetOption().default('small'))
    .option('--steps <n>', 'inner steps', intArg, 300)
    .option('--data <path>', 'text file or folder of .txt files (default: bundled Moby-Dick)')
    .option('--out <file>', 'checkpoint path (safetensors)', 'ckpt.safetensors')
    .option('--batch <n>', 'sequences per step', intArg)
    .option('--lr <lr>', 'peak learning rate', numArg, 3e-3)
    .option('--seed <n>', 'init and data seed', intArg, 1337)
    .option('--eval-every <n>', 'evaluate every n steps', intArg, 50)
    .option('--eval-batches <n>', 'held-out batches per eval', intArg, 8)
    .addOption(engineOption())
    .option('--json', 'print one JSON object at the end')
    .action(async (o) => {
      const { train } = await import('./commands/train.ts');
      const r = await train({ ...o, json: !!o.json });
      if (o.json) {
        const { trainLosses: _omit, ...rest } = r;
        process.stdout.write(JSON.stringify(rest) + '\n');
      } else {
        process.stderr.write(`done: ${r.tokens} tokens, eval loss ${r.evalLossFirst.toFixed(3)} → ${r.evalLossLast.toFixed(3)}, ${r.tokensPerSec.toFixed(0)} tok/s\n`);
      }
    });

  program.command('sample')
    .description('print text generated from a checkpoint')
    .requiredOption('--checkpoint <file>', 'a checkpoint written by atoll train or atoll serve')
    .option('--prompt <text>', 'text to continue', '')
    .option('--tokens <n>', 'bytes to generate', intArg, 200)
    .option('--temperature <t>', 'sampling temperature (0 = greedy)', numArg, 0.8)
    .option('--seed <n>', 'sampling seed', intArg, 1)
    .addOption(engineOption())
    .action(async (o) => {
      const { sampleFromCheckpoint } = await import('./commands/sample.ts');
      process.stdout.write(o.prompt + (await sampleFromCheckpoint(o)) + '\n');
    });

  return program;
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (e) {
    fail(e);
  }
}
