// Strict input and one error shape over HTTP, and failed auth slowed per address (issue 23, items
// 3, 4, 8 and 9): no coercion of admin patches ({"outerLr": null}, "0.5", true, [0.25] → 400,
// nothing changes), no NaN/±Infinity in query strings, 405 for a wrong method, 429 E_RATE_LIMIT,
// 600 wrong admin or validator tokens from one address slowed and logged while the right token
// still works from another address. In-process (fastify.inject) where no socket is needed.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { io } from 'socket.io-client';
import { ConfigPatchSchema } from '../server/plugins/admin.ts';
import { FREE_FAILURES } from '../server/plugins/auth-limit.ts';
import { type TestServer, startTestServer } from './helpers/server.ts';

const TOKEN = 'strict-admin-token';
let ts: TestServer;
let from = 0;
/** A fresh address per call unless given: the REST limit and the auth back-off count per address. */
const call = async (
  method: string,
  url: string,
  o: { auth?: string; body?: unknown; raw?: string; address?: string } = {},
) => {
  const payload = o.raw ?? (o.body !== undefined ? JSON.stringify(o.body) : undefined);
  const r = await ts.server.app.inject({
    method: method as 'GET',
    url,
    remoteAddress: o.address ?? `10.9.${(++from >> 8) & 255}.${from & 255}`,
    headers: {
      ...(o.auth ? { authorization: `Bearer ${o.auth}` } : {}),
      ...(payload !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(payload !== undefined ? { payload } : {}),
  });
  return {
    status: r.statusCode,
    headers: r.headers,
    body: r.json() as { error?: { code: string; message: string } } & Record<string, unknown>,
  };
};

beforeAll(async () => {
  ts = await startTestServer({
    adminToken: TOKEN,
    file: { limits: { restPerMinute: 50, helloPerMinute: 120, maxIslands: 100, maxLogBytes: 1 << 20 } },
    audit: { token: 'validator-token' },
    gateway: { messagesPerSecond: 100_000 },
    outerWorkers: 0,
  });
});
afterAll(async () => {
  await ts?.close();
});

describe('strict admin patches', () => {
  it('{"outerLr": null} and every wrong type answer 400 E_BAD_REQUEST; θ and the config do not change', async () => {
    const run = ts.server.run;
    const before = {
      config: JSON.stringify(run.coord.config()),
      hash: run.coord.hash,
      stored: JSON.stringify(run.store.readConfig()),
    };
    const wrong: unknown[] = [null, '0.5', true, [0.25], {}, 'NaN', 'Infinity'];
    const keys = Object.keys(ConfigPatchSchema.properties);
    expect(keys.length).toBeGreaterThanOrEqual(7);
    for (const key of keys) {
      for (const v of wrong) {
        const r = await call('PATCH', '/api/admin/config', { auth: TOKEN, body: { [key]: v } });
        expect(r.status, `${key}: ${JSON.stringify(v)}`).toBe(400);
        expect(r.body.error?.code).toBe('E_BAD_REQUEST');
      }
    }
    // JSON cannot carry NaN or Infinity; as text they are not JSON
    for (const raw of [
      '{"outerLr": NaN}',
      '{"outerLr": Infinity}',
      '{"outerLr": -Infinity}',
      '{"outerLr": 1e400}',
      '{"outerLr":',
    ]) {
      const r = await call('PATCH', '/api/admin/config', { auth: TOKEN, raw });
      expect(r.status, raw).toBe(400);
      expect(r.body.error?.code, raw).toMatch(/^E_BAD_/);
    }
    expect(JSON.stringify(run.coord.config())).toBe(before.config);
    expect(run.coord.hash).toBe(before.hash);
    expect(JSON.stringify(run.store.readConfig())).toBe(before.stored);
    // a run with validators refuses an uplink they cannot audit, and nothing changes
    const sparse = await call('PATCH', '/api/admin/config', { auth: TOKEN, body: { codec: 'sparse' } });
    expect([sparse.status, sparse.body.error?.code]).toEqual([400, 'E_BAD_CONFIG']);
    expect(JSON.stringify(run.coord.config())).toBe(before.config);
    // the right type still works
    expect((await call('PATCH', '/api/admin/config', { auth: TOKEN, body: { outerLr: 0.5 } })).status).toBe(200);
    expect(run.coord.config().outer.lr).toBe(0.5);
  });
});

describe('numbers and errors', () => {
  it('NaN and ±Infinity are refused in query strings, with { error: { code, message } }', async () => {
    for (const url of [
      '/api/sample?temperature=-Infinity',
      '/api/sample?tokens=Infinity',
      '/api/sample?temperature=NaN',
      '/api/sample?seed=0x10',
      '/api/history?since=-Infinity',
      '/api/history?since=NaN',
      '/api/history?limit=1e400',
      '/api/history?since=',
      '/api/history?since=1&since=2',
      '/api/islands?offset=-1',
      '/api/islands?limit=100000',
      '/api/history?nope=1',
    ]) {
      const r = await call('GET', url);
      expect(r.status, url).toBe(400);
      expect(r.body.error?.code, url).toBe('E_BAD_REQUEST');
      expect(typeof r.body.error?.message).toBe('string');
    }
    expect((await call('GET', '/api/history?since=-1&limit=5')).status).toBe(200);
  });

  it('a wrong method is 405 with Allow; an unknown path 404; both in the error shape', async () => {
    const r = await call('DELETE', '/api/status');
    expect(r.status).toBe(405);
    expect(r.body.error?.code).toBe('E_METHOD');
    expect(String(r.headers.allow)).toContain('GET');
    const p = await call('PUT', '/api/admin/pause', { auth: TOKEN });
    expect(p.status).toBe(405);
    expect(String(p.headers.allow)).toContain('POST');
    const n = await call('GET', '/api/nothing-here');
    expect(n.status).toBe(404);
    expect(n.body.error?.code).toBe('E_NOT_FOUND');
  });

  it('past limits.restPerMinute an address gets 429 E_RATE_LIMIT', async () => {
    const codes: number[] = [];
    let last: Awaited<ReturnType<typeof call>> | null = null;
    for (let i = 0; i < 55; i++) {
      last = await call('GET', '/api/status', { address: '10.200.0.1' });
      codes.push(last.status);
    }
    expect(codes.filter((c) => c === 200)).toHaveLength(50);
    expect(last!.status).toBe(429);
    expect(last!.body.error?.code).toBe('E_RATE_LIMIT');
    expect((await call('GET', '/api/status', { address: '10.200.0.2' })).status).toBe(200);
  });
});

describe('failed auth is slowed per address and logged', () => {
  it('600 wrong admin tokens from one address: 401 for the first few, then 429; the right token works from another address', async () => {
    const limiter = ts.server.adminAuth;
    const failures0 = limiter.stats.failures;
    const statuses: number[] = [];
    const t0 = performance.now();
    for (let i = 0; i < 600; i++)
      statuses.push((await call('POST', '/api/admin/pause', { auth: `wrong-${i}`, address: '10.66.0.1' })).status);
    const ms = performance.now() - t0;
    expect(statuses.filter((s) => s === 401)).toHaveLength(FREE_FAILURES + 1);
    expect(statuses.filter((s) => s === 429)).toHaveLength(600 - FREE_FAILURES - 1);
    expect(limiter.stats.failures - failures0).toBe(FREE_FAILURES + 1);
    expect(limiter.recent.at(-1)).toMatch(/wrong admin token from 10\.66\.0\.1 .*locked out for 1000 ms/);
    // locked: even the right token waits at that address; from another one it acts at once
    expect((await call('GET', '/api/admin/whoami', { auth: TOKEN, address: '10.66.0.1' })).status).toBe(429);
    expect((await call('GET', '/api/admin/whoami', { auth: TOKEN, address: '10.66.0.2' })).status).toBe(200);
    expect(ts.server.run.coord.isPaused).toBe(false);
    console.log(`600 wrong admin tokens from one address: ${ms.toFixed(0)} ms, ${FREE_FAILURES + 1} compared`);
  });

  it('600 wrong validator tokens from one address: E_NOT_VALIDATOR for the first few, then E_RATE_LIMIT; each checked failure logged', async () => {
    const s = io(`${ts.url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
    try {
      await new Promise<void>((r) => s.on('connect', () => r()));
      const codes: string[] = [];
      for (let i = 0; i < 600; i++)
        codes.push(
          ((await s.emitWithAck('validator', { token: `guess-${i}` })) as { error: { code: string } }).error.code,
        );
      expect(codes.filter((c) => c === 'E_NOT_VALIDATOR')).toHaveLength(FREE_FAILURES + 1);
      expect(codes.filter((c) => c === 'E_RATE_LIMIT')).toHaveLength(600 - FREE_FAILURES - 1);
      const auth = ts.server.gateway.validatorAuth;
      expect(auth.stats.failures).toBe(FREE_FAILURES + 1);
      expect(auth.recent.filter((l) => l.startsWith('auth: wrong validator token'))).toHaveLength(FREE_FAILURES + 1);
      // even the right token waits out the lock at this address
      expect(
        ((await s.emitWithAck('validator', { token: 'validator-token' })) as { error: { code: string } }).error.code,
      ).toBe('E_RATE_LIMIT');
    } finally {
      s.disconnect();
    }
  });
});
