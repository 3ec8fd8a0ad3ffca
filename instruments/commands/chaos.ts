// `atoll chaos`: the fault instrument. Runs the same training twice on loopback, `atoll serve` and N
// real Node islands (CPU engine), each island behind its own FaultProxy (added latency, dropped
// connections): once without faults, once with a schedule keyed to training progress:
//   - kill -9 of ⌈failFraction·N⌉ islands spread over the run, each replaced by a fresh island;
//   - every connection of one island's proxy dropped, twice;
//   - one island paused (SIGSTOP) for a few seconds, then resumed (SIGCONT).
// Reports goodput (tokens in θ ÷ tokens computed), acknowledged deltas lost (an 'applied' ack with
// no matching contributor in the event log), duplicates (a contributor logged twice), and the eval
// loss against the fault-free run.
//
// Topology: the embedded server (one process), or with `roles` the Redis roles: a redis-server,
// two `atoll serve --role aggregator` (one active, one standby) on one run folder and two
// `--role gateway`; each island's proxy leads to one gateway and its `--server` list names the
// other next. The faulty run then also kills gateway 0 (kill -9; its islands fail over) and the
// active aggregator (kill -9; the standby takes over, a new standby is started), and reports each
// failover time. `topology` and `faults` in the result say exactly what ran.
//
// Every fault fires in the first half of the tokens, so the second half shows the run recovering; one
// that comes due only once the run is done is reported (notFired), not applied (chaos-faults.ts).
// The processes it runs, and the island child, are in chaos-children.ts.

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type RedisProc, freeTcpPort, startRedis } from '../../server/cluster/redis-proc.ts';
import { dataArg } from '../fleet/procs.ts';
import { loggedUpdates } from '../fleet/tally.ts';
import {
  type IslandChild,
  type Serve,
  alive,
  owned,
  serveChild,
  spawnIsland,
  takeDownOnSignals,
} from './chaos-children.ts';
import { type Fault, faultSchedule, fireDue, sleep, waitUntil } from './chaos-faults.ts';

export interface ChaosOptions {
  /** Islands training at any time (default 4). */
  islands?: number;
  /** Fraction of islands killed (kill -9) over the faulty run (default 0.3). */
  failFraction?: number;
  /** Tokens in θ that end each run (default 40,000). */
  tokens?: number;
  /** Latency every proxy adds each way, ms (default 10). */
  latencyMs?: number;
  innerSteps?: number;
  seed?: number;
  /** Also run without faults, for the eval-loss comparison (default true). */
  baseline?: boolean;
  /** On the Redis roles (two gateways, two aggregators) instead of the embedded server. */
  roles?: boolean;
  /** The run's data, as serve --data: a text, or a folder of byte token shards (islands fetch their ranges). */
  data?: string;
  /** The faults spread over this fraction of the tokens (default 0.5; past 1, some come due after the budget). */
  span?: number;
  log?: (line: string) => void;
}

export interface ChaosRun {
  faulty: boolean;
  seconds: number;
  versions: number;
  /**
   * Tokens the islands trained on: every submitted delta's, plus the steps of killed islands that
   * never reached the server.
   */
  tokensComputed: number;
  /** Tokens of the contributors of every logged update. */
  tokensInTheta: number;
  goodput: number;
  /** 'applied' acks islands received. */
  acked: number;
  lost: number;
  duplicates: number;
  evalLoss: number | null;
  islandKills: number;
  connectionDrops: number;
  pauses: number;
  gatewayKills: number;
  aggregatorKills: number;
  /** Roles: ms from the active aggregator's kill -9 to its standby's takeover. */
  failoverMs: number[];
}

export interface ChaosResult {
  topology: 'embedded' | 'roles';
  islands: number;
  failFraction: number;
  tokens: number;
  /** The runs' data (serve --data): a bundled name, or the absolute path of a text or a shard folder. */
  data: string;
  /** Faults the faulty run applied, in order, with the progress at which each fired. */
  faults: string[];
  /** Faults that came due only once the run was done: reported, not applied (chaos-faults.ts). */
  notFired: string[];
  clean: ChaosRun | null;
  faulty: ChaosRun;
  /** (faulty − clean) / clean eval loss, percent. */
  evalLossDeltaPct: number | null;
}

type Status = {
  version: number;
  tokensTotal: number;
  done: boolean;
  evalLoss: number | null;
  evalVersion: number | null;
};

async function status(url: string): Promise<Status> {
  // bounded: a server that never answers is a failed poll, not a wait until undici's 300 s
  const r = await fetch(`${url}/api/status`, { signal: AbortSignal.timeout(10_000) });
  if (!r.ok) throw new Error(`E_CHAOS: /api/status answered ${r.status}`);
  return (await r.json()) as Status;
}

/** null once `p` resolves, its error if it rejects: kept for later, never an unhandled rejection. */
const settled = (p: Promise<void>): Promise<unknown> => p.then(() => null).catch((e: unknown) => e);

