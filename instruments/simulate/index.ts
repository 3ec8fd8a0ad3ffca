// `atoll simulate`: many islands in one process, in virtual time, through the real coordinator,
// codec and IslandRuntime, compared with data-parallel (DDP) and a single island on the same data
// and token budget.
//
//   import { runSimulate, simulateOptionsFromCli } from './simulate/index.ts';
//   const o = simulateOptionsFromCli(flags);           // Result<SimulateOptions>
//   if (o.ok) await runSimulate(o.value);              // writes the run folder, prints the table
//
// Output folder (opts.out): report.json, curves.csv, plot.svg, report.html, and metrics/<row>/ (scalars.jsonl
// and TensorBoard event files, as a served run writes them: metrics.ts). With opts.json the report is printed on
// stdout as one JSON object instead of the table.
//
// Measuring: eval loss is the held-out loss of θ (the coordinator's, or the baseline's model) on
// fixed held-out batches; "tokens" are tokens in θ; goodput = tokens in θ / tokens computed by all
// islands (lost work of crashed islands and rejected deltas included). DDP's upload is its share of
// a ring all-reduce of fp32 gradients every step, 2(N−1)/N × 4 bytes × params per island per step.

import { availableParallelism } from 'node:os';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Worker } from 'node:worker_threads';
import { DOWNLINK_ENCODINGS, type DownlinkEncoding, ENCODINGS, type Encoding } from '../../core/codec/index.ts';
import { PRESETS, type PresetName, numParams } from '../../core/model/config.ts';
import { downlinkSetting } from '../../core/coord/index.ts';
import { type Result, err, ok } from '../../core/result.ts';
import { rowData } from './row-shared.ts';
import { curvesCsv, formatTable, plotSvg, reportHtml, reportRow } from './report.ts';
import { RISE_LIMIT, settingsRows } from './settings.ts';
import { runRow } from './row.ts';
import { warmStartOffPlateau } from './warm-start.ts';
import { writeRunMetrics } from './metrics.ts';
import { SIM_MODEL_NAMES, simModelConfig } from './rungs.ts';
import { HOME_NETWORK, type RowDefaults, SERVE_OUTER, SHORT_RUN_OUTER, compareRows, dilocoRows } from './scenarios.ts';
import { describeSetting, parseNetwork } from './setting.ts';
import type { SimEngineKind } from './engines.ts';
import type { SimCommon, SimReport, SimRow, SimRunResult, SimulateOptions, TwinSpec } from './types.ts';

export type { SimulateOptions, SimReport, SimRunResult, SimRow } from './types.ts';
export { runRow } from './row.ts';
export { compareRows, dilocoRows, heterogeneous, island } from './scenarios.ts';

/** Most islands a simulated row takes. */
export const MAX_ISLANDS = 256;

/** Virtual throughput of a speed-1 island (about the CPU engine on `tiny`). */
export const BASE_TOKENS_PER_SEC = 2000;

/**
 * Defaults per preset. `compare` is sized for ~10 minutes on 2 idle cores (8 rows on 2 workers, the
 * CPU engine at ~2k tokens/s per core on tiny): 200k tokens per row after a shared 32k-token warm
 * start; 8 islands of batch 4 (DDP: batch 32); H = 16.
 */
function rowDefaults(o: Required<Pick<SimulateOptions, 'preset'>> & SimulateOptions, seqLen: number): RowDefaults {
  const smoke = o.preset === 'smoke';
  const seed = o.seed ?? 1;
  const peak = o.innerLr ?? 3e-3;
  const d: RowDefaults = {
    islands: o.islands ?? (smoke ? 2 : 8),
    seeds: o.quick || smoke ? [seed] : [seed, seed + 1, seed + 2],
    batchSize: smoke ? 2 : 4,
    tokens: 0,
    innerSteps: o.innerSteps ?? (smoke ? 4 : 16),
    baseTokensPerSec: BASE_TOKENS_PER_SEC,
    seqLen,
    lr: { maxLr: peak, minLr: peak / 10, warmupTokens: smoke ? 0 : 8192 },
    // compare's rows keep their short-run outer step unless a flag says otherwise (scenarios.ts)
    outer: {
      ...(o.preset === 'compare' ? SHORT_RUN_OUTER : SERVE_OUTER),
      ...(o.outerLr !== undefined ? { lr: o.outerLr } : {}),
      ...(o.outerMomentum !== undefined ? { momentum: o.outerMomentum } : {}),
    },
  };
  d.tokens =
    o.tokens ??
    (o.rounds !== undefined ? o.rounds * d.islands * d.innerSteps * d.batchSize * seqLen : smoke ? 2048 : 200_000);
  return d;
}

