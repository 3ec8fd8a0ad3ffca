// `atoll fleet`: a real run on loopback beside its simulated twin. The live half (instruments/fleet/live.ts)
// runs `atoll serve`, Node islands as processes and Chromium volunteer pages to a token budget; the
// twin half (instruments/fleet/twin.ts) replays that run in virtual time, with DDP and a single island at
// the same tokens. One report: report.json, curves.csv, plot.svg and report.html in the output
// folder, as `atoll simulate` writes them, and metrics/<row>/ (live, twin, ddp, single: scalars.jsonl and TensorBoard
// event files); `--json` prints report.json.

import { availableParallelism, loadavg } from 'node:os';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type PresetName, PRESETS, getPreset, numParams } from '../../core/model/config.ts';
import { freeTcpPort, startRedis } from '../../server/cluster/redis-proc.ts';
import { runLive } from '../fleet/live.ts';
import { dataArg } from '../fleet/procs.ts';
import { liveRow, runTwin, twinSpec } from '../fleet/twin.ts';
import type { FleetReport, FleetRow, FleetSpec, ScheduleEvent } from '../fleet/types.ts';
import { ProgressBars } from '../simulate/progress.ts';
import { curvesCsv, esc, evalCurve, formatTable, htmlPage, maxRise, plotSvg } from '../simulate/report.ts';
import type { SimRunResult } from '../simulate/types.ts';
import { evalRows, rowMetricsDir, writeRunMetrics, writeScalarRows } from '../simulate/metrics.ts';
import { parseFleetEngine } from '../fleet/engine-spec.ts';

export interface FleetCliOptions {
  preset?: string;
  islands?: number;
  browsers?: number;
  engines?: string;
  batches?: string;
  duty?: string;
  schedule?: string;
  tokens?: number;
  data?: string;
  seed?: number;
  mode?: string;
  codec?: string;
  config?: string;
  redis?: string | boolean;
  mixGroup?: number;
  evals?: number;
  evalBatches?: number;
  workers?: number;
  timeout?: number;
  out?: string;
  json?: boolean;
}

const bad = (message: string) => Object.assign(new Error(message), { code: 'E_BAD_REQUEST' });

/** `join:2@0.3,leave:1@0.6,kill:1@0.4`: at 30 % of the tokens two Node islands join, … */
export function parseSchedule(s: string | undefined): ScheduleEvent[] {
  if (!s) return [];
  return s
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)
    .map((part) => {
      const m = /^(join|leave|kill)(?::(\d+))?@([0-9.]+)$/.exec(part);
      if (!m || !(Number(m[3]) >= 0 && Number(m[3]) < 1))
        throw bad(
          `--schedule: '${part}' is not ACTION[:COUNT]@FRACTION (join|leave|kill, fraction of the tokens in [0, 1))`,
        );
      return { action: m[1] as ScheduleEvent['action'], count: Number(m[2] ?? 1), at: Number(m[3]) };
    });
}

function numbers(flag: string, s: string | undefined, ok: (n: number) => boolean): number[] {
  if (!s) return [];
  return s.split(',').map((x) => {
    const n = Number(x);
    if (!ok(n)) throw bad(`--${flag}: '${x}' is out of range`);
    return n;
  });
}

export function fleetSpecFromCli(o: FleetCliOptions): FleetSpec {
  const preset = (o.preset ?? 'tiny') as PresetName;
  if (!(preset in PRESETS)) throw bad(`--preset must be one of ${Object.keys(PRESETS).join('|')}`);
  const engines = (o.engines ?? 'cpu').split(',').map((e) => e.trim());
  for (const e of engines)
    if (!parseFleetEngine(e))
      throw bad(`--engines: '${e}' is not cpu or webgpu, with :f16 and xN (devices, webgpu) where wanted`);
  const schedule = parseSchedule(o.schedule);
  const islands = o.islands ?? 4;
  const joins = schedule.filter((e) => e.action === 'join').reduce((a, e) => a + e.count, 0);
  if (joins > islands)
    throw bad(`--schedule joins ${joins} islands but --islands is ${islands} (joining islands count in --islands)`);
  // leaves and kills take Node islands that are training: more than can ever be would never fire
  const gone = schedule.filter((e) => e.action === 'leave').reduce((a, e) => a + e.count, 0);
  const worst = schedule.filter((e) => e.action !== 'join').reduce((a, e) => Math.max(a, e.count), 0);
  if (gone > islands || worst > islands)
    throw bad(
      `--schedule takes ${Math.max(gone, worst)} Node islands out but --islands is ${islands} ` +
        `(pages are never taken out)`,
    );
  if (islands + (o.browsers ?? 0) < 1) throw bad('a fleet needs at least one island or browser');
  const mixGroup = o.mixGroup ?? 0;
  if (mixGroup !== 0 && (mixGroup < 2 || mixGroup > 16 || (mixGroup & (mixGroup - 1)) !== 0))
    throw bad('--mix-group must be 0 (off) or a power of two from 2 to 16');
  // atoll serve refuses it on the Redis roles (the groups live in one gateway's memory)
  if (mixGroup && o.redis) throw bad('--mix-group runs on the embedded server only: leave out --redis');
  return {
    preset,
    islands,
    browsers: o.browsers ?? 0,
    engines,
    batches: numbers('batches', o.batches, (n) => Number.isInteger(n) && n >= 1 && n <= 1024),
    duty: o.duty ? numbers('duty', o.duty, (n) => n > 0 && n <= 1) : [1],
    schedule,
    tokens: o.tokens ?? 50_000,
    data: dataArg(o.data),
    seed: o.seed ?? 1337,
    mode: o.mode,
    codec: o.codec,
    config: o.config,
    redis: o.redis === true ? true : typeof o.redis === 'string' ? o.redis : undefined,
    mixGroup,
    evals: o.evals ?? 12,
    evalBatches: o.evalBatches ?? 64,
    timeoutMs: (o.timeout ?? 30) * 60_000,
  };
}