async function runOnce(
  faulty: boolean,
  o: Required<Omit<ChaosOptions, 'log' | 'baseline'>>,
  log: (s: string) => void,
  faults: { fired: string[]; notFired: string[] },
): Promise<ChaosRun> {
  const dir = mkdtempSync(join(tmpdir(), 'atoll-chaos-'));
  owned.dirs.add(dir);
  writeFileSync(join(dir, 'run.json'), JSON.stringify({ coordinator: { totalTokens: o.tokens } }));
  const runFlags = [
    '--preset',
    'tiny',
    '--run-dir',
    join(dir, 'run'),
    '--config',
    join(dir, 'run.json'),
    '--inner-steps',
    String(o.innerSteps),
    '--seed',
    String(o.seed),
    '--data',
    o.data,
  ];
  const servers: Serve[] = [];
  let redis: RedisProc | null = null;
  const ports: number[] = [];
  const aggregators: Serve[] = [];
  const startAggregator = () => {
    const a = serveChild([
      '--redis',
      redis!.url,
      '--role',
      'aggregator',
      '--name',
      'chaos',
      '--lease-ms',
      '2000',
      ...runFlags,
    ]);
    servers.push(a);
    aggregators.push(a);
  };
  const islands: IslandChild[] = [];
  const counts = { islandKills: 0, connectionDrops: 0, pauses: 0, gatewayKills: 0, aggregatorKills: 0 };
  const failoverMs: number[] = [];
  const t0 = performance.now();
  try {
    if (o.roles) {
      redis = await startRedis();
      startAggregator();
      startAggregator();
      for (let g = 0; g < 2; g++) {
        ports.push(await freeTcpPort());
        servers.push(
          serveChild([
            '--redis',
            redis.url,
            '--role',
            'gateway',
            '--name',
            'chaos',
            '--port',
            String(ports[g]),
            '--host',
            '127.0.0.1',
          ]),
        );
      }
    } else {
      ports.push(await freeTcpPort());
      servers.push(serveChild(['--port', String(ports[0]), '--host', '127.0.0.1', ...runFlags]));
    }
    for (const p of ports)
      await waitUntil(
        'atoll serve to answer',
        120_000,
        async () => (await fetch(`http://127.0.0.1:${p}/healthz`, { signal: AbortSignal.timeout(10_000) })).ok,
      );
    // the last gateway is never killed: the harness reads the run there
    const url = `http://127.0.0.1:${ports[ports.length - 1]}`;
    const route = (k: number) => ports.map((_, j) => ports[(k + j) % ports.length]);
    let next = 0;
    const addIsland = async () => {
      islands.push(await spawnIsland(`island-${next}`, route(next), o.latencyMs, log));
      next++;
    };
    for (let i = 0; i < o.islands; i++) await addIsland();
    log(`chaos: ${faulty ? 'faulty' : 'clean'} run, ${o.islands} islands, to ${o.tokens} tokens`);

    // the schedule, fired once each as θ's tokens pass the mark (chaos-faults.ts)
    const killed: IslandChild[] = [];
    // what the faults wait for beside the schedule: each settles to null or its error
    const later: Array<Promise<unknown>> = [];
    const schedule: Fault[] = !faulty
      ? []
      : faultSchedule(o, {
          islands,
          replace: async (victim) => {
            killed.push(victim as IslandChild);
            await addIsland();
          },
          ...(o.roles
            ? {
                killGateway: async () => {
                  servers[2].child.kill('SIGKILL');
                  await servers[2].exited;
                },
                failOver: async () => {
                  const active = aggregators.find((a) => alive(a) && a.out.includes('aggregator active'))!;
                  active.child.kill('SIGKILL');
                  const t = performance.now();
                  await active.exited;
                  startAggregator();
                  await waitUntil('a standby to take over', 60_000, async () =>
                    aggregators.some((a) => a !== active && a.out.includes('aggregator active')),
                  );
                  return Math.round(performance.now() - t);
                },
              }
            : {}),
          counts,
          failoverMs,
          later: (p) => void later.push(settled(p)),
        });
    // the server read is never killed: its exit, or a minute with no answer, ends the run with the cause
    const reader = servers[servers.length - 1];
    let last: Status = await status(url);
    let answered = Date.now();
    const deadline = Date.now() + 20 * 60_000;
    while (!last.done) {
      if (Date.now() > deadline) throw new Error('E_CHAOS_TIMEOUT: the run did not finish in 20 minutes');
      if (!alive(reader)) throw new Error(`E_CHAOS_SERVER_EXIT: the server exited mid-run:\n${reader.err}`);
      if (Date.now() - answered > 60_000) throw new Error('E_CHAOS_TIMEOUT: /api/status unanswered for 60 s');
      if (islands.every((i) => i.child.exitCode !== null || i.child.signalCode !== null))
        throw new Error(
          `E_CHAOS_STALLED: every island stopped at ${((100 * last.tokensTotal) / o.tokens).toFixed(0)} % of the ` +
            `tokens (${islands.map((i) => `${i.name}: ${i.exitReason ?? 'no reason'}`).join(', ')})`,
        );
      await sleep(200);
      try {
        last = await status(url);
        answered = Date.now();
      } catch {
        continue;
      }
      await fireDue(schedule, last, o.tokens, faults, log);
    }
    await fireDue(schedule, last, o.tokens, faults, log);
    const failed = (await Promise.all(later)).find((e) => e !== null);
    if (failed) throw failed;
    await waitUntil('the final eval', 120_000, async () => {
      last = await status(url);
      return last.evalVersion === last.version;
    });
    const seconds = (performance.now() - t0) / 1000;
    for (const i of islands) i.child.kill('SIGTERM');
    await Promise.race([Promise.all(islands.map((i) => i.exited)), sleep(10_000)]);
    for (const i of islands) i.child.kill('SIGKILL');
    for (const sv of [...servers].reverse()) {
      if (alive(sv)) sv.child.kill('SIGTERM');
      // a server that does not close in 30 s is killed (said), not waited on
      await Promise.race([sv.exited, sleep(30_000)]);
      if (alive(sv)) {
        log('chaos: a server did not exit 30 s after SIGTERM: kill -9');
        sv.child.kill('SIGKILL');
        await sv.exited;
      }
    }

    const updates = loggedUpdates(readFileSync(join(dir, 'run', 'events.jsonl'), 'utf8'));
    const logged = new Map<string, number>();
    let tokensInTheta = 0;
    const versions = updates.length;
    for (const e of updates) {
      tokensInTheta += e.tokens;
      for (const c of e.contributors) logged.set(`${c.island}#${c.seq}`, (logged.get(`${c.island}#${c.seq}`) ?? 0) + 1);
    }
    const all = [...islands, ...killed];
    let lost = 0;
    let acked = 0;
    for (const i of all)
      for (const [id, seq] of i.acks) {
        acked++;
        if (!logged.has(`${id}#${seq}`)) lost++;
      }
    const duplicates = [...logged.values()].filter((c) => c > 1).length;
    // steps with no ack line yet count too: a killed island's, and a last round cut off by the SIGTERM
    const tokensComputed = all.reduce((s, i) => s + i.tokensSubmitted + i.stepsSinceSubmit * i.tokensPerStep, 0);
    return {
      faulty,
      seconds: Number(seconds.toFixed(1)),
      versions,
      tokensComputed,
      tokensInTheta,
      goodput: Number((tokensInTheta / Math.max(1, tokensComputed)).toFixed(4)),
      acked,
      lost,
      duplicates,
      evalLoss: last.evalLoss,
      ...counts,
      failoverMs,
    };
  } finally {
    for (const i of islands) if (i.child.exitCode === null) i.child.kill('SIGKILL');
    for (const sv of servers) if (alive(sv)) sv.child.kill('SIGKILL');
    await Promise.all(servers.map((sv) => sv.exited));
    await redis?.stop();
    await Promise.all(islands.map((i) => i.proxy.close().catch(() => {})));
    rmSync(dir, { recursive: true, force: true });
    owned.dirs.delete(dir);
  }
}

