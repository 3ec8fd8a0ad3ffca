// `atoll simulate --preset scaling`: the scaling study on the published protocol (Charles et al.
// 2025; scaling-protocol.ts says what every rung trains, scaling-plan.ts what it searches). Does the
// islands' gap to a tuned DDP narrow, hold or widen from `tiny` to L4-C76?
//
//   const report = await runScaling({ out: 'runs/scaling' });   // again on the same folder: resumes
//
// Runs go to `workers` worker threads as the search asks for them, the largest rung first (its
// chain of searches is the longest); each finished run is appended to rows.jsonl, so a stopped
// ladder started again with the same --out resumes where it stopped. The first ladder (H tied to
// the budget, 2 tokens per parameter) is `--preset scaling-v1` (scaling-v1.ts).

import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { flopsPerToken } from '../../core/model/config.ts';
import { type Result, ok } from '../../core/result.ts';
import { loadCorpus } from '../../server/run/corpus.ts';
import { runRows } from './index.ts';
import { CPU_RUNGS, RUNGS, ladderFlags, pickRungs } from './rungs.ts';
import { Journal, type JournalRun } from './scaling-journal.ts';
import { planRung } from './scaling-plan.ts';
import {
  ADAM,
  PROTOCOL,
  PROTOCOL_H,
  type Protocol,
  QUICK_PROTOCOL,
  type RowSpec,
  SEQ_LEN,
  buildRow,
  rowKey,
  rungPlan,
} from './scaling-protocol.ts';
import { type StudyReport, studyReport } from './scaling-summary.ts';
import { studyTable } from './scaling-table.ts';
import type { SimCommon, SimulateOptions } from './types.ts';
import { warmStartOffPlateau } from './warm-start.ts';

type SharedOptions = Pick<
  SimulateOptions,
  'workers' | 'data' | 'engine' | 'out' | 'json' | 'print' | 'log' | 'seed' | 'evalBatches'
>;

export interface ScalingOptions extends SharedOptions {
  /** The first n rungs of RUNGS, or rung names (default the 4 CPU rungs; quick: tiny and L2-C48). */
  rungs?: number | string[];
  /** The CI-sized smoke of the same protocol (QUICK_PROTOCOL). */
  quick?: boolean;
  /** D = this × N (default 20; quick 20/64). */
  tokensPerParam?: number;
  /** Shared warm start per rung and seed, inside D (default 32768; quick 0). */
  warmStartTokens?: number;
  evals?: number;
  /** Stop after starting this many runs (tests: a ladder cut short); rows.jsonl keeps them. */
  maxRuns?: number;
}

/** Parses the flags the scaling preset takes (the rest of simulate's flags are ignored). */
export function scalingOptionsFromCli(raw: Record<string, unknown>): Result<ScalingOptions> {
  const f = ladderFlags(raw, ['seed', 'workers', 'evalBatches', 'warmStartTokens'] as const, ['cpu', 'js', 'webgpu']);
  if (!f.ok) return f;
  const { ints, ...rest } = f.value;
  const o: ScalingOptions = { ...rest, ...ints, quick: raw.quick === true };
  if (raw.cold === true) o.warmStartTokens = 0;
  return ok(o);
}

/** The protocol of a run with these options (what rows.jsonl's first line records). */
export function protocolOf(opts: ScalingOptions): Protocol {
  const base = opts.quick ? QUICK_PROTOCOL : PROTOCOL;
  return opts.tokensPerParam !== undefined ? { ...base, tokensPerParam: opts.tokensPerParam } : base;
}