/** Parses loosely typed CLI flags (strings from commander, numbers, booleans) into options. */
export function simulateOptionsFromCli(raw: Record<string, unknown>): Result<SimulateOptions> {
  const o: SimulateOptions = {};
  const int = (k: string, v: unknown): number | undefined | Error => {
    if (v === undefined || v === null || v === '') return undefined;
    const n = Number(v);
    return Number.isInteger(n) && n >= 0 ? n : new Error(`--${k} must be a non-negative integer, got '${String(v)}'`);
  };
  let preset = raw.preset === undefined ? 'compare' : String(raw.preset);
  if (preset in PRESETS) {
    o.model = preset as PresetName;
    preset = 'compare';
  }
  if (!['compare', 'diloco', 'smoke', 'settings'].includes(preset))
    return err('E_BAD_REQUEST', `--preset must be compare|diloco|smoke|settings (or a model preset), got '${preset}'`);
  o.preset = preset as SimulateOptions['preset'];
  if (raw.model !== undefined) {
    if (!simModelConfig(String(raw.model)))
      return err('E_BAD_REQUEST', `--model must be one of ${SIM_MODEL_NAMES.join('|')}`);
    o.model = String(raw.model);
  }
  for (const k of [
    'islands',
    'tokens',
    'rounds',
    'seed',
    'workers',
    'innerSteps',
    'warmStartTokens',
    'evalBatches',
  ] as const) {
    const v = int(k, raw[k]);
    if (v instanceof Error) return err('E_BAD_REQUEST', v.message);
    if (v !== undefined) (o as Record<string, unknown>)[k] = v;
  }
  if (o.islands !== undefined && (o.islands < 1 || o.islands > MAX_ISLANDS))
    return err(
      'E_BAD_REQUEST',
      `--islands must be 1..${MAX_ISLANDS} (each simulated island holds a model and its optimizer in this process), ` +
        `got ${o.islands}`,
    );
  if (raw.mode !== undefined) {
    if (raw.mode !== 'sync' && raw.mode !== 'async') return err('E_BAD_REQUEST', `--mode must be sync|async`);
    o.mode = raw.mode;
  }
  if (raw.codec !== undefined) {
    if (!ENCODINGS.includes(raw.codec as Encoding))
      return err('E_BAD_REQUEST', `--codec must be one of ${ENCODINGS.join('|')}`);
    o.codec = raw.codec as Encoding;
  }
  if (raw.downlink !== undefined) {
    if (!DOWNLINK_ENCODINGS.includes(raw.downlink as DownlinkEncoding))
      return err('E_BAD_REQUEST', `--downlink must be one of ${DOWNLINK_ENCODINGS.join('|')}`);
    o.downlink = raw.downlink as DownlinkEncoding;
  }
  for (const k of ['outerLr', 'outerMomentum', 'innerLr', 'trustRegion'] as const) {
    if (raw[k] === undefined) continue;
    const n = Number(raw[k]);
    if (!Number.isFinite(n) || n < 0) return err('E_BAD_REQUEST', `--${k} must be a non-negative number`);
    o[k] = n;
  }
  if (raw.network !== undefined) {
    const net = parseNetwork(String(raw.network));
    if (!net.ok) return net;
    o.network = net.value;
  }
  if (raw.engine !== undefined && !['cpu', 'js', 'webgpu'].includes(raw.engine as string))
    return err('E_BAD_REQUEST', `--engine must be cpu|js|webgpu, got '${String(raw.engine)}'`);
  if (raw.engine !== undefined) o.engine = raw.engine as SimEngineKind;
  if (raw.out !== undefined) o.out = String(raw.out);
  if (raw.data !== undefined) o.data = String(raw.data);
  if (raw.compare !== undefined) o.compare = raw.compare === true ? 'ddp,single' : String(raw.compare);
  if (raw.rows !== undefined)
    o.rows = String(raw.rows)
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  if (raw.cold === true) o.warmStartTokens = 0;
  if (raw.fromFleet !== undefined) o.fromFleet = String(raw.fromFleet);
  o.json = raw.json === true || raw.json === 'true';
  o.quick = raw.quick === true || raw.quick === 'true';
  return ok(o);
}

