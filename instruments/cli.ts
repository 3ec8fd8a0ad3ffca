// The `atoll` command line. Each subcommand lives in instruments/commands/ (or its
// own module) and is loaded lazily, so `atoll sample` does not pay for the server.

import { Command, InvalidArgumentError, Option } from 'commander';
import { KNOBS, type KnobName } from '../core/run-config.ts';
import { intIn, knobOption, numIn } from './knob-flags.ts';
import { registerBench } from './bench/cli.ts';
import { registerData } from './commands/data.ts';
import { PRESETS } from '../core/model/config.ts';
import { ENCODINGS } from '../core/codec/index.ts';
import { SIM_MODEL_NAMES } from './simulate/rungs.ts';

/** `island --server`: one or more http(s) URLs, comma-separated. */
function serverUrls(v: string): string {
  for (const u of v.split(',')) {
    let ok = false;
    try {
      const p = new URL(u.trim());
      ok = (p.protocol === 'http:' || p.protocol === 'https:') && p.hostname !== '';
    } catch {
      /* not a URL */
    }
    if (!ok)
      throw new InvalidArgumentError(`'${u.trim().slice(0, 80)}' is not an http(s) URL (e.g. http://localhost:8080)`);
  }
  return v;
}

const SEED = intIn(0, 2 ** 32 - 1);
const PORT = intIn(0, 65_535);
const WORKERS = intIn(0, 64);
/** A butterfly group: 0 (off) or a power of two, 2..16. */
function MIX_GROUP(v: string): number {
  const k = intIn(0, 16)(v);
  if (k === 1 || (k & (k - 1)) !== 0) throw new InvalidArgumentError('must be 0 (off) or a power of two from 2 to 16');
  return k;
}

/** The run config's knobs `serve` takes as flags: every knob (core/run-config.ts KNOBS) but --preset, in its order. */
const SERVE_KNOBS = (Object.keys(KNOBS) as KnobName[]).filter((k) => k !== 'preset');
/** --data of simulate, fleet and chaos: what serve --data takes. */
const DATA_HELP =
  'text file, folder of .txt files, a bundled text: moby-dick (default), sotu, or a folder of token shards in ' +
  "the model's tokenizer (atoll data prepare; a run's islands fetch their ranges, the simulator reads them whole)";
const presetOption = () => new Option('--preset <name>', 'model preset').choices(Object.keys(PRESETS));
/** The Wasm engine's threads (worker_threads sharing its memory; the same bits for the same count). */
const threadsOption = () =>
  new Option('--threads <n>', 'CPU (Wasm): threads the step runs on, 1..64 (default 1)').argParser(intIn(1, 64));
const engineOption = () =>
  new Option('--engine <kind>', 'training engine (cpu: Wasm SIMD; js: the JS reference)')
    .choices(['cpu', 'js', 'webgpu'])
    .default('cpu');

const precisionOption = () =>
  new Option(
    '--precision <p>',
    "WebGPU: storage of activations, the matmuls' weight copy and Δ (master weights and Adam moments stay f32)",
  )
    .choices(['f32', 'f16'])
    .default('f32');

/** Prints an error with its code and exits non-zero (never a stack trace for user errors). */
function fail(e: unknown): never {
  const err = e as Error & { code?: string };
  const code = err.code ?? /^(E_[A-Z_]+)/.exec(err.message)?.[1] ?? 'E_FAILED';
  process.stderr.write(`atoll: error ${code}: ${err.message.replace(/^E_[A-Z_]+:\s*/, '')}\n`);
  process.exit(1);
}