function timestamp(): string {
  return new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
}

const round = (x: number, d = 4) => Number(x.toFixed(d));
const perToken = (bytes: number | null, tokens: number) => (bytes === null ? null : round(bytes / Math.max(1, tokens)));
/** Each entry per token (already per token: `tokens` 1), rounded, largest first. */
const perTokenEach = (r: Record<string, number>, tokens = 1) =>
  Object.fromEntries(
    Object.entries(r)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => [k, round(v / Math.max(1, tokens))]),
  );

/** Runs the fleet and its twin, writes the output folder, returns the report. */
export async function fleet(
  spec: FleetSpec,
  o: { out?: string; workers?: number; json?: boolean } = {},
): Promise<FleetReport> {
  const t0 = performance.now();
  const startMs = Date.now();
  const load0 = loadavg()[0];
  const names = ['live', 'twin', 'ddp', 'single'];
  const bars = new ProgressBars(process.stderr, names);
  const log = (l: string) => bars.log(`  ${l}`);
  // --redis with no URL: a redis-server of our own, gone with us
  const redis = spec.redis === true ? await startRedis() : null;
  const killRedis = () => redis?.child.kill('SIGKILL');
  process.once('exit', killRedis);
  const live = await runLive(
    { ...spec, redis: redis ? redis.url : spec.redis },
    { log, progress: (f) => bars.update(0, f), freePort: freeTcpPort },
  ).finally(async () => {
    process.off('exit', killRedis);
    await redis?.stop();
  });
  bars.update(0, 1);
  log(
    `fleet: live run reached ${live.tokens.toLocaleString()} tokens in ${live.seconds.toFixed(0)} s ` +
      `(v${live.versions}); the twin, DDP and single island now run in virtual time`,
  );
  const ts = twinSpec(live, spec.tokens, spec.evals, spec.evalBatches);
  const workers = o.workers ?? Math.min(2, availableParallelism());
  const [rows, liveResult] = await Promise.all([
    runTwin(ts, workers, log, (i, f) => bars.update(i + 1, f)),
    liveRow(live, ts.common, ts.rows[1]),
  ]);
  const [twin, ddp, single] = rows;
  // metrics/<row>/: the simulated rows' as `atoll simulate` writes them, the live run's as its server wrote them
  const outDir = resolve(o.out ?? join('runs', `fleet-${timestamp()}`));
  writeRunMetrics(
    outDir,
    rows.map((r) => ({ row: r.name, result: r })),
    startMs,
  );
  const liveMetrics = rowMetricsDir(outDir, 'live');
  mkdirSync(liveMetrics, { recursive: true });
  for (const f of live.metrics) writeFileSync(join(liveMetrics, f.name), f.data);
  // its server runs --no-eval: the fleet's evals of the live θ join the server's rows
  writeScalarRows(liveMetrics, evalRows(liveResult.curve), startMs, false);
  const all: SimRunResult[] = [liveResult, twin, ddp, single];
  const cc = live.runConfig.coordinator;
  const strip = ({ curve: _c, ...r }: SimRunResult) => r;
  const report: FleetReport = {
    config: {
      preset: spec.preset,
      params: numParams(getPreset(spec.preset)),
      data: live.runConfig.data,
      seed: live.runConfig.seed,
      tokens: spec.tokens,
      islands: spec.islands,
      browsers: spec.browsers,
      mixGroup: spec.mixGroup,
      engines: spec.engines,
      batches: spec.batches,
      duty: spec.duty,
      schedule: spec.schedule,
      topology: live.topology,
      coordinator: cc,
      load: [round(load0, 2), round(loadavg()[0], 2)],
      cores: availableParallelism(),
      realTimeMs: Math.round(performance.now() - t0),
    },
    live: {
      evalLoss: liveResult.evalLoss,
      tokens: live.tokens,
      versions: live.versions,
      seconds: round(live.seconds, 1),
      bytesIn: live.bytesIn,
      bytesOut: live.bytesOut,
      inPerToken: perToken(live.bytesIn, live.tokens)!,
      outPerToken: perToken(live.bytesOut, live.tokens)!,
      wireInPerToken: perToken(live.wireIn, live.tokens),
      wireOutPerToken: perToken(live.wireOut, live.tokens),
      outByKindPerToken: live.outByKind && perTokenEach(live.outByKind, live.tokens),
      wireByMessagePerToken: live.wireByMessage && {
        in: perTokenEach(live.wireByMessage.in, live.tokens),
        out: perTokenEach(live.wireByMessage.out, live.tokens),
      },
      steady: {
        ...live.steady,
        ...Object.fromEntries(
          (['inPerToken', 'outPerToken', 'wireInPerToken', 'wireOutPerToken'] as const).map((k) => [
            k,
            live.steady[k] === null ? null : round(live.steady[k]),
          ]),
        ),
        outByKindPerToken: live.steady.outByKindPerToken && perTokenEach(live.steady.outByKindPerToken),
      },
      mix: live.mix,
      curve: liveResult.curve,
      evalCurve: evalCurve(liveResult.curve),
    },
    twin: withEvalCurve(twin),
    ddp: withEvalCurve(ddp),
    single: withEvalCurve(single),
    ratios: {
      liveOverTwin: round(liveResult.evalLoss / twin.evalLoss),
      liveOverDdp: round(liveResult.evalLoss / ddp.evalLoss),
      twinOverDdp: round(twin.evalLoss / ddp.evalLoss),
    },
    lost: live.lost,
    duplicated: live.duplicated,
    faults: live.faults,
    data: live.data,
    islands: live.islands.map((l) => ({
      name: l.name,
      kind: l.kind,
      engine: l.engine,
      batchSize: l.batchSize,
      duty: l.duty,
      tokensPerSec: round(l.tokensPerSec, 1),
      accepted: l.accepted,
      rejected: l.rejected,
      rejectedByCode: l.rejectedByCode,
      bytesUp: l.bytesUp,
      bytesDown: l.bytesDown,
      reconnects: l.reconnects,
      joinAtMs: l.joinAtMs,
      leaveAtMs: l.leaveAtMs,
      killed: l.killed,
      hashChecks: l.hashChecks,
      hashMismatches: l.hashMismatches,
      roundsMixed: l.roundsMixed,
      dataBytes: l.dataBytes,
      rangeBytes: l.rangeBytes,
    })),
    twinSpec: ts,
    twinIslands: ts.rows[0].islands.map(({ name, speed, batchSize, joinAtMs, leaveAtMs }) => ({
      name,
      speed: round(speed),
      batchSize,
      joinAtMs,
      leaveAtMs,
    })),
  };
  mkdirSync(outDir, { recursive: true });
  const json = JSON.stringify(report, (_k, v) => (v === Infinity ? 'Infinity' : v), 2);
  writeFileSync(join(outDir, 'report.json'), json + '\n');
  writeFileSync(join(outDir, 'curves.csv'), curvesCsv(all));
  writeFileSync(join(outDir, 'live-events.jsonl'), live.events);
  writeFileSync(join(outDir, 'server.log'), live.serverLog);
  const title =
    `atoll fleet: live beside its twin and DDP (${spec.preset}, ${live.runConfig.data}, ` +
    `${spec.islands} Node islands + ${spec.browsers} pages, ${spec.tokens.toLocaleString()} tokens)`;
  const svg = plotSvg(all, title);
  writeFileSync(join(outDir, 'plot.svg'), svg);
  const table = formatTable(all.map(strip));
  const islandsTable = islandTable(report);
  writeFileSync(
    join(outDir, 'report.html'),
    htmlPage(
      title,
      `<p>live: ${live.topology === 'roles' ? 'one aggregator and two gateways on Redis' : 'the embedded server'},
${cc.mode} DiLoCo, ${esc(cc.uplink.encoding)} up, ${esc(cc.downlink.encoding)} down,
${live.seconds.toFixed(0)} s of wall time (right panel: wall time for live, virtual time for the simulated rows).
live/twin ${report.ratios.liveOverTwin}×, live/DDP ${report.ratios.liveOverDdp}×;
lost ${live.lost}, duplicated ${live.duplicated}.
The twin is this run in virtual time: the same model, data, seed, cold start and coordinator config,
one simulated island per live island with the speed it measured.</p>`,
      svg,
      `${table}\n\n${islandsTable}\n\n${trafficLine(report)}`,
      report,
    ),
  );
  if (o.json) process.stdout.write(json + '\n');
  else
    process.stdout.write(
      `${table}\n\n${islandsTable}\n\n${trafficLine(report)}\nlive/twin ${report.ratios.liveOverTwin}×  live/DDP ` +
        `${report.ratios.liveOverDdp}×  lost ${live.lost}  duplicated ${live.duplicated}${dataLine(live.data)}\n` +
        `run folder: ${outDir}\n`,
    );
  return report;
}

