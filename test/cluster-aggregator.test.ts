// Aggregator failover on real Redis, with aggregator child processes and two gateway links in
// this process (append to the stream, ack only on the durable announcement, retries counted once):
//   - kill -9 of the active aggregator mid-stream: the standby takes over from the last durable
//     checkpoint, no acknowledged delta is lost, submitters go on by themselves;
//   - an aggregator paused (SIGSTOP) past its lease and woken (SIGCONT) writes nothing and exits.
// Both check that θ's durable hash equals a replay of exactly the announced versions' deltas.

import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { decodeDelta, encodeDelta } from '../core/codec/index.ts';
import { SCRIPT_DOWNLINK, SCRIPT_OUTER } from '../server/cluster/aggregator.ts';
import { GatewayLink } from '../server/cluster/gateway-link.ts';
import { connectRedis, runKeys } from '../server/cluster/keys.ts';
import { type SettleMessage, readDurable } from '../server/cluster/stream.ts';
import { ReferenceOuter } from './helpers/outer-reference.ts';
import { type RedisProc, startRedis } from './helpers/redis.ts';
import { ROOT, type Proc, tempDir, track, waitFor } from './helpers/server.ts';

const N = 3000;
let redisProc: RedisProc;
let redis: Redis;
const procs: Proc[] = [];
const dirs: string[] = [];

beforeAll(async () => {
  redisProc = await startRedis();
  redis = connectRedis(redisProc.url);
});