function timestamp(): string {
  return new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
}

/**
 * Runs rows on `workers` worker threads (0: in this thread), longest first (by `cost` where given,
 * else DiLoCo rows first), results in row order.
 */
export async function runRows(
  rows: SimRow[],
  commons: SimCommon[],
  workers: number,
  log: (l: string) => void,
  progress?: (i: number, frac: number) => void,
  cost?: number[],
  done?: (i: number, r: SimRunResult) => void,
): Promise<SimRunResult[]> {
  const results: SimRunResult[] = new Array(rows.length);
  if (workers <= 0) {
    const ds = rowData(commons[0]);
    for (let i = 0; i < rows.length; i++) {
      results[i] = await runRow(rows[i], { common: commons[i], ds, log, progress: (f) => progress?.(i, f) });
      done?.(i, results[i]);
    }
    return results;
  }
  const order = rows
    .map((_, i) => i)
    .sort(
      cost
        ? (a, b) => cost[b] - cost[a]
        : (a, b) => (rows[b].kind === 'diloco' ? 1 : 0) - (rows[a].kind === 'diloco' ? 1 : 0),
    );
  const register = new URL('../../bin/register.js', import.meta.url).href;
  const runOne = (i: number) =>
    new Promise<void>((resolvePromise, reject) => {
      const w = new Worker(new URL('./worker.ts', import.meta.url), {
        workerData: { row: rows[i], common: commons[i] },
        execArgv: ['--import', register],
      });
      w.on(
        'message',
        (
          m:
            | { type: 'log'; line: string }
            | { type: 'progress'; frac: number }
            | { type: 'result'; result: SimRunResult }
            | { type: 'error'; message: string },
        ) => {
          if (m.type === 'log') log(m.line);
          else if (m.type === 'progress') progress?.(i, m.frac);
          else if (m.type === 'result') {
            results[i] = m.result;
            done?.(i, m.result);
          } else reject(new Error(`row ${rows[i].name}: ${m.message}`));
        },
      );
      w.on('error', reject);
      w.on('exit', (code) =>
        results[i] ? resolvePromise() : reject(new Error(`row ${rows[i].name}: worker exited with code ${code}`)),
      );
    });
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(workers, rows.length) }, async () => {
      while (next < order.length) await runOne(order[next++]);
    }),
  );
  return results;
}

/** One row's result over its seeds: eval loss mean ± sample sd; the rest from the first seed. */
export function mergeSeeds(runs: SimRunResult[]): SimRunResult {
  const losses = runs.map((r) => r.evalLoss);
  const mean = losses.reduce((a, b) => a + b, 0) / losses.length;
  const sd = losses.length > 1 ? Math.sqrt(losses.reduce((a, b) => a + (b - mean) ** 2, 0) / (losses.length - 1)) : 0;
  return { ...runs[0], evalLoss: mean, evalLossSd: sd, seedLosses: losses };
}

/** DDP's upload per island for `tokens` over these islands: steps × ring all-reduce share of fp32 gradients. */
export function ddpBytesPerIsland(row: SimRow, tokens: number, seqLen: number, nParams: number): number {
  const N = row.islands.length;
  if (N < 2) return 0;
  const totalB = row.islands.reduce((a, s) => a + s.batchSize, 0);
  return (tokens / (totalB * seqLen)) * ((2 * (N - 1)) / N) * 4 * nParams;
}

