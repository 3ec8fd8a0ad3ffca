// `atoll simulate --preset scaling-v1`: the first ladder, kept to reproduce bench/results/scaling-cpu.json
// (`--preset scaling` is now the published protocol, scaling.ts). Does the islands' gap to data-parallel
// training narrow, hold or widen as the model grows? A ladder of model sizes, each with a token budget proportional to
// its parameters; per rung a tuned DDP (a small inner-lr sweep, the same for every rung), a single
// island, and 8 and 32 heterogeneous async sparse islands at the tuned DDP's inner lr (DiLoCo's
// practice: the inner optimizer is the data-parallel one), all from one shared warm start per rung.
//
//   const report = await runScaling({ rungs: 4 });   // ScalingReport: rungs[].rows[] like compare's rows
//
// Fairness: DDP is compute-matched to the islands: the same tokens in θ, a global batch equal to the
// sum of the islands' batches (32 sequences: 8 islands average 4, 32 islands batch 1 each), the same
// data streams; its peak lr is the best of LR_SWEEP at that rung (every sweep row is reported).
// H rule: every rung runs about OUTER_ROUNDS rounds of the fleet, so H grows in proportion to the
// budget (H = tokens / (OUTER_ROUNDS × global batch × T)); the islands' communication per token
// falls as the model and its budget grow.
// Outer step: Nesterov lr 1.0 with momentum 0.4 (LADDER_OUTER), not the compare preset's 0.8: with
// 16–32 merge windows per run, momentum 0.8 carries stale directions (and the sparse uplink's
// error-feedback backlog) past the point where they help (docs/studies/scaling.md, the sweep).

import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { flopsPerToken, numParams } from '../../core/model/config.ts';
import { type Result, ok } from '../../core/result.ts';
import { loadCorpus } from '../../server/run/corpus.ts';
import type { SimEngineKind } from './engines.ts';
import { ddpBytesPerIsland, mergeSeeds, runRows } from './index.ts';
import { warmStartOffPlateau } from './warm-start.ts';
import type { OuterConfig } from '../../core/coord/outer.ts';
import { type RowDefaults, baseline, diloco, heterogeneous, uniform } from './scenarios.ts';
import { CPU_RUNGS, type RungSpec, ladderFlags, pickRungs as pickRungsOf } from './rungs.ts';
import {
  type ScalingReport,
  type ScalingRow,
  type ScalingRung,
  fitPowerLaw,
  scalingHtml,
  scalingPlotSvg,
  scalingTable,
  verdictOf,
} from './scaling-report.ts';
import type { SimCommon, SimRow, SimRunResult, SimulateOptions } from './types.ts';

export { CPU_RUNGS, RUNGS, type RungSpec } from './rungs.ts';

/** DDP's peak inner lr sweep (cosine to a tenth), the same at every rung. */
export const LR_SWEEP = [3e-3, 6e-3, 1.2e-2, 2.4e-2];
/** Rounds of the fleet per run: H = tokens / (OUTER_ROUNDS × global batch × T). */
export const OUTER_ROUNDS = 8;
/** Tokens in θ per parameter (every rung). Sized so the CPU ladder fits 60 minutes on 2 quiet cores. */
export const TOKENS_PER_PARAM = 2;
/** Global batch in sequences: DDP's, and the sum of each island row's batches. */
export const GLOBAL_BATCH = 32;
const SEQ_LEN = 32;
const ISLAND_COUNTS = [8, 32];
/**
 * The islands' outer optimizer on the ladder. Measured on the tiny rung, 8 islands (vs tuned DDP):
 * μ 0.8 1.040×, 0.6 1.022×, 0.5 1.020×, 0.4 1.019×, 0 1.027×; 32 islands 1.063× → 1.032× at 0.4.
 */
export const LADDER_OUTER: OuterConfig = { kind: 'nesterov', lr: 1, momentum: 0.4, dnPeriod: 0 };
/** Inner lr of `single` (batch 4, as the compare preset's); the islands take their rung's tuned DDP lr. */
const SINGLE_LR = 3e-3;