afterAll(async () => {
  await Promise.all(procs.map((p) => p.kill9()));
  redis?.disconnect();
  await redisProc?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

type Line = { kind: string; token?: number; version?: number; why?: string };

function aggregator(run: string, dir: string, ttlMs: number): Proc & { lines: Line[]; child: ChildProcess } {
  const lines: Line[] = [];
  const child = spawn(process.execPath, ['--import', join(ROOT, 'bin/register.js'), join(ROOT, 'server/cluster/aggregator.ts'), redisProc.url, run, dir, String(N), String(ttlMs)], { stdio: ['ignore', 'pipe', 'pipe'] });
  const p = track(child, `aggregator ${run}`, (l) => { if (l.startsWith('{')) lines.push(JSON.parse(l)); });
  procs.push(p);
  return { ...p, lines };
}

const deltaFor = (island: number, seq: number) => Float32Array.from({ length: N }, (_, i) => Math.sin(i * 0.01 * (island + 1) + seq) * 0.01);

/**
 * Islands on two gateways: each appends its next delta once the previous one settled, alternating
 * gateways; every third delta is also re-sent at once through the other gateway (a retry after a
 * reconnect), which must settle the same and count once.
 */
async function startIslands(run: string, count: number) {
  const links = [new GatewayLink(redis, run, { recheckMs: 200 }), new GatewayLink(redis, run, { recheckMs: 200 })];
  const announced: SettleMessage[] = [];
  const updates: Buffer[] = [];
  links[0].onDurable((m) => announced.push(m));
  links[1].onUpdate((u) => updates.push(u));
  await Promise.all(links.map((l) => l.start()));
  const acks: Array<{ island: string; seq: number; state: string }> = [];
  let running = true;
  const loops = Array.from({ length: count }, async (_, k) => {
    const island = `isl-${k}`;
    for (let seq = 1; running; seq++) {
      const send = (g: number) => links[g].submit(island, seq, JSON.stringify({ tokens: 100 + k }), encodeDelta(deltaFor(k, seq), { encoding: 'f32' }));
      const first = send((k + seq) % 2);
      const states = await Promise.all(seq % 3 === 0 ? [first, send((k + seq + 1) % 2)] : [first]);
      expect(new Set(states).size).toBe(1);
      acks.push({ island, seq, state: states[0] });
    }
  });
  return {
    acks, announced, updates,
    async stop() {
      running = false;
      await Promise.all(loops);
      for (const l of links) l.close();
    },
  };
}

/** Replays the announced versions from θ₀ = 0 and checks every ack against them. */
async function verify(run: string, isl: Awaited<ReturnType<typeof startIslands>>): Promise<number> {
  const durable = (await readDurable(redis, runKeys(run)))!;
  const versions = isl.announced.filter((m) => m.version !== undefined).sort((a, b) => a.version! - b.version!);
  expect(versions.map((m) => m.version)).toEqual(Array.from({ length: durable.version }, (_, i) => i + 1));
  const inVersion = new Set<string>();
  const seen = new Set<string>();
  const ref = new ReferenceOuter(new Float32Array(N));
  let hash = '';
  for (const m of versions) {
    const kept = m.settled.filter(([, , s]) => s === `v:${m.version}`);
    for (const [island, seq] of kept) {
      expect(seen.has(`${island}#${seq}`)).toBe(false); // no delta in two versions
      seen.add(`${island}#${seq}`);
      inVersion.add(`${island}#${seq}#v:${m.version}`);
    }
    const tokens = kept.map(([island]) => 100 + Number(island.slice(4)));
    const total = tokens.reduce((a, b) => a + b, 0);
    hash = ref.step(kept.map(([island, seq]) => deltaFor(Number(island.slice(4)), seq)), tokens.map((t) => t / total), SCRIPT_OUTER, SCRIPT_DOWNLINK)!.hash;
  }
  expect(hash).toBe(durable.hash);
  const applied = isl.acks.filter((a) => a.state.startsWith('v:'));
  expect(applied.length).toBeGreaterThan(0);
  for (const a of applied) expect(inVersion.has(`${a.island}#${a.seq}#${a.state}`)).toBe(true);
  // the gateways relay the broadcasts: every one a downlink frame of θ's size
  expect(isl.updates.length).toBeGreaterThan(0);
  for (const u of isl.updates) expect(decodeDelta(new Uint8Array(u), N).ok).toBe(true);
  return durable.version;
}

describe('cluster aggregator', () => {
  it('kill -9 of the active aggregator: the standby takes over, no acknowledged delta is lost, submitters go on', async () => {
    const run = 'failover', dir = tempDir('atoll-agg-');
    dirs.push(dir);
    const a = aggregator(run, dir, 1000);
    await waitFor('aggregator A active', () => a.lines.some((l) => l.kind === 'active'), 30_000, 50);
    const b = aggregator(run, dir, 1000);
    await waitFor('aggregator B standby', () => b.lines.some((l) => l.kind === 'standby'), 30_000, 50);
    const isl = await startIslands(run, 3);
    await waitFor('4 durable versions', async () => ((await readDurable(redis, runKeys(run)))?.version ?? 0) >= 4, 60_000, 50);
    await a.kill9();
    const killedAt = performance.now();
    const atKill = (await readDurable(redis, runKeys(run)))!.version;
    await waitFor('B to take over', () => b.lines.some((l) => l.kind === 'active'), 30_000, 20);
    const failoverMs = performance.now() - killedAt;
    await waitFor('3 more versions from B', async () => ((await readDurable(redis, runKeys(run)))?.version ?? 0) >= atKill + 3, 60_000, 50);
    await isl.stop();
    await verify(run, isl);
    expect(b.lines.find((l) => l.kind === 'active')!.version).toBeGreaterThanOrEqual(atKill);
    expect(failoverMs).toBeLessThan(20_000);
    process.stderr.write(`cluster aggregator: failover ${failoverMs.toFixed(0)} ms (lease ttl 1000 ms)\n`);
    await b.stop();
  });

  it('an aggregator paused past its lease and woken writes nothing and exits', async () => {
    const run = 'deposed', dir = tempDir('atoll-agg-');
    dirs.push(dir);
    const a = aggregator(run, dir, 800);
    await waitFor('aggregator A active', () => a.lines.some((l) => l.kind === 'active'), 30_000, 50);
    const b = aggregator(run, dir, 800);
    const isl = await startIslands(run, 2);
    await waitFor('2 durable versions', async () => ((await readDurable(redis, runKeys(run)))?.version ?? 0) >= 2, 60_000, 50);
    a.child.kill('SIGSTOP');
    const tokenA = a.lines.find((l) => l.kind === 'active')!.token!;
    await waitFor('B to take over', () => b.lines.some((l) => l.kind === 'active'), 30_000, 20);
    const fromB = b.lines.find((l) => l.kind === 'active')!.version!;
    await waitFor('2 versions from B', async () => ((await readDurable(redis, runKeys(run)))?.version ?? 0) >= fromB + 2, 60_000, 50);
    a.child.kill('SIGCONT');
    expect(await a.exited).toBe(3);
    expect(a.lines.at(-1)).toEqual({ kind: 'exit', why: 'fenced' });
    await waitFor('1 more version from B', async () => ((await readDurable(redis, runKeys(run)))?.version ?? 0) >= fromB + 3, 60_000, 50);
    await isl.stop();
    await verify(run, isl);
    const tokenB = b.lines.find((l) => l.kind === 'active')!.token!;
    expect(isl.announced.filter((m) => m.version !== undefined && m.version > fromB).every((m) => m.token === tokenB)).toBe(true);
    // A left no checkpoint past the version B resumed from
    const filesOfA = readdirSync(join(dir, 'checkpoints')).filter((f) => f.endsWith(`-t${tokenA}.bin`)).map((f) => Number(/v(\d+)/.exec(f)![1]));
    expect(Math.max(...filesOfA)).toBeLessThanOrEqual(fromB);
    await b.stop();
  });
});