export function buildProgram(): Command {
  const program = new Command('atoll')
    .description(
      'Train one language model across islands of compute: browsers on WebGPU and GPU servers, synced by ' +
        'compressed DiLoCo deltas.',
    )
    // one line naming the flag and its range (the help is one --help away)
    .showHelpAfterError(false);

  program
    .command('train')
    .description('train one island locally (no server), evaluate on the held-out split, write a checkpoint')
    .addOption(presetOption().default('small'))
    .option('--steps <n>', 'inner steps, 1..10,000,000', intIn(1, 10_000_000), 300)
    .option(
      '--data <path>',
      'text file, folder of .txt files, a bundled text: moby-dick (default), sotu, or a folder of token shards ' +
        '(atoll data prepare, llm.c or nanoGPT .bin files)',
    )
    .option('--out <file>', 'checkpoint path (safetensors)', 'ckpt.safetensors')
    .option('--batch <n>', 'sequences per step, 1..4096', intIn(1, 4096))
    .option('--seq-len <n>', "tokens per sequence, 1..the preset's context (default: its context)", intIn(1, 1 << 20))
    .option('--lr <lr>', 'peak learning rate, (0, 1]', numIn(0, 1, true), 3e-3)
    .option('--seed <n>', 'init and data seed, 0..2^32-1', SEED, 1337)
    .option('--eval-every <n>', 'evaluate every n steps, 1..10,000,000', intIn(1, 10_000_000), 50)
    .option('--eval-batches <n>', 'held-out batches per eval, 1..100,000', intIn(1, 100_000), 8)
    .option('--metrics <dir>', 'folder for the scalars per step: scalars.jsonl and TensorBoard (default <out>.metrics)')
    .addOption(engineOption())
    .addOption(threadsOption())
    .option('--no-autotune', 'WebGPU: skip timing the matmul variants at start (use the defaults)')
    .option(
      '--micro-batch <n>',
      'WebGPU: sequences per forward and backward pass, their gradients added (default: the whole batch), 1..4096',
      intIn(1, 4096),
    )
    .addOption(precisionOption())
    .option('--json', 'print one JSON object at the end')
    .action(async (o) => {
      const { train } = await import('./commands/train.ts');
      const r = await train({ ...o, json: !!o.json });
      if (o.json) {
        const { trainLosses: _omit, ...rest } = r;
        process.stdout.write(JSON.stringify(rest) + '\n');
      } else {
        process.stderr.write(
          `done: ${r.tokens} tokens, eval loss ${r.evalLossFirst.toFixed(3)} → ${r.evalLossLast.toFixed(3)}, ` +
            `${r.tokensPerSec.toFixed(0)} tok/s\n`,
        );
      }
    });

  program
    .command('sample')
    .description('print text generated from a checkpoint')
    .requiredOption('--checkpoint <file>', 'a checkpoint written by atoll train or atoll serve')
    .option('--prompt <text>', 'text to continue', '')
    .option('--tokens <n>', 'bytes to generate, 1..100,000', intIn(1, 100_000), 200)
    .option('--temperature <t>', 'sampling temperature, 0..10 (0 = greedy)', numIn(0, 10), 0.8)
    .option('--seed <n>', 'sampling seed, 0..2^32-1', SEED, 1)
    .addOption(engineOption())
    .action(async (o) => {
      const { sampleFromCheckpoint } = await import('./commands/sample.ts');
      process.stdout.write(o.prompt + (await sampleFromCheckpoint(o)) + '\n');
    });

  program
    .command('export')
    .description(
      'a checkpoint as a Hugging Face transformers GPT-2 folder (--format hf), or such a folder back to a ' +
        'checkpoint (--format atoll)',
    )
    .requiredOption('--checkpoint <path>', 'hf: a checkpoint file; atoll: a transformers folder')
    .addOption(new Option('--format <fmt>', 'what to write').choices(['hf', 'atoll']).default('hf'))
    .requiredOption('--out <path>', 'hf: the folder to write; atoll: the checkpoint file')
    .action(async (o) => {
      const { exportCheckpoint } = await import('./commands/export.ts');
      for (const p of await exportCheckpoint(o)) process.stderr.write(`wrote ${p}\n`);
    });

  const serve = program
    .command('serve')
    .description(
      'the coordinator server: island protocol (socket.io), REST API, /metrics, volunteer page and dashboard; ' +
        'resumes an existing run folder (defaults < stored config < --config < flags; docs/operations.md)',
    )
    .addOption(presetOption());
  // the run's knobs (core/run-config.ts): name, help and range from the run config's schema
  for (const k of SERVE_KNOBS) serve.addOption(k === 'mixGroup' ? knobOption(k).argParser(MIX_GROUP) : knobOption(k));
  serve
    .option('--run-dir <dir>', 'run folder (default ./runs/<name>)')
    .option('--config <file>', 'JSON run config (flags override it; on resume, over the stored config.json)')
    .option(
      '--start-over',
      'move the run folder aside (to <dir>.old-<time>) and start a new run there: for a folder whose ' +
        'checkpoints are all unreadable',
    )
    .option(
      '--init <folder>',
      'θ0 of a new run from a transformers GPT-2 folder (config.json + model.safetensors, as export --format hf ' +
        "writes); the run's model is the folder's shape (--preset or a --config model must match it)",
    )
    .option('--port <n>', 'HTTP port, 0..65535 (default $PORT or 8080)', PORT)
    .option('--host <addr>', 'bind address (default $HOST or 0.0.0.0)')
    .option('--no-eval', 'do not evaluate on the held-out split after updates')
    .addOption(
      new Option(
        '--log-level <level>',
        'operator log level (JSON lines on stderr; default $ATOLL_LOG_LEVEL or info)',
      ).choices(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
    )
    .option('--build-if-needed', 'run vite build first when dist/client is missing or older than its sources')
    .option('--redis <url>', 'scale out on Redis (redis://HOST:PORT): with --role, this process is one part of the run')
    .addOption(
      new Option(
        '--role <role>',
        'with --redis: gateway (islands, pages, API; any number), aggregator (the run folder and coordinator; ' +
          'one active, the others standby), or all (both)',
      ).choices(['gateway', 'aggregator', 'all']),
    )
    .option(
      '--validator-token <token>',
      'verified work: validators (atoll island --validator) authenticate with this ' +
        '(default $ATOLL_VALIDATOR_TOKEN; none: no audits)',
    )
    .option(
      '--mix-ice-servers <file>',
      'with --mix-group: JSON array of RTCPeerConnection iceServers (STUN, TURN) every group member gets, ' +
        'for peers beyond a LAN (default none: host candidates only)',
    )
    .action(async (o) => {
      const { serve } = await import('./commands/serve.ts');
      await serve(o);
    });

  program
    .command('island')
    .description('a headless island: joins a server and trains until the run is done or Ctrl-C')
    .requiredOption(
      '--server <urls>',
      'server URL, e.g. http://localhost:8080; several gateways of one run comma-separated: the island ' +
        'fails over between them',
      serverUrls,
    )
    .addOption(engineOption())
    .option('--no-autotune', 'WebGPU: skip timing the matmul variants at start (use the defaults)')
    .addOption(precisionOption())
    .option(
      '--devices <n>',
      'WebGPU: train data-parallel on n devices as one island, 1..64 (gradients all-reduced every step, one Δ)',
      intIn(1, 64),
      1,
    )
    .addOption(threadsOption())
    .option(
      '--no-calibrate',
      "skip timing a few steps before joining (the first round is then the run's default length, not sized " +
        'to its round time)',
    )
    .option('--name <name>', 'display name on the dashboard')
    .option(
      '--batch <n>',
      "largest micro-batch per device, 1..65536 (default: the run's); the island's batch is n × devices",
      intIn(1, 65_536),
    )
    .option('--duty <f>', 'fraction of time spent computing, (0, 1]', numIn(0, 1, true))
    .option('--json', 'print one JSON summary at the end')
    .option(
      '--validator',
      "audit a sample of other islands' deltas instead of training (recomputes them on the engine, cpu by default)",
    )
    .option('--validator-token <token>', "with --validator: the run's validator token (default $ATOLL_VALIDATOR_TOKEN)")
    .option(
      '--no-mix',
      'never join butterfly mixing groups (WebRTC) on a server that mixes: upload every delta directly',
    )
    .action(async (o) => {
      const { island } = await import('./commands/island.ts');
      process.exitCode = await island(o);
    });

  program
    .command('simulate')
    .description(
      'many islands in one process in virtual time, through the real coordinator, codec and island ' +
        'runtime, compared with data-parallel (DDP) and a single island',
    )
    .option(
      '--preset <name>',
      'compare (the comparison table), diloco (one DiLoCo row and baselines), scaling (the model-size ' +
        'ladder on the published protocol: H 30, 20 tokens per parameter; resumes in --out), scaling-v1 (the ' +
        'first ladder), settings (every codec × sync/async × mixing off/groups of 4 at the CLI defaults, rises ' +
        'over 2 % flagged), smoke (seconds); a model preset name means compare on that model',
      'compare',
    )
    .addOption(
      new Option('--model <name>', "model preset, or a scaling rung's shape (sequence length 32)").choices(
        SIM_MODEL_NAMES,
      ),
    )
    .option('--islands <n>', 'islands per DiLoCo row, 1..256', intIn(1, 256))
    .option('--tokens <n>', 'token budget per row (tokens in θ), 1..10^12', intIn(1, 1e12))
    .option(
      '--rounds <n>',
      'budget in rounds of the nominal island instead of tokens, 1..1,000,000',
      intIn(1, 1_000_000),
    )
    .addOption(new Option('--mode <mode>', 'diloco preset: DiLoCo mode').choices(['sync', 'async']))
    // the knobs of serve, from the same definitions; a flag given holds for every DiLoCo row
    .addOption(knobOption('codec', "(diloco preset's row; default int4)"))
    .addOption(knobOption('innerSteps', '(of the nominal island; default 16)'))
    .addOption(knobOption('outerLr', "(default: serve's, 0.7; compare's rows 1.0)"))
    .addOption(knobOption('outerMomentum', "(default: serve's, 0.9; compare's rows 0.8)"))
    .addOption(knobOption('innerLr', '(peak; the floor a tenth of it; default 3e-3)'))
    .addOption(knobOption('trustRegion', "(every DiLoCo row, a fleet replay's too; default serve's, 2)"))
    .addOption(knobOption('downlink', "(every DiLoCo row, as serve's --downlink; default the row's)"))
    .option('--network <up,down,ms>', "every island's link: Mbit/s up, Mbit/s down, ms one way (default 20,100,30)")
    .option('--quick', 'one seed and fewer rows (tests); scaling: the CI-sized smoke of its protocol (2 rungs)')
    .option(
      '--rows <names>',
      'only these rows of the preset, comma-separated (with --quick: any row of the full preset, one seed)',
    )
    .option('--eval-batches <n>', 'held-out batches per evaluation, 1..100,000 (default 64)', intIn(1, 100_000))
    .option(
      '--warm-start-tokens <n>',
      'tokens of single-island training every row starts from, 0..10^12 (0: cold, as --cold)',
      intIn(0, 1e12),
    )
    .option(
      '--cold',
      'start every row cold, from θ0 = the init a fresh atoll serve --seed run starts from (no warm start)',
    )
    .option('--from-fleet <report>', 'replay an atoll fleet report.json in virtual time: its twin, DDP and single rows')
    .option('--compare <rows>', "diloco preset: baselines to add, comma-separated (ddp,single; 'none')")
    .option('--seed <n>', 'init and data seed, 0..2^32-1', SEED)
    .option('--workers <n>', 'worker threads running rows in parallel, 0..64 (0: in this thread)', WORKERS)
    .option('--data <path>', DATA_HELP)
    .option(
      '--out <dir>',
      'run folder for report.json, curves.csv, plot.svg, report.html, metrics/<row>/ (default ' +
        'runs/simulate-<time>); ' +
        'scaling: rows.jsonl there resumes a stopped ladder',
    )
    .option(
      '--rungs <n|names>',
      'scaling presets: the first n rungs of the ladder, or rung names, comma-separated (default the 4 CPU rungs)',
    )
    .option('--tokens-per-param <x>', 'scaling presets: token budget per parameter at every rung (default 20; v1 2)')
    .option(
      '--outer-rounds <n>',
      'scaling-v1: fleet rounds per run, 1..100,000, the H rule H = tokens / (rounds × global batch) (default 8)',
      intIn(1, 100_000),
    )
    .addOption(
      new Option(
        '--engine <kind>',
        'training engine of every island, baseline and evaluation (virtual time either way; cpu: Wasm SIMD, ' +
          'js: the JS reference)',
      )
        .choices(['cpu', 'js', 'webgpu'])
        .default('cpu'),
    )
    .option('--json', 'print report.json on stdout instead of the table')
    .action(async (o) => {
      const { runSimulate, simulateOptionsFromCli } = await import('./simulate/index.ts');
      const { stderrProgress } = await import('./simulate/progress.ts');
      if (o.preset === 'scaling') {
        const { runScaling, scalingOptionsFromCli } = await import('./simulate/scaling.ts');
        const sp = scalingOptionsFromCli(o);
        if (!sp.ok) throw Object.assign(new Error(sp.error.message), { code: sp.error.code });
        await runScaling({ ...sp.value, log: stderrProgress(false).log });
        return;
      }
      if (o.preset === 'scaling-v1') {
        const { runScaling, scalingOptionsFromCli } = await import('./simulate/scaling-v1.ts');
        const sp = scalingOptionsFromCli(o);
        if (!sp.ok) throw Object.assign(new Error(sp.error.message), { code: sp.error.code });
        await runScaling({ ...sp.value, ...stderrProgress(!sp.value.json) });
        return;
      }
      const parsed = simulateOptionsFromCli(o);
      if (!parsed.ok) throw Object.assign(new Error(parsed.error.message), { code: parsed.error.code });
      await runSimulate({ ...parsed.value, ...stderrProgress(true) });
    });

  program
    .command('fleet')
    .description(
      'a real run on loopback (atoll serve, Node islands as processes, headless Chromium volunteer pages) ' +
        'beside its simulated twin, DDP and a single island: report.json, curves.csv, plot.svg, report.html',
    )
    .addOption(presetOption().default('tiny'))
    .option(
      '--islands <n>',
      'Node islands, each its own process (those --schedule joins included), 0..64',
      intIn(0, 64),
      4,
    )
    .option(
      '--browsers <n>',
      'headless Chromium volunteer pages (/usr/bin/chromium, WebGPU on SwiftShader) that open the page and ' +
        'click Start, 0..16',
      intIn(0, 16),
      0,
    )
    .option(
      '--engines <list>',
      "Node islands' engines, cycled: cpu, webgpu; :f16 for f16 storage, xN for N devices (webgpu), e.g. webgpu:f16x2",
      'cpu',
    )
    .option('--batches <list>', "Node islands' micro-batches, cycled (default: the run's)")
    .option('--duty <list>', "Node islands' duty cycles in (0, 1], cycled", '1')
    .option(
      '--schedule <events>',
      'joins, leaves and kills as θ passes a fraction of the tokens: join:2@0.3,leave:1@0.6,kill:1@0.4 ' +
        '(kill -9, then restarted)',
    )
    .option('--tokens <n>', 'tokens in θ that end the run (and every row), 1..10^12', intIn(1, 1e12), 50_000)
    .option('--data <path>', DATA_HELP)
    .option('--seed <n>', 'θ init seed of the run and its twin, 0..2^32-1', SEED, 1337)
    .addOption(new Option('--mode <mode>', "DiLoCo mode (default: the run config's)").choices(['sync', 'async']))
    .addOption(new Option('--codec <enc>', "delta encoding (default: the run config's)").choices([...ENCODINGS]))
    .option('--config <file>', 'JSON run config, as atoll serve --config (the twin takes its settings from the run)')
    .option(
      '--redis [url]',
      'on the Redis roles: one aggregator and two gateways (no URL: a redis-server on a free port)',
    )
    .option(
      '--mix-group <k>',
      'butterfly mixing (atoll serve --mix-group): islands and pages ready together average over WebRTC in ' +
        'groups of k; 0 (off, the default), 2, 4, 8, 16; not with --redis',
      MIX_GROUP,
      0,
    )
    .option('--evals <n>', 'evaluation points over the run, 1..1000', intIn(1, 1000), 12)
    .option(
      '--eval-batches <n>',
      'held-out batches per evaluation (16 sequences each), 1..100,000',
      intIn(1, 100_000),
      64,
    )
    .option('--workers <n>', 'worker threads for the twin, DDP and single rows, 0..64', WORKERS)
    .option(
      '--timeout <min>',
      'give up when the live run has not reached the budget after this long, (0, 10080] minutes',
      numIn(0, 10_080, true),
      30,
    )
    .option('--out <dir>', 'output folder (default runs/fleet-<time>)')
    .option('--json', 'print report.json on stdout')
    .action(async (o) => {
      const { fleet, fleetSpecFromCli } = await import('./commands/fleet.ts');
      await fleet(fleetSpecFromCli(o), { out: o.out, workers: o.workers, json: !!o.json });
    });

  program
    .command('chaos')
    .description(
      'fault instrument: the same run with and without island kills, dropped connections and pauses; ' +
        'goodput, lost, duplicates, eval loss',
    )
    .option('--islands <n>', 'islands training at any time, 1..64', intIn(1, 64), 4)
    .option('--fail <f>', 'fraction of islands killed (kill -9) over the run, [0, 1]', numIn(0, 1), 0.3)
    .option('--tokens <n>', 'tokens in θ that end each run, 1..10^9', intIn(1, 1e9), 40_000)
    .option('--latency <ms>', 'latency the proxies add each way, 0..10,000 ms', intIn(0, 10_000), 10)
    .option('--no-baseline', 'skip the fault-free run (no eval-loss comparison)')
    .option('--data <path>', DATA_HELP)
    .option(
      '--roles',
      'on the Redis roles (atoll serve --role): two gateways, two aggregators; adds kill -9 of a gateway ' +
        'and of the active aggregator',
    )
    .option('--json', 'print one JSON object')
    .action(async (o) => {
      const say = (s: string) => process.stderr.write(s + '\n');
      const { chaos } = await import('./commands/chaos.ts');
      const r = await chaos({
        islands: o.islands,
        failFraction: o.fail,
        tokens: o.tokens,
        latencyMs: o.latency,
        baseline: o.baseline,
        roles: !!o.roles,
        data: o.data,
        log: say,
      });
      process.stdout.write((o.json ? JSON.stringify(r) : JSON.stringify(r, null, 2)) + '\n');
    });

  registerData(program);
  registerBench(program);

  return program;
}

export async function main(argv: string[]): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (e) {
    fail(e);
  }
}