/** A shard run's ledger in words ('' on a text). */
function dataLine(d: FleetReport['data']): string {
  if (!d) return '';
  const epoch = `epoch ${d.epochsDone} at ${(100 * d.epochProgress).toFixed(0)} % of ${d.trainTokens} train tokens`;
  return `\ndata: ${epoch}, ${d.overlapsInEpoch} of the last ${d.rangesChecked} ranges trained twice in an epoch`;
}

/** A row as the report keeps it: its figures, its full curve and its eval curve. */
function withEvalCurve(r: SimRunResult): FleetRow {
  const points = evalCurve(r.curve);
  return { ...r, evalCurve: points, maxRise: maxRise(points) };
}

/** The server's traffic per accepted token, and what mixing did. */
function trafficLine(r: FleetReport): string {
  const l = r.live,
    m = l.mix,
    s = l.steady;
  const wire = (i: number | null, o: number | null) =>
    i === null || o === null ? '' : ` (on the wire: in ${i.toFixed(3)}, out ${o.toFixed(3)})`;
  return (
    `server bytes per accepted token, frames: in ${l.inPerToken.toFixed(3)}, out ` +
    `${l.outPerToken.toFixed(3)}${wire(l.wireInPerToken, l.wireOutPerToken)}; ` +
    `from ${s.fromTokens.toLocaleString()} tokens (v${s.fromVersion}, every island training): in ` +
    `${s.inPerToken.toFixed(3)}, out ${s.outPerToken.toFixed(3)}${wire(s.wireInPerToken, s.wireOutPerToken)}` +
    (m
      ? `\nmixing k=${m.k}: ${m.mixedGroups}/${m.groups} groups mixed (${m.mixedMembers} members), ` +
        `${m.fallbacks} called off, ${m.expired} waits in vain (now ${m.formWaitMs} ms), signalling relayed ` +
        `${m.signallingBytes.toLocaleString()} B (pairs signalled ${m.pairsSignalled}, reused ${m.pairsReused}), net ` +
        `saved ${Math.round(m.savedBytes).toLocaleString()} B`
      : '')
  );
}

