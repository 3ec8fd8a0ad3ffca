// `atoll bench server`: how fast the server folds deltas into θ, and how many islands it holds.
//
// 1. Apply throughput, per codec: a base-sized delta through the coordinator exactly as the
//    gateway hands it over, with the outer step where `atoll serve` takes it (`--outer-workers`
//    worker threads, default 2): ingest (decode on a worker, then validate + norm bound + hold)
//    and apply (the round's aggregate and outer step + downlink quantization + θ hash, amortized
//    over a sync round of 4) apart, in params/s.
// 2. Checkpoint: how long the event loop stops for a per-version checkpoint (instruments/bench/checkpoint.ts).
// 3. Load: a real server (its own run folder, real socket.io) and K simulated islands held by a few
//    child processes on loopback, each island sending tiny deltas in a loop. Reports deltas
//    accepted/s, ack latency percentiles, and checks the event log: every applied ack an island
//    received appears exactly once among the logged update contributors (lost = 0, duplicated = 0).

import { fork } from 'node:child_process';
import { mkdtempSync, rmSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { syntheticDelta } from './codec.ts';
import { type CheckpointBench, benchCheckpoint } from './checkpoint.ts';
import { type OuterPoolBench, benchOuterPool } from './outer-pool.ts';
import { type LoadTarget, LOAD_MODEL, loadRunFile } from './load-run.ts';
import { median } from './timing.ts';
import { ENCODINGS, type Encoding, encodeDelta } from '../../core/codec/index.ts';
import { Coordinator } from '../../core/coord/index.ts';
import { OuterOffloadHost } from '../../server/outer/offload.ts';
import { getPreset, numParams } from '../../core/model/config.ts';
import { type Assignment, PROTOCOL_VERSION } from '../../core/protocol.ts';

export interface BenchServerOptions {
  /** Simulated islands in the load test (default 1000). */
  islands?: number;
  /** Child processes holding them (default 4). */
  procs?: number;
  /** Load test duration, seconds (default 20). */
  seconds?: number;
  /** Load test on Redis roles: this many gateway processes and one aggregator (0: the embedded server). */
  gateways?: number;
  /** Run the load test (default true). */
  load?: boolean;
  /** Apply-throughput repeats per codec (default: enough for ~1.5 s). */
  applySeconds?: number;
  /**
   * Worker threads for the outer step, as `serve --outer-workers` (default 2; 0: on the event loop, and no pool
   * figures).
   */
  outerWorkers?: number;
  log?: (line: string) => void;
}

export interface LoadResult {
  islands: number;
  /** Gateway processes in front of one aggregator (0: the embedded server). */
  gateways: number;
  /** Islands connected and identified at the end of the run. */
  connected: number;
  deltasPerSec: number;
  ackP50Ms: number;
  ackP99Ms: number;
  acked: number;
  rejected: number;
  lost: number;
  duplicated: number;
  versions: number;
  /** Group commits (checkpoint + log fsync) that made those versions durable (embedded server only). */
  commits?: number;
  seconds: number;
}

export interface BenchServerResult {
  paramCount: number;
  /** Worker threads that took the outer step in the figures below (0: the event loop). */
  applyWorkers: number;
  /** Sync mode (the default): the round's aggregate and outer step, amortized over its 4 deltas. */
  applyParamsPerSec: Record<string, number>;
  /**
   * Sync mode, a submit that does not close the round: decode (on a worker with applyWorkers > 0) + validate + hold,
   * one delta at a time.
   */
  ingestParamsPerSec: Record<string, number>;
  /** Sync mode, ingest and apply together, per delta. */
  deltaParamsPerSec: Record<string, number>;
  applyMsPerDelta: Record<string, number>;
  /** Async mode: ingest and a full outer step per delta. */
  applyAsyncParamsPerSec: Record<string, number>;
  /**
   * The peer in the same run: int8, sync, the outer step on the event loop (`--outer-workers 0`); and
   * applyParamsPerSec.int8 over it.
   */
  applyOnEventLoop?: { applyParamsPerSec: number; ingestParamsPerSec: number; speedup: number };
  /** The outer step in worker threads (OuterPool), int8 uplink and downlink: ingest and apply apart. */
  outerWorkers?: OuterPoolBench;
  /** The event loop's stop for a per-version checkpoint (snapshot + encoding), as Run takes it and the old way. */
  checkpoint?: CheckpointBench;
  load?: LoadResult;
}

const REGISTER_URL = new URL('../../bin/register.js', import.meta.url).href;

const BENCH_COORD = {
  maxStaleness: 1_000_000,
  normBound: { factor: 0, window: 32, minHistory: 3 },
  keepUpdates: 4,
  historyLimit: 16,
} as const;

const synthetic = new Map<string, Float32Array>();
/** Synthetic arrays are slow to draw at base size: draw each once. */
function cachedDelta(n: number, seed: number): Float32Array {
  const k = `${n}:${seed}`;
  let d = synthetic.get(k);
  if (!d) synthetic.set(k, (d = syntheticDelta(n, seed)));
  return d;
}

/**
 * Server cost of one base-sized delta, in params/s, on the gateway's path, with the outer step on
 * `workers` threads (0: the event loop):
 *   sync  (the default mode): ingest (decode + validate + hold), then at round close the weighted
 *         aggregate and one outer step (+ downlink quantization + θ hash) shared by the round's
 *         `roundSize` deltas: `applyParamsPerSec` is that share alone;
 *   async: ingest + a full outer step per delta.
 */
export async function benchApply(
  encoding: Encoding,
  n: number,
  seconds: number,
  mode: 'sync' | 'async' = 'sync',
  roundSize = 4,
  workers = 2,
): Promise<{ paramsPerSec: number; msPerDelta: number; ingestParamsPerSec: number; applyParamsPerSec: number }> {
  const params = cachedDelta(n, 7).map((x) => x * 20);
  const coord = new Coordinator({
    params,
    config:
      mode === 'sync'
        ? { ...BENCH_COORD, uplink: { encoding, blockSize: 64 }, mode: 'sync', quorum: 1, minContributors: 1 }
        : {
            ...BENCH_COORD,
            uplink: { encoding, blockSize: 64 },
            mode: 'async',
            outer: { kind: 'delayed-nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 },
          },
    now: 0,
  });
  const host = workers > 0 ? await OuterOffloadHost.start(coord, workers) : null;
  const frame = encodeDelta(cachedDelta(n, 11), { encoding, blockSize: 64 });
  const k = mode === 'sync' ? roundSize : 1;
  const islands: Array<{ a: Assignment; seq: number }> = [];
  for (let i = 0; i < k; i++) {
    const j = coord.join({ caps: { engine: 'cpu' }, protocolVersion: PROTOCOL_VERSION }, 0);
    if (!j.ok || !j.value.assignment) throw new Error('bench: join failed');
    islands.push({ a: j.value.assignment, seq: 0 });
  }
  let now = 1;
  const submitTimes: number[] = [];
  const closeTimes: number[] = [];
  const round = async () => {
    for (const [k, isl] of islands.entries()) {
      const a = isl.a;
      const t = performance.now();
      const decoded = host ? await host.ingest(frame) : undefined; // decode on a worker, as Run.submit
      const r = coord.submit(
        {
          meta: {
            islandId: a.islandId,
            roundId: a.roundId,
            baseVersion: a.baseVersion,
            seq: ++isl.seq,
            steps: 10,
            tokens: 2560,
            lossFirst: 3,
            lossLast: 2.9,
            lossMean: 2.95,
            elapsedMs: 1000,
          },
          frame,
          decoded,
        },
        now++,
      );
      if (!r.ok) throw new Error(`bench: submit rejected: ${r.error.code} ${r.error.message}`);
      if (host) await coord.whenIdle();
      // a submit that does not close the round, or the one that does (its step included)
      (k < islands.length - 1 ? submitTimes : closeTimes).push(performance.now() - t);
    }
    coord.drainEvents();
    for (const isl of islands) {
      const na = coord.nextAssignment(isl.a.islandId, now++);
      if (!na.ok || !na.value) throw new Error('bench: no next assignment');
      isl.a = na.value;
    }
  };
  try {
    await round(); // warm-up
    submitTimes.length = closeTimes.length = 0;
    const times: number[] = [];
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000 || times.length < 3) {
      const t = performance.now();
      await round();
      times.push((performance.now() - t) / k);
    }
    const med = median(times);
    const ingest = submitTimes.length ? median(submitTimes) : NaN;
    // the closing submit holds one ingest too; the rest is the round's aggregate and step
    const apply = (median(closeTimes) - (Number.isNaN(ingest) ? 0 : ingest)) / k;
    return {
      paramsPerSec: n / (med / 1000),
      msPerDelta: med,
      ingestParamsPerSec: n / (ingest / 1000),
      applyParamsPerSec: n / (apply / 1000),
    };
  } finally {
    await host?.close();
  }
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

async function embeddedTarget(dir: string, outerWorkers: number): Promise<LoadTarget> {
  const { createServer } = await import('../../server/app.ts');
  const { buildRunConfig } = await import('../../server/run/config.ts');
  const config = buildRunConfig(loadRunFile(), { name: 'bench' });
  const server = await createServer({
    dir,
    config,
    evaluate: false,
    outerWorkers,
    adminToken: 'bench',
    gateway: { messagesPerSecond: 1000, heartbeatMs: 30_000 },
  });
  const { url } = await server.listen(0, '127.0.0.1');
  return {
    urls: [url],
    async stop() {
      const connected = server.gateway.islandSockets;
      await server.run.drain();
      const versions = server.run.version;
      const commits = server.run.store.stats.commits;
      await server.close();
      return { connected, versions, commits };
    },
  };
}

export async function benchLoad(o: {
  islands: number;
  procs: number;
  seconds: number;
  gateways?: number;
  outerWorkers?: number;
  log: (s: string) => void;
}): Promise<LoadResult> {
  const dir = mkdtempSync(join(tmpdir(), 'atoll-bench-'));
  const gateways = o.gateways ?? 0;
  const target =
    gateways > 0
      ? await (await import('./cluster-load.ts')).clusterTarget(dir, gateways, o.log)
      : await embeddedTarget(dir, o.outerWorkers ?? 2);
  const url = target.urls.join(' ');
  const n = numParams(LOAD_MODEL);
  o.log(`load: server on ${url}, ${o.islands} islands in ${o.procs} processes, ${o.seconds} s, model of ${n} params`);
  const per = Math.ceil(o.islands / o.procs);
  const children = Array.from({ length: o.procs }, (_, i) => {
    const count = Math.min(per, o.islands - i * per);
    return fork(
      new URL('./server-load-worker.ts', import.meta.url),
      [target.urls[i % target.urls.length], String(count), String(o.seconds * 1000), String(i)],
      {
        execArgv: ['--import', REGISTER_URL],
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      },
    );
  });
  type Report = {
    connected: number;
    acks: Array<[string, number, number]>;
    latencies: number[];
    rejected: number;
    errors: string[];
  };
  let ready = 0;
  let connectedAtStart = 0;
  let startedAt = 0;
  const reports = await Promise.all(
    children.map(
      (c) =>
        new Promise<Report>((resolve) => {
          let rep: Report | null = null;
          c.on('message', (m: { type: string; report?: Report; line?: string; connected?: number }) => {
            if (m.type === 'log' && m.line) o.log(m.line);
            if (m.type === 'report' && m.report) rep = m.report;
            if (m.type === 'ready') {
              connectedAtStart += m.connected ?? 0;
              // everyone connected: start all islands at the same instant
              if (++ready === children.length) {
                startedAt = Date.now() + 300;
                o.log(`load: ${connectedAtStart} islands connected; sending for ${o.seconds} s`);
                for (const ch of children) ch.send({ type: 'go', at: startedAt });
              }
            }
          });
          c.on('exit', () =>
            resolve(
              rep ?? { connected: 0, acks: [], latencies: [], rejected: 0, errors: ['worker exited without a report'] },
            ),
          );
        }),
    ),
  );
  void startedAt;
  const { connected, versions, commits } = await target.stop();

  // every applied ack must be logged exactly once as a contributor of the version it names
  const logged = new Map<string, number>();
  for (const line of readFileSync(join(dir, 'events.jsonl'), 'utf8').split('\n')) {
    if (!line.includes('"type":"update"')) continue;
    const e = JSON.parse(line) as { version: number; contributors: Array<{ island: string; seq: number }> };
    for (const c of e.contributors) {
      const k = `${c.island}#${c.seq}`;
      logged.set(k, (logged.get(k) ?? 0) + 1);
    }
  }
  let lost = 0;
  let duplicated = 0;
  let acked = 0;
  for (const r of reports) {
    for (const [island, seq] of r.acks) {
      acked++;
      const c = logged.get(`${island}#${seq}`) ?? 0;
      if (c === 0) lost++;
      if (c > 1) duplicated++;
    }
    for (const e of r.errors.slice(0, 3)) o.log(`load worker error: ${e}`);
  }
  for (const c of logged.values()) if (c > 1) duplicated++;
  const lat = reports.flatMap((r) => r.latencies).sort((a, b) => a - b);
  rmSync(dir, { recursive: true, force: true });
  return {
    islands: o.islands,
    gateways,
    connected: Math.max(
      connected,
      reports.reduce((a, r) => a + r.connected, 0),
    ),
    deltasPerSec: acked / o.seconds,
    ackP50Ms: percentile(lat, 50),
    ackP99Ms: percentile(lat, 99),
    acked,
    rejected: reports.reduce((a, r) => a + r.rejected, 0),
    lost,
    duplicated,
    versions,
    commits,
    seconds: o.seconds,
  };
}

export async function benchServer(opts: BenchServerOptions = {}): Promise<BenchServerResult> {
  const log = opts.log ?? (() => {});
  const n = numParams(getPreset('base'));
  const workers = opts.outerWorkers ?? 2;
  const out: BenchServerResult = {
    paramCount: n,
    applyWorkers: workers,
    applyParamsPerSec: {},
    ingestParamsPerSec: {},
    deltaParamsPerSec: {},
    applyMsPerDelta: {},
    applyAsyncParamsPerSec: {},
  };
  const M = (x: number) => (x / 1e6).toFixed(0);
  for (const enc of ENCODINGS) {
    const r = await benchApply(enc, n, opts.applySeconds ?? 1.5, 'sync', 4, workers);
    out.applyParamsPerSec[enc] = Math.round(r.applyParamsPerSec);
    out.ingestParamsPerSec[enc] = Math.round(r.ingestParamsPerSec);
    out.deltaParamsPerSec[enc] = Math.round(r.paramsPerSec);
    out.applyMsPerDelta[enc] = Number(r.msPerDelta.toFixed(2));
    const a = await benchApply(enc, n, opts.applySeconds ?? 1.5, 'async', 4, workers);
    out.applyAsyncParamsPerSec[enc] = Math.round(a.paramsPerSec);
    log(
      `${enc} (outer step on ${workers ? `${workers} workers` : 'the event loop'}): sync apply ` +
        `${M(r.applyParamsPerSec)} M params/s, ingest ${M(r.ingestParamsPerSec)} M/s, both ${M(r.paramsPerSec)} M/s ` +
        `(${r.msPerDelta.toFixed(0)} ms per base-sized delta); async ${M(a.paramsPerSec)} M/s ` +
        `(${a.msPerDelta.toFixed(0)} ms)`,
    );
  }
  if (workers > 0) {
    const p = await benchApply('int8', n, opts.applySeconds ?? 1.5, 'sync', 4, 0);
    out.applyOnEventLoop = {
      applyParamsPerSec: Math.round(p.applyParamsPerSec),
      ingestParamsPerSec: Math.round(p.ingestParamsPerSec),
      speedup: Number((out.applyParamsPerSec.int8 / p.applyParamsPerSec).toFixed(2)),
    };
    log(
      `int8 with the outer step on the event loop: sync apply ${M(p.applyParamsPerSec)} M params/s, ingest ` +
        `${M(p.ingestParamsPerSec)} M/s: the workers apply ${out.applyOnEventLoop.speedup}× as fast`,
    );
    const w = (out.outerWorkers = await benchOuterPool({ n, workers, seconds: opts.applySeconds ?? 1.5 }));
    log(
      `outer step on ${w.workers} workers: ingest ${(w.ingestParamsPerSec / 1e6).toFixed(0)} M params/s, apply sync ` +
        `${(w.applyParamsPerSec / 1e6).toFixed(0)} M params/s (${w.stepMs} ms per step of a round of ` +
        `${w.roundSize}), async ${(w.applyAsyncParamsPerSec / 1e6).toFixed(0)} M params/s; event loop stalled at ` +
        `most ${w.loopMaxStallMs} ms`,
    );
  }
  const c = (out.checkpoint = benchCheckpoint());
  log(
    `checkpoint of base with ${c.updates} update frames: the event loop stops ${c.stallMs} ms (snapshot ` +
      `${c.snapshotMs}, encoding ${c.encodeMs}); fresh arrays and one buffer: ${c.stallFreshMs} ms (${c.speedup}×)`,
  );
  if (opts.load !== false) {
    out.load = await benchLoad({
      islands: opts.islands ?? 1000,
      procs: Math.max(1, opts.procs ?? 4),
      seconds: opts.seconds ?? 20,
      gateways: opts.gateways,
      outerWorkers: workers,
      log,
    });
  }
  return out;
}