export async function chaos(opts: ChaosOptions = {}): Promise<ChaosResult> {
  const o = {
    islands: opts.islands ?? 4,
    failFraction: opts.failFraction ?? 0.3,
    tokens: opts.tokens ?? 40_000,
    latencyMs: opts.latencyMs ?? 10,
    innerSteps: opts.innerSteps ?? 8,
    seed: opts.seed ?? 1,
    roles: opts.roles ?? false,
    span: opts.span ?? 0.5,
    data: dataArg(opts.data) ?? 'moby-dick',
  };
  const log = opts.log ?? (() => {});
  if (!(Number.isInteger(o.islands) && o.islands >= 1 && o.islands <= 64))
    throw Object.assign(new Error(`--islands must be an integer in [1, 64], got ${o.islands}`), {
      code: 'E_BAD_FLAGS',
    });
  if (!(Number.isInteger(o.tokens) && o.tokens >= 1))
    throw Object.assign(new Error(`--tokens must be a positive integer, got ${o.tokens}`), { code: 'E_BAD_FLAGS' });
  if (!(o.failFraction >= 0 && o.failFraction <= 1))
    throw Object.assign(new Error(`--fail must be a number in [0, 1], got ${o.failFraction}`), { code: 'E_BAD_FLAGS' });
  if (!(o.span > 0 && o.span <= 100))
    throw Object.assign(new Error(`span must be a number in (0, 100], got ${o.span}`), { code: 'E_BAD_FLAGS' });
  takeDownOnSignals(log);
  const clean = opts.baseline === false ? null : await runOnce(false, o, log, { fired: [], notFired: [] });
  const faults = { fired: [] as string[], notFired: [] as string[] };
  const faulty = await runOnce(true, o, log, faults);
  const d =
    clean && clean.evalLoss !== null && faulty.evalLoss !== null
      ? (100 * (faulty.evalLoss - clean.evalLoss)) / clean.evalLoss
      : null;
  return {
    topology: o.roles ? 'roles' : 'embedded',
    islands: o.islands,
    failFraction: o.failFraction,
    tokens: o.tokens,
    data: o.data,
    faults: faults.fired,
    notFired: faults.notFired,
    clean,
    faulty,
    evalLossDeltaPct: d === null ? null : Number(d.toFixed(2)),
  };
}
