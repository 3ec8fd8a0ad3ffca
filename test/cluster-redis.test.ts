// The cluster's Redis layer against a real redis-server: the lease and its fencing token, the
// delta stream (idempotent appends, fenced reads and settles, takeover of a predecessor's pending
// deltas), the durable channel the gateways ack from, and the fault-injection TCP proxy.

import { spawn } from 'node:child_process';
import { createConnection, createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { connectRedis, runKeys, scriptErrorCode } from '../server/cluster/keys.ts';
import { AggregatorLease } from '../server/cluster/lease.ts';
import { FaultProxy } from '../server/cluster/proxy.ts';
import { SettleFeed } from '../server/cluster/settle-feed.ts';
import { DeltaConsumer, appendDelta, readDurable } from '../server/cluster/stream.ts';
import { type RedisProc, startRedis } from './helpers/redis.ts';
import { ROOT, track, waitFor } from './helpers/server.ts';

let redisProc: RedisProc;
let redis: Redis;
const clients: Array<{ disconnect(): void } | { close(): void }> = [];
let runN = 0;
const newRun = () => runKeys(`t${++runN}`);
const lease = (keys: ReturnType<typeof runKeys>, owner: string, ttlMs = 5000) =>
  new AggregatorLease(redis, keys, { owner, ttlMs });
const consumer = (keys: ReturnType<typeof runKeys>) => {
  const c = new DeltaConsumer(redis, keys);
  clients.push(c);
  return c;
};
const code = async (p: Promise<unknown>) => p.then(() => 'ok', scriptErrorCode);

beforeAll(async () => {
  redisProc = await startRedis();
  redis = connectRedis(redisProc.url);
});

afterAll(async () => {
  for (const c of clients) 'close' in c ? c.close() : c.disconnect();
  redis?.disconnect();
  await redisProc?.stop();
});

describe('aggregator lease', () => {
  it('one holder at a time; tokens only grow; a released lease goes to the standby and fences the old token', async () => {
    const keys = newRun();
    const a = lease(keys, 'a'),
      b = lease(keys, 'b');
    const c = consumer(keys);
    const ta = await a.tryAcquire();
    expect(ta).toBe(1);
    expect(await b.tryAcquire()).toBe(0);
    expect(a.held()).toBe(true);
    await c.settle(ta, [], { version: 1, hash: 'h1' });
    await a.release();
    const tb = await b.acquire();
    expect(tb).toBe(2);
    expect(await code(c.settle(ta, [], { version: 2, hash: 'stale' }))).toBe('E_FENCED');
    expect(await code(c.publishUpdate(ta, new Uint8Array([1])))).toBe('E_FENCED');
    expect(await readDurable(redis, keys)).toEqual({ version: 1, hash: 'h1', token: 1 });
    await b.release();
  });

  it('a deposed aggregator woken by SIGCONT after its lease lapsed writes nothing', async () => {
    const run = `t${++runN}`;
    const keys = runKeys(run);
    const child = spawn(
      process.execPath,
      [
        '--import',
        join(ROOT, 'bin/register.js'),
        join(ROOT, 'test/helpers/redis.ts'),
        'writer',
        redisProc.url,
        run,
        '600',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const lines: Array<{ kind: string; version?: number; code?: string; token?: number }> = [];
    const p = track(child, 'writer', (l) => {
      if (l.startsWith('{')) lines.push(JSON.parse(l));
    });
    try {
      await waitFor(
        'the writer to make durable writes',
        () => lines.filter((l) => l.kind === 'wrote').length >= 3,
        30_000,
        20,
      );
      const oldToken = lines.find((l) => l.kind === 'token')!.token!;
      const sub = redis.duplicate();
      clients.push(sub);
      const seen: Array<{ token: number }> = [];
      sub.on('message', (_c, m) => seen.push(JSON.parse(m)));
      await sub.subscribe(keys.durableChannel);

      child.kill('SIGSTOP');
      const standby = lease(keys, 'standby', 5000);
      const t = await standby.acquire(); // polls until the paused writer's lease lapses
      expect(t).toBe(oldToken + 1);
      await consumer(keys).settle(t, [], { version: 1000, hash: 'standby' });
      const before = lines.length;
      seen.length = 0;
      child.kill('SIGCONT');
      await waitFor(
        'the woken writer to attempt writes',
        () => lines.slice(before).filter((l) => l.kind === 'fenced').length >= 3,
        30_000,
        20,
      );
      const after = lines.slice(before);
      expect(after.filter((l) => l.kind === 'wrote')).toEqual([]);
      expect(after.filter((l) => l.kind === 'fenced').every((l) => l.code === 'E_FENCED')).toBe(true);
      expect(await readDurable(redis, keys)).toEqual({ version: 1000, hash: 'standby', token: t });
      expect(seen.filter((m) => m.token === oldToken)).toEqual([]);
      await standby.release();
    } finally {
      await p.kill9();
    }
  });
});

describe('delta stream', () => {
  const frame = (n: number) => Uint8Array.from({ length: 64 }, (_, i) => (i * 7 + n) & 255);

  it('appends are idempotent by island+seq; settles ack, record and announce; duplicates then report their outcome', async () => {
    const keys = newRun();
    const c = consumer(keys);
    await c.ensureGroup();
    const feed = new SettleFeed(redis, keys);
    clients.push(feed);
    await feed.start();
    const l = lease(keys, 'agg');
    const token = await l.tryAcquire();

    const w1 = feed.wait('i1', 1);
    const w2 = feed.wait('i2', 5);
    expect((await appendDelta(redis, keys, 'i1', 1, '{"a":1}', frame(1))).kind).toBe('appended');
    expect(await appendDelta(redis, keys, 'i1', 1, '{"a":1}', frame(1))).toEqual({ kind: 'duplicate', state: 'p' });
    expect(await appendDelta(redis, keys, 'i1', 0, '{}', frame(0))).toEqual({ kind: 'stale', latestSeq: 1 });
    expect((await appendDelta(redis, keys, 'i2', 5, '{"b":2}', frame(2))).kind).toBe('appended');

    const got = await c.readNew(token, 10, 0);
    expect(got.map((d) => [d.island, d.seq, d.meta])).toEqual([
      ['i1', 1, '{"a":1}'],
      ['i2', 5, '{"b":2}'],
    ]);
    expect(Array.from(got[0].frame)).toEqual(Array.from(frame(1)));
    expect(await c.readNew(token, 10, 0)).toEqual([]);

    await c.settle(
      token,
      [
        { ...got[0], state: 'v:1' },
        { ...got[1], state: 'r:E_STALE' },
      ],
      { version: 1, hash: 'h' },
    );
    expect(await w1).toBe('v:1');
    expect(await w2).toBe('r:E_STALE');
    expect(feed.durableVersion).toBe(1);
    expect(await appendDelta(redis, keys, 'i1', 1, '{}', frame(1))).toEqual({ kind: 'duplicate', state: 'v:1' });
    expect(await redis.xlen(keys.deltas)).toBe(0);
    expect(await c.readPending(token)).toEqual([]);
    await l.release();
  });

  it('readNew wakes up when a gateway appends', async () => {
    const keys = newRun();
    const c = consumer(keys);
    await c.ensureGroup();
    const token = await lease(keys, 'agg').tryAcquire();
    expect(await c.readNew(token, 10, 0)).toEqual([]);
    const t0 = performance.now();
    const reading = c.readNew(token, 10, 20_000);
    setTimeout(() => void appendDelta(redis, keys, 'late', 1, '{}', frame(3)), 100);
    const got = await reading;
    expect(got.map((d) => d.island)).toEqual(['late']);
    expect(performance.now() - t0).toBeLessThan(15_000);
  });

  it("a standby finds its predecessor's unsettled deltas; the predecessor can no longer read or settle", async () => {
    const keys = newRun();
    const a = consumer(keys),
      b = consumer(keys);
    await a.ensureGroup();
    const la = lease(keys, 'a'),
      lb = lease(keys, 'b');
    const ta = await la.tryAcquire();
    for (let s = 1; s <= 3; s++) await appendDelta(redis, keys, `i${s}`, s, '{}', frame(s));
    const read = await a.readNew(ta, 2, 0);
    expect(read.length).toBe(2);
    await a.settle(ta, [{ ...read[0], state: 'v:1' }], { version: 1, hash: 'h1' });
    await la.release();
    const tb = await lb.tryAcquire();
    expect((await b.readPending(tb)).map((d) => d.island)).toEqual(['i2']);
    expect((await b.readNew(tb, 10, 0)).map((d) => d.island)).toEqual(['i3']);
    expect(await code(a.readNew(ta, 10, 0))).toBe('E_FENCED');
    expect(await code(a.settle(ta, [{ ...read[1], state: 'v:9' }], { version: 9, hash: 'x' }))).toBe('E_FENCED');
    expect(await redis.hget(keys.islands, 'i2')).toBe('2|p');
    expect((await readDurable(redis, keys))?.version).toBe(1);
    await lb.release();
  });

  it('a waiter registered after its settle message still resolves (recheck of the islands hash)', async () => {
    const keys = newRun();
    const c = consumer(keys);
    await c.ensureGroup();
    const token = await lease(keys, 'agg').tryAcquire();
    await appendDelta(redis, keys, 'slow', 7, '{}', frame(7));
    const [d] = await c.readNew(token, 1, 0);
    await c.settle(token, [{ ...d, state: 'v:4' }], { version: 4, hash: 'h4' });
    const feed = new SettleFeed(redis, keys, { recheckMs: 50 });
    clients.push(feed);
    await feed.start();
    expect(await feed.wait('slow', 7)).toBe('v:4');
  });
});

describe('redis-server harness', () => {
  it('with AOF, a write survives kill -9 and a restart on the same folder', async () => {
    const r1 = await startRedis({ aof: true });
    const c1 = connectRedis(r1.url);
    await c1.set('k', 'durable');
    c1.disconnect();
    await r1.kill9();
    const r2 = await startRedis({ aof: true, dir: r1.dir, port: r1.port });
    const c2 = connectRedis(r2.url);
    expect(await c2.get('k')).toBe('durable');
    c2.disconnect();
    await r2.stop();
    await r1.stop();
  });
});

describe('fault proxy', () => {
  it('adds latency in both directions and drops open connections', async () => {
    const echo = createServer((s) => {
      s.on('error', () => {});
      s.pipe(s);
    });
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', () => r()));
    const port = (echo.address() as { port: number }).port;
    const proxy = new FaultProxy({ host: '127.0.0.1', port }, { latencyMs: 60 });
    await proxy.listen();
    const sock = createConnection(proxy.port, '127.0.0.1');
    await new Promise((r) => sock.once('connect', r));
    const t0 = performance.now();
    sock.write('ping');
    const reply = await new Promise<string>((r) => sock.once('data', (b) => r(b.toString())));
    expect(reply).toBe('ping');
    expect(performance.now() - t0).toBeGreaterThanOrEqual(110);
    const closed = new Promise((r) => sock.once('close', r));
    sock.on('error', () => {});
    expect(proxy.dropAll()).toBe(1);
    await closed;
    expect(proxy.stats.drops).toBe(1);
    await proxy.close();
    await new Promise((r) => echo.close(r));
  });
});