/**
 * simulate's options that the ladder takes as they are (workers, data, engine, out, json, print, log, progress, seed,
 * evalBatches).
 */
type SharedOptions = Pick<
  SimulateOptions,
  'workers' | 'data' | 'engine' | 'out' | 'json' | 'print' | 'log' | 'progress' | 'seed' | 'evalBatches'
>;

export interface ScalingOptions extends SharedOptions {
  /** The first n rungs of RUNGS, or rung names (default the CPU ladder). */
  rungs?: number | string[];
  tokensPerParam?: number;
  /** Fleet rounds per run (the H rule's constant). */
  outerRounds?: number;
  /** DDP's lr sweep (default LR_SWEEP). */
  lrSweep?: number[];
  /** Shared warm start per rung, tokens (default 32768; 0 for none). */
  warmStartTokens?: number;
  evals?: number;
}

/** Parses the CLI flags the scaling preset takes (the rest of simulate's flags are ignored). */
export function scalingOptionsFromCli(raw: Record<string, unknown>): Result<ScalingOptions> {
  const ints = ['seed', 'workers', 'evalBatches', 'warmStartTokens', 'outerRounds'] as const;
  const f = ladderFlags(raw, ints, ['cpu', 'webgpu'] as SimEngineKind[]);
  if (!f.ok) return f;
  const { ints: n, ...rest } = f.value;
  return ok({ ...rest, ...n });
}

/** Picks the rungs: a count from the start of RUNGS, or names (the first ladder's 4 CPU rungs by default). */
export const pickRungs = (r: ScalingOptions['rungs']): RungSpec[] => pickRungsOf(r, CPU_RUNGS);

interface Plan {
  spec: RungSpec;
  params: number;
  tokens: number;
  innerSteps: number;
  rows: SimRow[];
  rowLr: number[];
}

/** The rows of one rung (H from the rule, DDP at each swept lr, single, 8 and 32 islands). */
export function rungRows(
  spec: RungSpec,
  o: { tokensPerParam: number; outerRounds: number; lrSweep: number[]; seed: number },
): Plan {
  const params = numParams(spec.config);
  const tokens = Math.round(o.tokensPerParam * params);
  const innerSteps = Math.max(2, Math.round(tokens / (o.outerRounds * GLOBAL_BATCH * SEQ_LEN)));
  const lr = (maxLr: number) => ({ maxLr, minLr: maxLr / 10, warmupTokens: Math.min(8192, Math.round(tokens / 8)) });
  const d: RowDefaults = {
    islands: 8,
    seeds: [o.seed],
    batchSize: 4,
    tokens,
    innerSteps,
    baseTokensPerSec: 2000,
    seqLen: SEQ_LEN,
    lr: lr(SINGLE_LR),
  };
  const rows: SimRow[] = [];
  const rowLr: number[] = [];
  for (const maxLr of o.lrSweep) {
    rows.push(baseline(`ddp-lr${maxLr}`, 'ddp', { ...d, lr: lr(maxLr) }, uniform(8, GLOBAL_BATCH / 8)));
    rowLr.push(maxLr);
  }
  rows.push(baseline('single', 'single', d, uniform(1, 4)));
  rowLr.push(SINGLE_LR);
  for (const n of ISLAND_COUNTS) {
    rows.push(
      diloco(`islands-${n}`, { ...d, islands: n }, 'async', 'sparse', heterogeneous(n, GLOBAL_BATCH / n), {
        outer: { ...LADDER_OUTER },
      }),
    );
    rowLr.push(NaN);
  } // set from the sweep
  return { spec, params, tokens, innerSteps, rows, rowLr };
}

/** Relative CPU cost of a row: tokens × params, batch-1 islands about 1.5× per token. */
function rowCost(p: Plan, row: SimRow): number {
  const small = row.kind === 'diloco' && row.islands.every((s) => s.batchSize === 1) ? 1.5 : 1;
  return p.tokens * p.params * small;
}

