// `atoll chaos --cluster`: the fault schedule on the Redis layer itself. A redis-server with AOF,
// two aggregator processes (server/cluster/aggregator.ts as a script: one active, one standby)
// sharing a checkpoint folder, three gateway links, and submitters ("islands") that send
// deterministic deltas round-robin over the gateways, retrying through the next gateway when an
// answer does not come. Faults, keyed to durable versions:
//   - kill -9 of the active aggregator (a new standby is started in its place);
//   - one gateway closed (its islands retry the same seq through another: counted once);
//   - the active aggregator paused (SIGSTOP) past its lease, then woken (SIGCONT): it must exit fenced;
//   - `failFraction` of the islands stop for good, each replaced by a new island.
// Reports failover times, lost (an acknowledged delta missing from the version it was acked in),
// duplicates (a delta in two versions), goodput (tokens in durable versions ÷ tokens sent), and
// whether a replay of the announced versions from θ₀ reproduces the durable θ hash.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { encodeDelta } from '../../core/codec/index.ts';
import { SCRIPT_DOWNLINK, SCRIPT_OUTER } from './aggregator.ts';
import { GatewayLink } from './gateway-link.ts';
import { connectRedis, runKeys } from './keys.ts';
import { OuterPool } from './outer-pool.ts';
import { startRedis } from './redis-proc.ts';
import { type SettleMessage, readDurable } from './stream.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const RUN = 'chaos';

export interface ClusterChaosResult {
  islands: number;
  versions: number;
  /** ms from each aggregator's loss (kill -9 or SIGSTOP) to its successor's takeover. */
  failoverMs: number[];
  deposedExitedFenced: boolean;
  gatewayRetries: number;
  acked: number;
  lost: number;
  duplicates: number;
  goodput: number;
  replayMatches: boolean;
  faults: string[];
}

type Agg = { child: ChildProcess; lines: Array<{ kind: string; token?: number; why?: string }>; exited: Promise<number | null> };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const deltaFor = (n: number, island: string, seq: number) => {
  const k = Number(island.replace(/\D/g, '')) + 1;
  return Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.001 * k + seq) * 0.01);
};

