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
// Topology today: the embedded server (one process). The gateway and aggregator roles on Redis
// (server/cluster/) are not wired into `atoll serve` yet, so no gateway kill or aggregator failover
// is scheduled: `topology` and `faults` in the result say exactly what ran.
//
// Every fault fires in the first half of the tokens, so the second half shows the run recovering.
//
// Run as a script (`node --import bin/register.js server/commands/chaos.ts island <url> <name>`),
// this file is the island child: one JSON line per step, submission and sync.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { FaultProxy } from '../cluster/proxy.ts';
import { freeTcpPort } from '../cluster/redis-proc.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const SELF = fileURLToPath(import.meta.url);

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
  log?: (line: string) => void;
}

export interface ChaosRun {
  faulty: boolean;
  seconds: number;
  versions: number;
  /** Tokens the islands trained on: every submitted delta's, plus the steps of killed islands that never reached the server. */
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
}

export interface ChaosResult {
  topology: 'embedded';
  islands: number;
  failFraction: number;
  tokens: number;
  /** Faults the faulty run applied, in order, with the progress at which each fired. */
  faults: string[];
  clean: ChaosRun | null;
  faulty: ChaosRun;
  /** (faulty − clean) / clean eval loss, percent. */
  evalLossDeltaPct: number | null;
}

interface IslandChild {
  name: string;
  child: ChildProcess;
  proxy: FaultProxy;
  /** [islandId, seq] of every 'applied' ack. */
  acks: Array<[string, number]>;
  tokensSubmitted: number;
  stepsSinceSubmit: number;
  tokensPerStep: number;
  exited: Promise<void>;
}

type Status = { version: number; tokensTotal: number; done: boolean; evalLoss: number | null; evalVersion: number | null };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function status(url: string): Promise<Status> {
  const r = await fetch(`${url}/api/status`);
  if (!r.ok) throw new Error(`E_CHAOS: /api/status answered ${r.status}`);
  return (await r.json()) as Status;
}

async function waitUntil(what: string, ms: number, f: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try { if (await f()) return; } catch { /* not up yet */ }
    if (Date.now() > end) throw new Error(`E_CHAOS_TIMEOUT: ${what} within ${ms / 1000} s`);
    await sleep(200);
  }
}

function spawnIsland(url: string, name: string, serverPort: number, latencyMs: number): Promise<IslandChild> {
  const proxy = new FaultProxy({ host: '127.0.0.1', port: serverPort }, { latencyMs });
  return proxy.listen().then((proxyUrl) => {
    const child = spawn(process.execPath, ['--import', join(ROOT, 'bin/register.js'), SELF, 'island', proxyUrl, name], { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] });
    const isl: IslandChild = { name, child, proxy, acks: [], tokensSubmitted: 0, stepsSinceSubmit: 0, tokensPerStep: 0, exited: new Promise((r) => child.once('exit', () => r())) };
    let partial = '';
    child.stdout?.on('data', (b: Buffer) => {
      const lines = (partial + b.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        if (!line.startsWith('{')) continue;
        const m = JSON.parse(line) as { kind: string; island?: string; seq?: number; status?: string; tokens?: number; steps?: number };
        if (m.kind === 'step') isl.stepsSinceSubmit++;
        else if (m.kind === 'submitted') {
          isl.tokensSubmitted += m.tokens!;
          isl.tokensPerStep = m.tokens! / Math.max(1, m.steps!);
          isl.stepsSinceSubmit = 0;
          if (m.status === 'applied') isl.acks.push([m.island!, m.seq!]);
        }
      }
    });
    return isl;
  });
}