export async function runScaling(opts: ScalingOptions = {}): Promise<ScalingReport> {
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const log = opts.log ?? (opts.json ? () => {} : (l: string) => process.stderr.write(`  ${l}\n`));
  const seed = opts.seed ?? 1;
  const o = {
    tokensPerParam: opts.tokensPerParam ?? TOKENS_PER_PARAM,
    outerRounds: opts.outerRounds ?? OUTER_ROUNDS,
    lrSweep: opts.lrSweep ?? LR_SWEEP,
    seed,
  };
  const engine = opts.engine ?? 'cpu';
  const workers = opts.workers ?? 2;
  const plans = pickRungs(opts.rungs).map((spec) => rungRows(spec, o));
  const ds = loadCorpus(opts.data);
  const commons: SimCommon[] = [];
  const warm: ScalingRung['warmStart'][] = [];
  for (const p of plans) {
    const c: SimCommon = {
      model: 'tiny',
      config: p.spec.config,
      engine,
      seqLen: SEQ_LEN,
      seed,
      evals: opts.evals ?? 6,
      evalBatches: opts.evalBatches ?? 32,
      evalBatchSize: 16,
      data: opts.data,
    };
    const wt = opts.warmStartTokens ?? 32_768;
    if (wt > 0) {
      const w = await warmStartOffPlateau(c, ds, wt);
      c.init = w.params;
      warm.push({ tokens: w.tokens, evalLoss: w.evalLoss });
      log(`${p.spec.name}: warm start ${w.tokens} tokens, eval ${w.evalLoss.toFixed(4)}`);
    } else warm.push({ tokens: 0, evalLoss: NaN });
    commons.push(c);
  }
  const jobs = plans.flatMap((p, k) => p.rows.map((row, r) => ({ p, k, r, row })));
  const outDir = resolve(
    opts.out ?? join('runs', `scaling-${new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15)}`),
  );
  mkdirSync(outDir, { recursive: true });
  // each row's result as it finishes (a long ladder cut short keeps what it measured)
  const partial = join(outDir, 'rows.jsonl');
  writeFileSync(partial, '');
  log(
    `simulate scaling: ${plans.length} rungs ` +
      `(${plans.map((p) => `${p.spec.name} ${p.params} params, ${p.tokens} tokens, H ${p.innerSteps}`).join('; ')}), ` +
      `${jobs.length} rows on ${workers} worker(s)`,
  );
  opts.progress?.start(jobs.map((j) => `${j.p.spec.name} ${j.row.name}`));
  const runs: SimRunResult[] = new Array(jobs.length);
  // phase 1: the DDP sweep and single; phase 2: the islands, at the inner lr of their rung's tuned DDP
  for (const phase of [jobs.filter((j) => j.row.kind !== 'diloco'), jobs.filter((j) => j.row.kind === 'diloco')]) {
    if (phase[0]?.row.kind === 'diloco') {
      for (const j of phase) {
        const sweep = runs.filter((_, i) => jobs[i].k === j.k && jobs[i].row.kind === 'ddp');
        const best = o.lrSweep[sweep.indexOf(sweep.reduce((a, b) => (b.evalLoss < a.evalLoss ? b : a)))];
        j.row.lr = { ...j.row.lr, maxLr: best, minLr: best / 10 };
        j.p.rowLr[j.r] = best;
      }
    }
    const got = await runRows(
      phase.map((j) => j.row),
      phase.map((j) => commons[j.k]),
      workers,
      log,
      opts.progress && ((i, f) => opts.progress!.update(jobs.indexOf(phase[i]), f)),
      phase.map((j) => rowCost(j.p, j.row)),
      (i, r) =>
        appendFileSync(
          partial,
          JSON.stringify({ rung: phase[i].p.spec.name, params: phase[i].p.params, ...r, curve: undefined }) + '\n',
        ),
    );
    got.forEach((r, i) => {
      runs[jobs.indexOf(phase[i])] = r;
    });
  }

  const rungs: ScalingRung[] = plans.map((p, k) => {
    const fpt = flopsPerToken(p.spec.config, SEQ_LEN);
    const res = runs.filter((_, i) => jobs[i].k === k).map((r) => mergeSeeds([r]));
    const sweep = res.slice(0, o.lrSweep.length);
    const best = sweep.reduce((a, b) => (b.evalLoss < a.evalLoss ? b : a));
    const ddpLr = p.rowLr[sweep.indexOf(best)];
    // the tuned DDP is the comparison's `ddp` row; the sweep rows stay in the rung's rows
    const all = [{ ...best, name: 'ddp' }, ...res];
    const rowOf = (name: string) =>
      name === 'ddp' ? p.rows[sweep.indexOf(best)] : p.rows[res.findIndex((r) => r.name === name)];
    const ddpDown = best.bytesDownPerIsland;
    const rows: ScalingRow[] = all.map(({ curve: _c, ...r }) => {
      const row = rowOf(r.name);
      const comm =
        r.kind === 'ddp'
          ? 1
          : r.kind === 'single'
            ? Infinity
            : ddpBytesPerIsland(row, r.tokens, SEQ_LEN, p.params) / Math.max(1, r.bytesUpPerIsland);
      return {
        ...r,
        commReductionVsDdp: comm,
        flops: fpt * r.tokensComputed,
        vsDdp: r.evalLoss / best.evalLoss,
        lessDownThanDdp:
          r.kind === 'diloco' ? ddpDown / Math.max(1, r.bytesDownPerIsland) : r.kind === 'ddp' ? 1 : Infinity,
        lr: r.name === 'ddp' ? ddpLr : p.rowLr[res.findIndex((x) => x.name === r.name)],
        ...(r.kind === 'diloco' ? { innerSteps: p.innerSteps } : {}),
      };
    });
    return {
      name: p.spec.name,
      config: p.spec.config,
      params: p.params,
      flopsPerToken: fpt,
      tokens: p.tokens,
      innerSteps: p.innerSteps,
      warmStart: warm[k],
      ddpSweep: sweep.map((r, i) => ({ lr: p.rowLr[i], evalLoss: r.evalLoss })),
      ddpLr,
      rows,
    };
  });
  const names = ['ddp', 'single', ...ISLAND_COUNTS.map((n) => `islands-${n}`)];
  const fits = names.map((row) => ({
    row,
    ...fitPowerLaw(
      rungs.map((g) => {
        const r = g.rows.find((x) => x.name === row)!;
        return [r.flops, r.evalLoss] as [number, number];
      }),
    ),
  }));
  const cpu = process.cpuUsage(cpu0);
  const report: ScalingReport = {
    config: {
      preset: 'scaling-v1',
      tokensPerParam: o.tokensPerParam,
      outerRounds: o.outerRounds,
      lrSweep: o.lrSweep,
      globalBatch: GLOBAL_BATCH,
      seqLen: SEQ_LEN,
      hRule:
        `H = tokens / (${o.outerRounds} rounds × ${GLOBAL_BATCH} sequences × ${SEQ_LEN} tokens): ` +
        `H grows in proportion to the budget`,
      outer: LADDER_OUTER,
      data: opts.data ?? 'moby-dick',
      seed,
      workers,
      engine,
      realTimeMs: performance.now() - t0,
      // this thread's CPU time and the workers' (process.cpuUsage counts every thread of the process)
      cpuTimeMs: (cpu.user + cpu.system) / 1000,
    },
    rungs,
    fits,
    verdict: verdictOf(
      rungs,
      ISLAND_COUNTS.map((n) => `islands-${n}`),
    ),
  };
  const json = JSON.stringify(report, (_k, v) => (v === Infinity ? 'Infinity' : v), 2);
  const table = scalingTable(report);
  const svg = scalingPlotSvg(report);
  writeFileSync(join(outDir, 'report.json'), json + '\n');
  writeFileSync(join(outDir, 'plot.svg'), svg);
  writeFileSync(join(outDir, 'report.html'), scalingHtml(report, svg, table));
  if (opts.print !== false) process.stdout.write(opts.json ? json + '\n' : `${table}\n\nrun folder: ${outDir}\n`);
  return report;
}