export async function chaosCluster(o: { islands?: number; versions?: number; failFraction?: number; n?: number; ttlMs?: number; log?: (s: string) => void } = {}): Promise<ClusterChaosResult> {
  const islands = o.islands ?? 8, target = o.versions ?? 24, n = o.n ?? 4096, ttlMs = o.ttlMs ?? 1000;
  const log = o.log ?? (() => {});
  const dir = mkdtempSync(join(tmpdir(), 'atoll-chaos-cluster-'));
  const redisProc = await startRedis({ aof: true });
  const redis = connectRedis(redisProc.url);
  const aggs: Agg[] = [];
  const startAggregator = (): Agg => {
    const child = spawn(process.execPath, ['--import', join(ROOT, 'bin/register.js'), join(ROOT, 'server/cluster/aggregator.ts'), redisProc.url, RUN, dir, String(n), String(ttlMs)], { stdio: ['ignore', 'pipe', 'ignore'] });
    const a: Agg = { child, lines: [], exited: new Promise((r) => child.once('exit', (c) => r(c))) };
    let partial = '';
    child.stdout?.on('data', (b: Buffer) => {
      const ls = (partial + b.toString()).split('\n');
      partial = ls.pop() ?? '';
      for (const l of ls) if (l.startsWith('{')) a.lines.push(JSON.parse(l));
    });
    aggs.push(a);
    return a;
  };
  const alive = (a: Agg) => a.child.exitCode === null && a.child.signalCode === null;
  const active = () => aggs.find((a) => alive(a) && a.lines.some((l) => l.kind === 'active') && !a.lines.some((l) => l.kind === 'exit'));
  const links = [0, 1, 2].map(() => new GatewayLink(redis, RUN, { recheckMs: 250 }));
  const open = new Set([0, 1, 2]);
  const announced: SettleMessage[] = [];
  links[0].onDurable((m) => announced.push(m));
  const faults: string[] = [];
  const failoverMs: number[] = [];
  const acks: Array<[string, number, string]> = [];
  const sent = new Map<string, number>(); // island#seq → tokens
  let gatewayRetries = 0;
  let running = true;
  try {
    await Promise.all(links.map((l) => l.start()));
    startAggregator();
    startAggregator();
    const until = async (what: string, f: () => boolean | Promise<boolean>, ms = 90_000) => {
      const end = Date.now() + ms;
      while (!(await f())) {
        if (Date.now() > end) throw new Error(`E_CHAOS_TIMEOUT: ${what} (aggregators: ${aggs.map((a) => a.lines.map((l) => l.kind).join('>')).join(' | ')}; retries ${gatewayRetries})`);
        await sleep(20);
      }
    };
    await until('an active aggregator', () => !!active());
    const version = async () => (await readDurable(redis, runKeys(RUN)))?.version ?? 0;

    // an island: next seq once the last settled; no answer within 1 s → the same seq through the next open gateway
    let nextId = 0;
    const stopped = new Set<string>();
    const island = async (id: string, tokens: number) => {
      for (let seq = 1, g = nextId % 3; running && !stopped.has(id); seq++) {
        const frame = encodeDelta(deltaFor(n, id, seq), { encoding: 'f32' });
        sent.set(`${id}#${seq}`, tokens);
        for (;;) {
          while (!open.has(g)) g = (g + 1) % 3;
          const state = await Promise.race([links[g].submit(id, seq, JSON.stringify({ tokens }), frame), sleep(1000).then(() => null)]);
          if (state !== null) { acks.push([id, seq, state]); break; }
          if (!running) return;
          gatewayRetries++;
          g = (g + 1) % 3;
        }
      }
    };
    const loops: Array<Promise<void>> = [];
    const spawnIsland = () => { const id = `isl${nextId++}`; loops.push(island(id, 100 + (nextId % 7))); return id; };
    const ids = Array.from({ length: islands }, spawnIsland);

    const failAt = Math.max(1, Math.round((o.failFraction ?? 0.3) * islands));
    const schedule: Array<[number, string, () => Promise<void>]> = [];
    for (let j = 0; j < failAt; j++) {
      schedule.push([0.1 + (0.5 * j) / failAt, 'island stops for good (replaced)', async () => { stopped.add(ids[j]); spawnIsland(); }]);
    }
    schedule.push([0.25, 'kill -9 active aggregator', async () => {
      const a = active()!;
      a.child.kill('SIGKILL');
      const t0 = performance.now();
      await a.exited;
      startAggregator();
      await until('a takeover', () => !!active());
      failoverMs.push(Math.round(performance.now() - t0));
    }]);
    schedule.push([0.45, 'gateway 0 closed', async () => {
      open.delete(0);
      links[0].close();
      links[1].onDurable((m) => announced.push(m));
      await until('the islands of gateway 0 to retry through another', () => gatewayRetries > 0);
    }]);
    let deposed: Agg | null = null;
    schedule.push([0.65, 'SIGSTOP active aggregator past its lease, then SIGCONT', async () => {
      deposed = active()!;
      deposed.child.kill('SIGSTOP');
      const t0 = performance.now();
      await until('a takeover', () => !!aggs.find((a) => a !== deposed && alive(a) && a.lines.some((l) => l.kind === 'active')));
      failoverMs.push(Math.round(performance.now() - t0));
      deposed.child.kill('SIGCONT');
      startAggregator();
    }]);
    schedule.sort((a, b) => a[0] - b[0]);
    for (;;) {
      const v = await version();
      while (schedule.length && schedule[0][0] * target <= v) {
        const [p, what, act] = schedule.shift()!;
        faults.push(`${what} at ${(100 * p).toFixed(0)} %`);
        log(`chaos cluster: ${what} at version ${v}`);
        await act();
      }
      if (v >= target && schedule.length === 0) break;
      await sleep(50);
    }
    running = false;
    await Promise.all(loops);
    const deposedExitedFenced = deposed !== null && (await (deposed as Agg).exited) === 3;

    // check: every ack against the announcements, and θ by replay
    const durable = (await readDurable(redis, runKeys(RUN)))!;
    const byVersion = new Map<number, SettleMessage>();
    for (const m of announced) if (m.version !== undefined) byVersion.set(m.version, m);
    const where = new Map<string, number[]>();
    const pool = OuterPool.start({ theta: new Float32Array(n), workers: 1 });
    let hash = '';
    let tokensIn = 0;
    try {
      for (let v = 1; v <= durable.version; v++) {
        const kept = (byVersion.get(v)?.settled ?? []).filter(([, , s]) => s === `v:${v}`);
        const slots: number[] = [];
        for (const [id, seq] of kept) {
          where.set(`${id}#${seq}`, [...(where.get(`${id}#${seq}`) ?? []), v]);
          const r = await pool.ingest(encodeDelta(deltaFor(n, id, seq), { encoding: 'f32' }));
          if (r.ok) slots.push(r.value.slot);
        }
        const tokens = kept.map(([id, seq]) => sent.get(`${id}#${seq}`) ?? 0);
        const total = tokens.reduce((a, b) => a + b, 0);
        tokensIn += total;
        const s = await pool.step({ slots, weights: tokens.map((t) => t / total), outer: SCRIPT_OUTER, downlink: SCRIPT_DOWNLINK, scale: 1, period: 1 });
        for (const sl of slots) pool.release(sl);
        if (s.ok) hash = s.value.hash;
      }
    } finally { await pool.close(); }
    const applied = acks.filter(([, , s]) => s.startsWith('v:'));
    const lost = applied.filter(([id, seq, s]) => !(where.get(`${id}#${seq}`) ?? []).includes(Number(s.slice(2)))).length;
    const duplicates = [...where.values()].filter((vs) => vs.length > 1).length;
    const tokensSent = [...sent.values()].reduce((a, b) => a + b, 0);
    return {
      islands, versions: durable.version, failoverMs, deposedExitedFenced, gatewayRetries,
      acked: applied.length, lost, duplicates, goodput: Number((tokensIn / Math.max(1, tokensSent)).toFixed(4)),
      replayMatches: hash === durable.hash, faults,
    };
  } finally {
    running = false;
    for (const a of aggs) { if (alive(a)) { a.child.kill('SIGCONT'); a.child.kill('SIGKILL'); } }
    await Promise.all(aggs.map((a) => a.exited));
    for (const [i, l] of links.entries()) if (open.has(i)) l.close();
    redis.disconnect();
    await redisProc.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