async function runOnce(faulty: boolean, o: Required<Omit<ChaosOptions, 'log' | 'baseline'>>, log: (s: string) => void, faults: string[]): Promise<ChaosRun> {
  const dir = mkdtempSync(join(tmpdir(), 'atoll-chaos-'));
  const port = await freeTcpPort();
  writeFileSync(join(dir, 'run.json'), JSON.stringify({ coordinator: { totalTokens: o.tokens } }));
  const server = spawn(process.execPath, [join(ROOT, 'bin/atoll.js'), 'serve', '--port', String(port), '--host', '127.0.0.1', '--preset', 'tiny',
    '--run-dir', join(dir, 'run'), '--config', join(dir, 'run.json'), '--inner-steps', String(o.innerSteps), '--seed', String(o.seed)],
  { cwd: ROOT, stdio: ['ignore', 'ignore', 'ignore'], env: { ...process.env, ATOLL_ADMIN_TOKEN: 'chaos' } });
  const serverExited = new Promise<void>((r) => server.once('exit', () => r()));
  const url = `http://127.0.0.1:${port}`;
  const islands: IslandChild[] = [];
  const counts = { islandKills: 0, connectionDrops: 0, pauses: 0 };
  const t0 = performance.now();
  try {
    await waitUntil('atoll serve to answer', 60_000, async () => (await fetch(`${url}/healthz`)).ok);
    let next = 0;
    for (let i = 0; i < o.islands; i++) islands.push(await spawnIsland(url, `island-${next++}`, port, o.latencyMs));
    log(`chaos: ${faulty ? 'faulty' : 'clean'} run, ${o.islands} islands, to ${o.tokens} tokens`);

    // the schedule: [progress, action], fired once each as θ's tokens pass the mark
    const schedule: Array<[number, string, () => Promise<void> | void]> = [];
    const killed: IslandChild[] = [];
    if (faulty) {
      const kills = Math.ceil(o.failFraction * o.islands);
      for (let j = 0; j < kills; j++) {
        schedule.push([0.1 + (0.4 * (j + 0.5)) / kills, 'kill -9 island', async () => {
          const victim = islands.splice(j % islands.length, 1)[0];
          victim.child.kill('SIGKILL');
          await victim.exited;
          await victim.proxy.close();
          counts.islandKills++;
          killed.push(victim);
          islands.push(await spawnIsland(url, `island-${next++}`, port, o.latencyMs));
        }]);
      }
      for (const p of [0.2, 0.4]) schedule.push([p, 'drop connections', () => { islands[0].proxy.dropAll(); counts.connectionDrops++; }]);
      schedule.push([0.3, 'SIGSTOP island for 3 s', async () => {
        const c = islands[islands.length - 1].child;
        c.kill('SIGSTOP');
        counts.pauses++;
        await sleep(3000);
        c.kill('SIGCONT');
      }]);
      schedule.sort((a, b) => a[0] - b[0]);
    }
    let last: Status = await status(url);
    const deadline = Date.now() + 20 * 60_000;
    while (!last.done) {
      if (Date.now() > deadline) throw new Error('E_CHAOS_TIMEOUT: the run did not finish in 20 minutes');
      await sleep(200);
      try { last = await status(url); } catch { continue; }
      const progress = last.tokensTotal / o.tokens;
      while (schedule.length && schedule[0][0] <= progress) {
        const [p, what, act] = schedule.shift()!;
        faults.push(`${what} at ${(100 * p).toFixed(0)} %`);
        log(`chaos: ${what} at ${(100 * progress).toFixed(0)} % of the tokens`);
        await act();
      }
    }
    await waitUntil('the final eval', 120_000, async () => {
      last = await status(url);
      return last.evalVersion === last.version;
    });
    const seconds = (performance.now() - t0) / 1000;
    for (const i of islands) i.child.kill('SIGTERM');
    await Promise.race([Promise.all(islands.map((i) => i.exited)), sleep(10_000)]);
    for (const i of islands) i.child.kill('SIGKILL');
    server.kill('SIGTERM');
    await serverExited;

    const logged = new Map<string, number>();
    let tokensInTheta = 0;
    let versions = 0;
    for (const line of readFileSync(join(dir, 'run', 'events.jsonl'), 'utf8').split('\n')) {
      if (!line.includes('"type":"update"')) continue;
      const e = JSON.parse(line) as { tokens: number; contributors: Array<{ island: string; seq: number }> };
      versions++;
      tokensInTheta += e.tokens;
      for (const c of e.contributors) logged.set(`${c.island}#${c.seq}`, (logged.get(`${c.island}#${c.seq}`) ?? 0) + 1);
    }
    const all = [...islands, ...killed];
    let lost = 0;
    let acked = 0;
    for (const i of all) for (const [id, seq] of i.acks) { acked++; if (!logged.has(`${id}#${seq}`)) lost++; }
    const duplicates = [...logged.values()].filter((c) => c > 1).length;
    const tokensComputed = all.reduce((s, i) => s + i.tokensSubmitted, 0) + killed.reduce((s, i) => s + i.stepsSinceSubmit * i.tokensPerStep, 0);
    return {
      faulty, seconds: Number(seconds.toFixed(1)), versions, tokensComputed, tokensInTheta,
      goodput: Number((tokensInTheta / Math.max(1, tokensComputed)).toFixed(4)),
      acked, lost, duplicates, evalLoss: last.evalLoss, ...counts,
    };
  } finally {
    for (const i of islands) if (i.child.exitCode === null) i.child.kill('SIGKILL');
    if (server.exitCode === null) server.kill('SIGKILL');
    await Promise.all(islands.map((i) => i.proxy.close().catch(() => {})));
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function chaos(opts: ChaosOptions = {}): Promise<ChaosResult> {
  const o = {
    islands: opts.islands ?? 4, failFraction: opts.failFraction ?? 0.3, tokens: opts.tokens ?? 40_000,
    latencyMs: opts.latencyMs ?? 10, innerSteps: opts.innerSteps ?? 8, seed: opts.seed ?? 1,
  };
  const log = opts.log ?? (() => {});
  const clean = opts.baseline === false ? null : await runOnce(false, o, log, []);
  const faults: string[] = [];
  const faulty = await runOnce(true, o, log, faults);
  const d = clean && clean.evalLoss !== null && faulty.evalLoss !== null ? (100 * (faulty.evalLoss - clean.evalLoss)) / clean.evalLoss : null;
  return { topology: 'embedded', islands: o.islands, failFraction: o.failFraction, tokens: o.tokens, faults, clean, faulty, evalLossDeltaPct: d === null ? null : Number(d.toFixed(2)) };
}

// ── the island child ────────────────────────────────────────────────────────────────────────

async function islandChild(url: string, name: string): Promise<void> {
  const { startNodeIsland } = await import('../island-node.ts');
  const out = (m: Record<string, unknown>) => process.stdout.write(JSON.stringify(m) + '\n');
  const isl = await startNodeIsland({
    server: url, engine: 'cpu', name, progress: 'none', maxOutageMs: 120_000, handleSignals: true,
    onEvent: (e) => {
      if (e.type === 'step') out({ kind: 'step' });
      else if (e.type === 'submitted') out({ kind: 'submitted', island: e.meta.islandId, seq: e.meta.seq, status: e.ack.status, tokens: e.meta.tokens, steps: e.meta.steps });
    },
  });
  await isl.done;
  process.exit(0);
}

if (process.argv[1] === SELF && process.argv[2] === 'island') void islandChild(process.argv[3], process.argv[4]);
