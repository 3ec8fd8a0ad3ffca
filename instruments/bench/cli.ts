// `atoll bench …`: the benchmarks' subcommands, registered on the program by instruments/cli.ts.
// Each loads its bench lazily.

import { type Command, Option } from 'commander';
import { PRESETS } from '../../core/model/config.ts';
import { ENCODINGS } from '../../core/codec/index.ts';
import { COLD_START_WARMUP_STEPS } from '../../core/coord/config.ts';
import { intIn, numIn } from '../knob-flags.ts';

/** `bench server --outer-workers`: the outer step in two worker threads, as serve's default run. */
const OUTER_WORKERS_DEFAULT = 2;
const WORKERS = intIn(0, 64);

export function registerBench(program: Command): void {
  const bench = program.command('bench').description('benchmarks that print JSON (with --json)');
  bench
    .command('server')
    .description('server apply throughput per codec, and a load test with many simulated islands')
    .option('--islands <n>', 'simulated islands for the load test, 1..100,000', intIn(1, 100_000), 1000)
    .option('--procs <n>', 'child processes that hold the simulated islands, 1..64', intIn(1, 64), 4)
    .option('--seconds <s>', 'load test duration, (0, 3600]', numIn(0, 3600, true), 20)
    .option(
      '--gateways <n>',
      'load test on Redis roles: n gateway processes and one aggregator, 0..16 (a redis-server on a free ' +
        'port; 0: the embedded server)',
      intIn(0, 16),
      0,
    )
    .option('--skip-load', 'only measure apply throughput')
    .option(
      '--outer-workers <n>',
      'worker threads for the outer step, as serve --outer-workers, 0..64 (0: on the event loop; no pool figures)',
      WORKERS,
      OUTER_WORKERS_DEFAULT,
    )
    .option('--json', 'print one JSON object')
    .action(async (o) => {
      const { benchServer } = await import('./server.ts');
      const r = await benchServer({
        islands: o.islands,
        procs: o.procs,
        seconds: o.seconds,
        gateways: o.gateways,
        load: !o.skipLoad,
        outerWorkers: o.outerWorkers,
        log: o.json ? () => {} : (s: string) => process.stderr.write(s + '\n'),
      });
      process.stdout.write((o.json ? JSON.stringify(r) : JSON.stringify(r, null, 2)) + '\n');
    });
  bench
    .command('cpu')
    .description('the training step on the Wasm SIMD engine at 1 and 2 threads against the JS reference')
    .option('--presets <list>', 'model presets, comma-separated', 'tiny,small,base')
    .option('--steps <n>', 'timed steps per engine, at least (a fast step repeats for 1 s), 1..1000', intIn(1, 1000), 5)
    .option('--threads <list>', "the Wasm engine's thread counts, comma-separated", '1,2')
    .option('--json', 'print one JSON object')
    .action(async (o) => {
      const presets = String(o.presets).split(',');
      const bad = presets.filter((p) => !(p in PRESETS));
      if (bad.length) throw new Error(`E_BAD_REQUEST: --presets: unknown ${bad.join(', ')}`);
      const threads = String(o.threads).split(',').map(intIn(1, 64));
      const { benchCpu } = await import('./cpu.ts');
      const log = o.json ? () => {} : (s: string) => process.stderr.write(s + '\n');
      const r = await benchCpu({ presets: presets as never, steps: o.steps, threads, log });
      process.stdout.write((o.json ? JSON.stringify(r) : JSON.stringify(r, null, 2)) + '\n');
    });
  bench
    .command('kernels')
    .description(
      'our WGSL matmuls and training step vs TF.js (webgpu) on the same adapter, and the CPU reference ' +
        '(bench/README.md)',
    )
    .option(
      '--peak-tflops <x>',
      "the adapter's fp32 peak in TFLOP/s, (0, 10000]: adds MFU figures",
      numIn(0, 10_000, true),
    )
    .option('--quick', 'fewer shapes and steps')
    .option('--no-autotune', 'train step: skip timing the matmul variants at engine start')
    .option('--profile', 'time each kernel of a training step (timestamp-query) and print its share')
    .option('--json', 'print one JSON object (progress still goes to stderr)')
    .action(async (o) => {
      const { benchKernels, formatKernelBench } = await import('./kernels.ts');
      const r = await benchKernels({
        peakTflops: o.peakTflops,
        quick: !!o.quick,
        autotune: o.autotune,
        profile: !!o.profile,
        log: (s: string) => process.stderr.write(s + '\n'),
      });
      process.stdout.write((o.json ? JSON.stringify(r) : formatKernelBench(r)) + '\n');
    });
  bench
    .command('cold-start')
    .description(
      "one island's first round on a preset's default run: held-out loss before and after, per round " +
        'length, with and without the fresh-AdamW warmup, cold and joining late (CPU, deterministic)',
    )
    .addOption(
      new Option('--preset <name>', 'model preset of the default run').choices(Object.keys(PRESETS)).default('small'),
    )
    .option('--rounds <list>', 'round lengths in inner steps, comma-separated', '1,4,8,50')
    .option(
      '--warmups <list>',
      "warmups in AdamW steps to compare (0: none), comma-separated; the first one's island is the late joiner's start",
      `${COLD_START_WARMUP_STEPS},0`,
    )
    .option(
      '--late <n>',
      'a late joiner trains from θ after this many steps, 0..1,000,000 (0: none)',
      intIn(0, 1_000_000),
      50,
    )
    .addOption(
      new Option('--codec <enc>', "the run's uplink (default: the default run's, sparse)").choices([...ENCODINGS]),
    )
    .option('--json', 'print one JSON object')
    .action(async (o) => {
      const { benchColdStart, formatColdStart } = await import('./cold-start.ts');
      const list = (s: string) =>
        s
          .split(',')
          .map((x) => Number(x.trim()))
          .filter((x) => Number.isInteger(x) && x >= 0);
      const r = await benchColdStart({
        preset: o.preset,
        codec: o.codec,
        rounds: list(o.rounds).filter((x) => x > 0),
        warmups: list(o.warmups),
        late: o.late,
        log: o.json ? undefined : (s: string) => process.stderr.write(s + '\n'),
      });
      process.stdout.write((o.json ? JSON.stringify(r) : formatColdStart(r)) + '\n');
    });
  bench
    .command('codec')
    .description(
      'pseudo-gradient codec: encode/decode MB/s and frame size per encoding, and bytes up and down per ' +
        "round in the run's codecs with the time of each side (Node), on a delta the size of a preset " +
        '(default base; gpt2: 124M)',
    )
    .addOption(
      new Option('--preset <name>', 'model preset: the size of the delta')
        .choices(Object.keys(PRESETS))
        .default('base'),
    )
    .option('--repeats <n>', 'timed repeats per encoding (median), 1..100', intIn(1, 100), 3)
    .option('--rounds-only', 'only the per-round bytes and times (skip the table of every encoding)')
    .option('--json', 'print one JSON object')
    .action(async (o) => {
      const { runCodecBench, formatCodecBench } = await import('./codec.ts');
      const log = o.json ? undefined : (s: string) => process.stderr.write(s + '\n');
      const r = runCodecBench({ repeats: o.repeats, preset: o.preset, roundsOnly: o.roundsOnly === true, log });
      process.stdout.write((o.json ? JSON.stringify(r) : formatCodecBench(r)) + '\n');
    });
}