/** Runs a simulation preset, writes the run folder, prints the table (or JSON), returns the report. */
export async function runSimulate(opts: SimulateOptions = {}): Promise<SimReport> {
  const t0 = performance.now();
  const startMs = Date.now();
  const preset = opts.preset ?? 'compare';
  const model = opts.model ?? 'tiny';
  const named = simModelConfig(model);
  if (!named)
    throw Object.assign(new Error(`unknown model '${model}' (expected one of ${SIM_MODEL_NAMES.join(', ')})`), {
      code: 'E_BAD_REQUEST',
    });
  const config = named.config;
  const nParams = numParams(config);
  const log = opts.log ?? (opts.json ? () => {} : (l: string) => process.stderr.write(`  ${l}\n`));
  const seqLen = preset === 'smoke' ? Math.min(16, config.blockSize) : config.blockSize;
  const d = rowDefaults({ ...opts, preset }, seqLen);
  const common: SimCommon = {
    // a rung's shape rides in config (the workers build the model from it), under the preset it grew from
    model: named.preset ? (model as PresetName) : 'tiny',
    config: named.preset ? undefined : config,
    seqLen,
    seed: opts.seed ?? 1,
    evals: preset === 'smoke' ? 2 : 12,
    evalBatches: opts.evalBatches ?? (preset === 'smoke' ? 2 : 64),
    evalBatchSize: preset === 'smoke' ? 4 : 16,
    data: opts.data,
    engine: opts.engine,
    scalars: true,
  };
  let rows: SimRow[];
  const fleet = opts.fromFleet ? readTwinSpec(opts.fromFleet) : null;
  if (fleet) {
    // a fleet's twin: its own model, data, seed and settings, cold as the live run began
    rows = fleet.rows;
    Object.assign(common, fleet.common);
    d.tokens = rows[0].tokens;
    d.baseTokensPerSec = rows[0].baseTokensPerSec;
  } else if (preset === 'compare') rows = compareRows(d, opts.quick && !opts.rows);
  else if (preset === 'settings') rows = settingsRows(d);
  else {
    const extra = (opts.compare ?? 'ddp,single')
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s && s !== 'none');
    rows = dilocoRows(d, opts.mode ?? (preset === 'smoke' ? 'sync' : 'async'), opts.codec ?? 'int4', extra);
  }
  if (opts.rows) {
    const unknown = opts.rows.filter((n) => !rows.some((r) => r.name === n));
    if (unknown.length)
      throw Object.assign(
        new Error(`unknown row ${unknown.join(', ')}: the preset has ${rows.map((r) => r.name).join(', ')}`),
        { code: 'E_BAD_REQUEST' },
      );
    rows = rows.filter((r) => opts.rows!.includes(r.name));
  }
  // every island on the home link takes --network's (a row's own link, the phone's, stays)
  const network = opts.network ?? HOME_NETWORK;
  for (const row of rows) row.islands = row.islands.map((s) => (s.network === HOME_NETWORK ? { ...s, network } : s));
  // --trust-region: the outer step's trust region factor on every DiLoCo row (core/coord/trust.ts)
  if (opts.trustRegion !== undefined)
    for (const row of rows)
      if (row.kind === 'diloco')
        row.coordinator = {
          ...row.coordinator,
          trustRegion: { ...row.coordinator.trustRegion, factor: opts.trustRegion },
        };
  // --downlink: every DiLoCo row's update frames in that code, as `serve --downlink` gives it
  if (opts.downlink !== undefined)
    for (const row of rows)
      if (row.kind === 'diloco') row.coordinator = { ...row.coordinator, downlink: downlinkSetting(opts.downlink) };
  const setting = describeSetting(rows, d, network, preset);
  const workers = opts.workers ?? Math.min(2, availableParallelism());
  const warmTokens = fleet ? 0 : (opts.warmStartTokens ?? (preset === 'smoke' ? 0 : 32_768));
  // one shared warm start per seed: every row of that seed starts there
  const seeds = [...new Set(rows.flatMap((r) => r.seeds ?? [common.seed]))];
  const perSeed = new Map<number, SimCommon>();
  let warmLoss = NaN;
  const warmStarts: SimReport['config']['warmStarts'] = [];
  const ds = rowData(common);
  for (const seed of seeds) {
    const c: SimCommon = { ...common, seed };
    if (warmTokens > 0) {
      const w = await warmStartOffPlateau(c, ds, warmTokens);
      c.init = w.params;
      if (seed === seeds[0]) warmLoss = w.evalLoss;
      warmStarts.push({ seed, tokens: w.tokens, evalLoss: w.evalLoss });
      log(
        `warm start (seed ${seed}): ${w.tokens} tokens of single-island training, eval ` +
          `${w.evalLoss.toFixed(4)} (every row of this seed starts here)`,
      );
    }
    perSeed.set(seed, c);
  }
  const jobs = rows.flatMap((row, r) => (row.seeds ?? [common.seed]).map((seed) => ({ row, r, seed })));
  log(
    `simulate ${preset}: ${rows.length} rows (${jobs.length} runs over seeds) on ${model} (${nParams} params), ` +
      `${d.tokens} tokens each, ${workers} worker(s)`,
  );
  opts.progress?.start(
    jobs.map((j) => (j.row.seeds && j.row.seeds.length > 1 ? `${j.row.name} s${j.seed}` : j.row.name)),
  );
  const runs = await runRows(
    jobs.map((j) => j.row),
    jobs.map((j) => perSeed.get(j.seed)!),
    workers,
    log,
    opts.progress && ((i, f) => opts.progress!.update(i, f)),
  );
  // metrics/<row>/ (a row of several seeds: metrics/<row>/s<seed>/), as a served run writes its scalars
  const outDir = resolve(opts.out ?? join('runs', `simulate-${timestamp()}`));
  const multi = (j: (typeof jobs)[number]) => (j.row.seeds?.length ?? 1) > 1;
  const metricsRuns = jobs.map((j, k) => ({ row: j.row.name, seed: multi(j) ? j.seed : undefined, result: runs[k] }));
  writeRunMetrics(outDir, metricsRuns, startMs);
  const results = rows.map((_, r) => mergeSeeds(runs.filter((_, k) => jobs[k].r === r)));

  for (let i = 0; i < results.length; i++) {
    const r = results[i],
      row = rows[i];
    if (r.kind === 'ddp') r.commReductionVsDdp = 1;
    else if (r.kind === 'single') r.commReductionVsDdp = Infinity;
    else r.commReductionVsDdp = ddpBytesPerIsland(row, r.tokens, seqLen, nParams) / Math.max(1, r.bytesUpPerIsland);
  }
  const report: SimReport = {
    config: {
      preset,
      model,
      params: nParams,
      seqLen,
      tokens: d.tokens,
      warmStartTokens: warmTokens,
      warmStartEvalLoss: warmLoss,
      warmStarts,
      seed: common.seed,
      workers,
      baseTokensPerSec: d.baseTokensPerSec,
      network,
      setting,
      realTimeMs: performance.now() - t0,
      rows: rows.map((r) => ({
        name: r.name,
        kind: r.kind,
        mode: r.mode,
        codec: r.codec,
        lr: r.lr,
        coordinator: r.coordinator,
        islands: r.islands.map(({ name, speed, batchSize, behaviour, dropProb }) => ({
          name,
          speed,
          batchSize,
          behaviour,
          dropProb,
        })),
      })),
    },
    runs: results.map(reportRow),
  };
  if (preset === 'settings') report.settings = settingsSummary(report.runs);
  const table = `${setting.join('\n')}\n\n${formatTable(report.runs)}`;
  mkdirSync(outDir, { recursive: true });
  const json = JSON.stringify(report, (_k, v) => (v === Infinity ? 'Infinity' : v), 2);
  writeFileSync(join(outDir, 'report.json'), json + '\n');
  writeFileSync(join(outDir, 'curves.csv'), curvesCsv(results));
  const svg = plotSvg(
    results,
    `atoll simulate ${preset}: held-out loss (${model}, ${d.tokens.toLocaleString()} tokens per row)`,
  );
  writeFileSync(join(outDir, 'plot.svg'), svg);
  writeFileSync(join(outDir, 'report.html'), reportHtml(report, svg, table));
  if (opts.print !== false) {
    if (opts.json) process.stdout.write(json + '\n');
    else process.stdout.write(`${table}\n\nrun folder: ${outDir}\n`);
  }
  return report;
}