export async function runScaling(opts: ScalingOptions = {}): Promise<StudyReport> {
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const log = opts.log ?? (opts.json ? () => {} : (l: string) => process.stderr.write(`  ${l}\n`));
  const p = protocolOf(opts);
  const seed = opts.seed ?? 1;
  // quick's runs are short: worker threads would spend more starting than computing
  const workers = opts.workers ?? (opts.quick ? 0 : 2);
  const specs = pickRungs(opts.rungs ?? (opts.quick ? 2 : CPU_RUNGS), CPU_RUNGS);
  const plans = specs.map((s) => rungPlan(s, p));
  const data = opts.data ?? 'sotu';
  const warmWanted = opts.warmStartTokens ?? (opts.quick ? 0 : 32_768);
  const evals = opts.evals ?? (opts.quick ? 1 : 6);
  const evalBatches = opts.evalBatches ?? (opts.quick ? 2 : 32);
  const engine = opts.engine ?? 'cpu';
  const outDir = resolve(
    opts.out ?? join('runs', `scaling-${new Date().toISOString().replace(/\D/g, '').slice(0, 14)}`),
  );
  mkdirSync(outDir, { recursive: true });
  const head = { p, rungs: specs.map((s) => s.name), data, seed, warmWanted, evals, evalBatches, engine };
  const journal = new Journal(join(outDir, 'rows.jsonl'), head);
  if (journal.resumed) log(`resuming ${outDir}: ${journal.resumed} runs done`);
  const res = new Map([...journal.runs].map(([k, r]) => [k, r.result]));
  const ds = loadCorpus(data);
  const warm = new Map<string, Promise<{ common: SimCommon; warmTokens: number }>>();
  const commonFor = (k: number, s: number) => {
    const id = `${k}/${s}`;
    if (!warm.has(id))
      warm.set(
        id,
        (async () => {
          const common: SimCommon = {
            model: 'tiny',
            config: plans[k].spec.config,
            engine,
            seqLen: SEQ_LEN,
            seed: s,
            evals,
            evalBatches,
            evalBatchSize: 16,
            data,
            adam: { ...ADAM },
          };
          if (warmWanted <= 0) return { common, warmTokens: 0 };
          const w = await warmStartOffPlateau(common, ds, warmWanted);
          log(
            `${plans[k].spec.name} seed ${s}: warm start ${w.tokens} tokens (inside D), eval ${w.evalLoss.toFixed(4)}`,
          );
          return { common: { ...common, init: w.params }, warmTokens: w.tokens };
        })(),
      );
    return warm.get(id)!;
  };
  const runSpec = async (s: RowSpec): Promise<JournalRun> => {
    const k = plans.findIndex((x) => x.spec.name === s.rung);
    const { common, warmTokens } = await commonFor(k, s.seed);
    const row = buildRow(plans[k], s, warmTokens);
    const [result] = await runRows([row], [common], workers > 0 ? 1 : 0, log);
    return { key: rowKey(s), spec: s, warmTokens, result };
  };
  const cost = (s: RowSpec) => plans.find((x) => x.spec.name === s.rung)!.params;
  const running = new Map<string, Promise<void>>();
  let ran = 0;
  for (;;) {
    const want = plans
      .flatMap((_, k) => planRung(k, plans, p, seed, res).want)
      .filter((s) => !running.has(rowKey(s)))
      .sort((a, b) => cost(b) - cost(a));
    while (running.size < Math.max(1, workers) && want.length && ran < (opts.maxRuns ?? Infinity)) {
      const s = want.shift()!;
      const key = rowKey(s);
      ran++;
      log(`run ${ran}: ${key}`);
      running.set(
        key,
        runSpec(s)
          .then((r) => {
            journal.add(r);
            res.set(key, r.result);
          })
          .finally(() => running.delete(key)),
      );
    }
    if (!running.size) break;
    await Promise.race(running.values());
  }
  const cpu = process.cpuUsage(cpu0);
  const report = studyReport(plans, p, seed, journal.runs, {
    data,
    seed,
    workers,
    engine,
    quick: opts.quick === true,
    warmStartTokens: warmWanted,
    realTimeMs: performance.now() - t0,
    cpuTimeMs: (cpu.user + cpu.system) / 1000,
    resumedRuns: journal.resumed,
    ranRuns: ran,
    flopsPerToken: plans.map((x) => flopsPerToken(x.spec.config, SEQ_LEN)),
  });
  const json = JSON.stringify(report, (_k, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v), 2);
  const table = studyTable(report);
  writeFileSync(join(outDir, 'report.json'), json + '\n');
  writeFileSync(join(outDir, 'report.md'), table + '\n');
  if (opts.print !== false) process.stdout.write(opts.json ? json + '\n' : `${table}\n\nrun folder: ${outDir}\n`);
  return report;
}

export { PROTOCOL, PROTOCOL_H, QUICK_PROTOCOL, RUNGS };
