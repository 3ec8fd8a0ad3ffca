// Nothing an island sends grows the server's state without bound: island records are capped (the
// longest-gone ones that hold nothing are dropped), events.jsonl is rotated (startup reads one
// bounded file), hellos are counted per address, and hellos with junk caps store nothing.

import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { io, type Socket } from 'socket.io-client';
import { PROTOCOL_VERSION } from '../core/protocol.ts';
import { type TestServer, startTestServer, tempDir } from './helpers/server.ts';

const RECORDS = 300;
const LOG_BYTES = 256 * 1024;

function connect(url: string): Promise<Socket> {
  const s = io(`${url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
  return new Promise((resolve, reject) => {
    s.once('connect', () => resolve(s));
    s.once('connect_error', reject);
  });
}

const hello = (s: Socket, payload: unknown) =>
  new Promise<{ ok: boolean; error?: { code: string } }>((resolve) => s.emit('hello', payload, resolve));

describe('bounded state', () => {
  const servers: TestServer[] = [];
  afterAll(async () => {
    for (const s of servers) await s.close();
  });

  it('10,000 hostile hellos: island records stay capped, the checkpoint and the log stay bounded, a restart reads one file', async () => {
    const dir = tempDir();
    const file = { coordinator: { maxIslandRecords: RECORDS }, limits: { maxLogBytes: LOG_BYTES } };
    let ts = await startTestServer({ dir, file });
    const caps = {
      engine: 'cpu' as const,
      name: 'n'.repeat(64),
      adapter: 'a'.repeat(256),
      contributorId: 'c'.repeat(64),
      tokensPerSec: 1e12,
      maxBatch: 65536,
    };
    const hostileHello = async (k: number) => {
      const r = await ts.server.run.islands.join({
        caps: { ...caps, name: `hostile-${k}` },
        protocolVersion: PROTOCOL_VERSION,
      });
      if (!r.ok) throw new Error(r.error.message);
      ts.server.run.islands.leave(r.value.islandId, 'gone'); // hello, then vanish
      if (k % 100 === 99) await ts.server.run.drain(); // hellos arrive over time, commits between them
    };
    for (let k = 0; k < 1000; k++) await hostileHello(k);
    const ck1000 = await ts.server.run.checkpointNow();
    for (let k = 1000; k < 10_000; k++) await hostileHello(k);
    const ck10000 = await ts.server.run.checkpointNow();

    expect(ts.server.run.coord.islands().length).toBeLessThanOrEqual(RECORDS);
    // the checkpoint holds at most RECORDS records, so 9,000 more hellos do not grow it
    expect(ck10000.bytes).toBeLessThanOrEqual(ck1000.bytes * 1.05);
    const logs = readdirSync(dir).filter((f) => /^events(\.\d+)?\.jsonl$/.test(f));
    expect(logs.length).toBeLessThanOrEqual(3); // the current log and two rotated ones
    const current = statSync(join(dir, 'events.jsonl')).size;
    expect(current).toBeLessThan(2 * LOG_BYTES);
    expect(existsSync(join(dir, 'events.1.jsonl'))).toBe(false); // the oldest were deleted

    // a restart reads the current log only (its carry line holds the history) and resumes
    const { version, hash } = ts.server.run;
    const points = ts.server.run.views.historySince().length;
    await ts.server.close();
    ts = await startTestServer({ dir, file });
    servers.push(ts);
    expect(ts.server.run.version).toBe(version);
    expect(ts.server.run.hash).toBe(hash);
    expect(ts.server.run.views.historySince().length).toBe(points);
  }, 120_000);

  it('1,000 hellos with junk caps store nothing; hellos are counted per address', async () => {
    const ts = await startTestServer({
      file: { limits: { helloPerMinute: 1_000_000 } },
      gateway: { messagesPerSecond: 1_000_000 },
    });
    servers.push(ts);
    const run = ts.server.run;
    const before = await run.checkpointNow();
    const s = await connect(ts.url);
    const junk = (k: number) => ({
      protocolVersion: PROTOCOL_VERSION,
      caps: { engine: 'cpu', name: `junk-${k}`, [`key${k}`]: 'x'.repeat(2_000), blob: { a: [k, { b: k }] } },
    });
    for (let k = 0; k < 1000; k++) expect((await hello(s, junk(k))).error?.code).toBe('E_BAD_REQUEST');
    s.disconnect();
    expect(run.coord.islands()).toHaveLength(0);
    const after = await run.checkpointNow();
    expect(after.bytes).toBe(before.bytes);

    // one address, a budget of 10 hellos a minute: the 11th is refused before it is read
    const limited = await startTestServer({
      file: { limits: { helloPerMinute: 10 } },
      gateway: { messagesPerSecond: 1_000_000 },
    });
    servers.push(limited);
    const t = await connect(limited.url);
    const codes: string[] = [];
    for (let k = 0; k < 12; k++) codes.push((await hello(t, junk(k))).error?.code ?? 'ok');
    t.disconnect();
    expect(codes.slice(0, 10).every((c) => c === 'E_BAD_REQUEST')).toBe(true);
    expect(codes.slice(10)).toEqual(['E_RATE_LIMIT', 'E_RATE_LIMIT']);
  });
});