function islandTable(r: FleetReport): string {
  const head = [
    'island',
    'kind',
    'engine',
    'batch',
    'duty',
    'tokens/s',
    'accepted',
    'rejected',
    'mixed',
    'θ hash ok/bad',
    'up',
    'down',
    'joined s',
    'left s',
  ];
  const kb = (b: number) => `${(b / 1e3).toFixed(0)} kB`;
  const rows = r.islands.map((i) => [
    i.name,
    i.kind,
    i.engine,
    String(i.batchSize),
    String(i.duty),
    i.tokensPerSec.toFixed(0),
    String(i.accepted),
    String(i.rejected),
    String(i.roundsMixed),
    `${i.hashChecks}/${i.hashMismatches}`,
    kb(i.bytesUp),
    kb(i.bytesDown),
    i.joinAtMs < 0 ? '-' : (i.joinAtMs / 1000).toFixed(1),
    i.leaveAtMs === null ? '-' : `${(i.leaveAtMs / 1000).toFixed(1)}${i.killed ? ' (kill)' : ''}`,
  ]);
  const w = head.map((h, k) => Math.max(h.length, ...rows.map((x) => x[k].length)));
  const line = (c: string[]) => c.map((x, k) => (k === 0 ? x.padEnd(w[k]) : x.padStart(w[k]))).join('  ');
  return [line(head), w.map((n) => '-'.repeat(n)).join('  '), ...rows.map(line)].join('\n');
}