/** Reads a fleet's report.json back into its twin spec (Infinity was written as a string). */
function readTwinSpec(path: string): TwinSpec {
  let report: { twinSpec?: TwinSpec };
  try {
    report = JSON.parse(readFileSync(path, 'utf8'), (_k, v) => (v === 'Infinity' ? Infinity : v)) as {
      twinSpec?: TwinSpec;
    };
  } catch (e) {
    throw Object.assign(new Error(`--from-fleet '${path}': ${(e as Error).message}`), { code: 'E_BAD_REQUEST' });
  }
  if (!report.twinSpec?.rows?.length)
    throw Object.assign(new Error(`--from-fleet '${path}' is not an atoll fleet report.json (no twinSpec)`), {
      code: 'E_BAD_REQUEST',
    });
  return report.twinSpec;
}

/** The settings preset's verdict: rows whose eval loss rose over RISE_LIMIT above their best, worst final ÷ best. */
function settingsSummary(runs: SimReport['runs']): NonNullable<SimReport['settings']> {
  const finals = runs.map((r) => r.evalLoss);
  return {
    riseLimit: RISE_LIMIT,
    rising: runs.filter((r) => !(r.maxRise <= RISE_LIMIT)).map((r) => r.name),
    worstOverBest: Math.max(...finals) / Math.min(...finals),
  };
}
