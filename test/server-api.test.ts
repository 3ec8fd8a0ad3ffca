// REST surface: admin auth (no token / wrong token → 401 and nothing changes; the right token works
// and is durable), the public read-only routes, caching headers, security headers, CORS closed.

import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { io } from 'socket.io-client';
import { decodeCheckpoint } from '../core/checkpoint.ts';
import { hashParams } from '../core/coord/index.ts';
import { PROTOCOL_VERSION } from '../core/protocol.ts';
import { creditOf } from '../core/credit.ts';
import { runInfo } from '../server/plugins/api.ts';
import { type TestServer, getJson, startTestServer } from './helpers/server.ts';

const TOKEN = 'the-right-token';

describe('REST API and admin auth', () => {
  let ts: TestServer;
  let islandId = '';
  const sockets: Array<ReturnType<typeof io>> = [];

  beforeAll(async () => {
    ts = await startTestServer({ adminToken: TOKEN });
    // one island, so there is something to ban
    const s = io(`${ts.url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
    sockets.push(s);
    const r = await new Promise<{ ok: boolean; value: { islandId: string } }>((resolve) => {
      s.on('connect', () =>
        s.emit('hello', { protocolVersion: PROTOCOL_VERSION, caps: { engine: 'cpu', name: 'victim' } }, resolve),
      );
    });
    islandId = r.value.islandId;
  });
  afterAll(async () => {
    for (const s of sockets) s.disconnect();
    await ts?.close();
  });

  // in-process requests (fastify.inject), from `address`: wrong tokens lock their address out (auth-limit.ts)
  const admin = async (method: string, path: string, auth: string | null, body?: unknown, address = '127.0.0.1') => {
    const r = await ts.server.app.inject({
      method: method as 'GET',
      url: path,
      remoteAddress: address,
      headers: {
        ...(auth !== null ? { authorization: auth } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { payload: JSON.stringify(body) } : {}),
    });
    return { status: r.statusCode, headers: r.headers, json: async () => r.json() as unknown };
  };
  let wrongFrom = 0;

  it('admin routes without the token, or with a wrong one, are 401 and change nothing', async () => {
    const run = ts.server.run;
    const before = {
      paused: run.coord.isPaused,
      config: JSON.stringify(run.coord.config()),
      checkpoints: run.store.listCheckpoints().length,
      island: run.coord.island(islandId)!.status,
      version: run.version,
    };
    const calls: Array<[string, string, unknown?]> = [
      ['POST', '/api/admin/pause'],
      ['POST', '/api/admin/resume'],
      ['POST', '/api/admin/checkpoint'],
      ['PATCH', '/api/admin/config', { outerLr: 0.1 }],
      ['POST', `/api/admin/islands/${islandId}/ban`, {}],
      ['GET', '/api/admin/whoami'],
    ];
    const auths = [
      null,
      '',
      'Bearer',
      'Bearer ',
      'Bearer wrong',
      `Bearer ${TOKEN}x`,
      `Bearer ${TOKEN.slice(0, -1)}`,
      `Basic ${Buffer.from(`admin:${TOKEN}`).toString('base64')}`,
      TOKEN,
      `bearer  ${TOKEN} extra`,
    ];
    for (const [method, path, body] of calls) {
      for (const auth of auths) {
        const r = await admin(method, path, auth, body, `10.1.0.${++wrongFrom % 250}`);
        expect(r.status, `${method} ${path} with ${auth}`).toBe(401);
        expect(((await r.json()) as { error: { code: string } }).error.code).toBe('E_UNAUTHORIZED');
      }
    }
    expect(run.coord.isPaused).toBe(before.paused);
    expect(JSON.stringify(run.coord.config())).toBe(before.config);
    expect(run.store.listCheckpoints().length).toBe(before.checkpoints);
    expect(run.coord.island(islandId)!.status).toBe(before.island);
    expect(run.version).toBe(before.version);
  });

  it('the right token pauses, resumes, changes validated hyperparameters, checkpoints and bans', async () => {
    const run = ts.server.run;
    const auth = `Bearer ${TOKEN}`;
    expect((await admin('GET', '/api/admin/whoami', auth)).status).toBe(200);
    expect((await admin('POST', '/api/admin/pause', auth)).status).toBe(200);
    expect((await getJson<{ paused: boolean }>(`${ts.url}/api/status`)).paused).toBe(true);
    expect((await admin('POST', '/api/admin/resume', auth)).status).toBe(200);
    expect((await getJson<{ paused: boolean }>(`${ts.url}/api/status`)).paused).toBe(false);

    const ok = await admin('PATCH', '/api/admin/config', auth, {
      outerLr: 0.5,
      outerMomentum: 0.8,
      quorum: 0.5,
      maxStaleness: 3,
      codec: 'int4',
      roundTime: 12,
    });
    expect(ok.status).toBe(200);
    const cfg = run.coord.config();
    expect(cfg.outer).toMatchObject({ lr: 0.5, momentum: 0.8 });
    expect(cfg.quorum).toBe(0.5);
    expect(cfg.maxStaleness).toBe(3);
    expect(cfg.uplink.encoding).toBe('int4');
    expect(cfg.targetRoundMs).toBe(12_000);
    // persisted in config.json (so a restart keeps it)
    expect(run.store.readConfig<{ coordinator: { outer: { lr: number } } }>()!.coordinator.outer.lr).toBe(0.5);
    for (const bad of [
      {},
      { outerLr: -1 },
      { outerLr: 'fast' },
      { quorum: 2 },
      { codec: 'zip' },
      { maxStaleness: 1.5 },
      { mode: 'async' },
      { outerMomentum: 1 },
      [],
      'x',
    ]) {
      const r = await admin('PATCH', '/api/admin/config', auth, bad);
      expect(r.status, JSON.stringify(bad)).toBe(400);
    }
    expect(run.coord.config().outer.lr).toBe(0.5);

    const n0 = run.store.listCheckpoints().length;
    const ck = await admin('POST', '/api/admin/checkpoint', auth);
    expect(ck.status).toBe(200);
    const ckBody = (await ck.json()) as { version: number; path: string };
    expect(existsSync(ckBody.path)).toBe(true);
    // the list names each checkpoint's θ hash, read from its metadata
    const listed = await getJson<{ checkpoints: Array<{ version: number; hash: string | null }> }>(
      `${ts.url}/api/checkpoints`,
    );
    const mine = listed.checkpoints.find((c) => c.version === ckBody.version);
    expect(mine?.hash).toBe(run.coord.hash);
    expect(run.store.listCheckpoints().length).toBeGreaterThanOrEqual(Math.min(n0, 1));

    expect((await admin('POST', '/api/admin/islands/island-404/ban', auth, {})).status).toBe(404);
    const ban = await admin('POST', `/api/admin/islands/${islandId}/ban`, auth, { reason: 'test' });
    expect(ban.status).toBe(200);
    expect(run.coord.island(islandId)!.status).toBe('banned');
    // the banned island's connection is closed, and it cannot come back under its id
    await new Promise((r) => setTimeout(r, 200));
    expect(sockets[0].connected).toBe(false);
  });

  it('serves the public read-only API', async () => {
    const base = ts.url;
    const st = await getJson<Record<string, unknown>>(`${base}/api/status`);
    for (const k of [
      'run',
      'mode',
      'version',
      'hash',
      'paused',
      'islandsOnline',
      'tokensTotal',
      'tokensPerSec',
      'evalLoss',
      'bytesIn',
      'bytesOut',
    ])
      expect(st).toHaveProperty(k);
    const run = await getJson<{
      params: number;
      model: { nEmbd: number };
      codec: { encoding: string };
      bytesPerRound: { up: number; down: number };
      protocolVersion: number;
    }>(`${base}/api/run`);
    expect(run.params).toBe(ts.server.run.paramCount);
    expect(run.model.nEmbd).toBe(32);
    expect(run.bytesPerRound.up).toBeGreaterThan(0);
    expect(run.protocolVersion).toBe(PROTOCOL_VERSION);

    // the model: safetensors, ETag = θ hash, If-None-Match → 304
    const m = await fetch(`${base}/api/model`);
    expect(m.status).toBe(200);
    const etag = m.headers.get('etag')!;
    const ck = decodeCheckpoint(new Uint8Array(await m.arrayBuffer()));
    if (!ck.ok) throw new Error(ck.error.message);
    expect(etag).toBe(`"${hashParams(ck.value.params)}"`);
    expect(ck.value.meta.hash).toBe(st.hash);
    expect((await fetch(`${base}/api/model`, { headers: { 'if-none-match': etag } })).status).toBe(304);

    const d = await fetch(`${base}/api/data/train`);
    expect(d.status).toBe(200);
    expect((await d.arrayBuffer()).byteLength).toBe(ts.server.run.dataset.train.length);
    expect(d.headers.get('cache-control')).toMatch(/max-age/);
    expect(
      (await fetch(`${base}/api/data/train`, { headers: { 'if-none-match': d.headers.get('etag')! } })).status,
    ).toBe(304);

    const { checkpoints } = await getJson<{ checkpoints: Array<{ version: number; url: string }> }>(
      `${base}/api/checkpoints`,
    );
    expect(checkpoints.length).toBeGreaterThan(0);
    const one = await fetch(`${base}${checkpoints[0].url}`);
    expect(one.status).toBe(200);
    expect(decodeCheckpoint(new Uint8Array(await one.arrayBuffer())).ok).toBe(true);
    expect((await fetch(`${base}/api/checkpoints/999999`)).status).toBe(404);
    expect((await fetch(`${base}/api/checkpoints/..%2Fconfig.json`)).status).toBe(400);

    const sample = await getJson<{ text: string; version: number }>(`${base}/api/sample?tokens=16&prompt=Call%20me`);
    expect(sample.text.length).toBeGreaterThan(0);
    expect((await fetch(`${base}/api/sample?tokens=abc`)).status).toBe(400);

    const h = await getJson<{ points: unknown[] }>(`${base}/api/history`);
    expect(h.points.length).toBeGreaterThan(0);
    const isl = await getJson<{ islands: Array<{ id: string }> }>(`${base}/api/islands`);
    expect(isl.islands.some((i) => i.id === islandId)).toBe(true);
    expect((await getJson<{ ok: boolean }>(`${base}/healthz`)).ok).toBe(true);
    expect(await (await fetch(`${base}/metrics`)).text()).toMatch(/atoll_model_version/);
    expect((await fetch(`${base}/api/nope`)).status).toBe(404);
  });

  // Response schemas (core/api.ts) decide what fast-json-stringify writes: a field the server
  // computes but the schema forgets would vanish from the wire. Compare each body with the server's own value.
  it('every JSON route writes all the fields the server computes, and refuses input it does not take', async () => {
    const views = ts.server.run.views;
    const shape = (v: unknown): unknown =>
      Array.isArray(v)
        ? v.length
          ? [shape(v[0])]
          : []
        : v !== null && typeof v === 'object'
          ? Object.fromEntries(
              Object.entries(v)
                .filter(([, x]) => x !== undefined)
                .sort(([a], [b]) => a.localeCompare(b))
                .map(([k, x]) => [k, shape(x)]),
            )
          : v === null
            ? 'null'
            : typeof v;
    const wire = async (path: string) => (await ts.server.app.inject({ method: 'GET', url: path })).json() as unknown;
    expect(await wire('/api/run')).toEqual(JSON.parse(JSON.stringify(runInfo(ts.server.run))));
    expect(shape(await wire('/api/status'))).toEqual(shape(views.status()));
    const isl = views.islands();
    expect(isl.length).toBeGreaterThan(0);
    expect(shape(await wire('/api/islands'))).toEqual(shape(views.islandsPage()));
    expect(shape(await wire(`/api/islands/${islandId}`))).toEqual(
      shape({
        island: isl.find((i) => i.id === islandId),
        contributions: ts.server.run.history.islands.contributions(islandId),
      }),
    );
    expect(shape(await wire('/api/history'))).toEqual(
      shape({ points: views.historySince(), configChanges: ts.server.run.history.configChanges }),
    );
    expect(await wire('/api/checkpoints')).toEqual({ checkpoints: views.checkpoints() });
    expect(await wire(`/api/contributors/${isl[0].contributorId}`)).toEqual(creditOf(isl, isl[0].contributorId));
    // routes that take no input refuse a query key, with the one error shape
    expect(await wire('/healthz')).toEqual({ ok: true, version: ts.server.run.version, hash: ts.server.run.hash });
    for (const path of [
      '/api/status',
      '/api/run',
      '/api/model',
      '/api/checkpoints',
      `/api/islands/${islandId}`,
      '/healthz',
      '/metrics',
    ]) {
      const r = await ts.server.app.inject({ method: 'GET', url: `${path}?x=1` });
      expect([path, r.statusCode, (r.json() as { error: { code: string } }).error.code]).toEqual([
        path,
        400,
        'E_BAD_REQUEST',
      ]);
    }
  });

  it('sends security headers, keeps CORS closed and refuses foreign socket.io origins', async () => {
    const r = await fetch(`${ts.url}/`, { headers: { origin: 'https://evil.example' } });
    expect(r.status).toBe(200);
    const csp = r.headers.get('content-security-policy')!;
    // scripts from this origin only; WebAssembly may compile (the CPU engine), JS eval may not
    expect(csp).toMatch(/script-src 'self' 'wasm-unsafe-eval'(;|$)/);
    expect(csp).toMatch(/worker-src 'self' blob:/);
    expect(csp).toMatch(/connect-src 'self' ws:\/\/127\.0\.0\.1:\d+ wss:\/\/127\.0\.0\.1:\d+/);
    expect(r.headers.get('x-content-type-options')).toBe('nosniff');
    // cross-origin isolated: the page's Wasm engine shares memory with its threads
    expect(r.headers.get('cross-origin-opener-policy')).toBe('same-origin');
    expect(r.headers.get('cross-origin-embedder-policy')).toBe('require-corp');
    expect(r.headers.get('access-control-allow-origin')).toBeNull();
    const api = await fetch(`${ts.url}/api/status`, { headers: { origin: 'https://evil.example' } });
    expect(api.headers.get('access-control-allow-origin')).toBeNull();
    // socket.io refuses a browser from another origin
    const s = io(`${ts.url}/island`, {
      transports: ['websocket'],
      reconnection: false,
      forceNew: true,
      extraHeaders: { origin: 'https://evil.example' },
    });
    const refused = await new Promise<boolean>((resolve) => {
      s.on('connect', () => resolve(false));
      s.on('connect_error', () => resolve(true));
    });
    s.disconnect();
    expect(refused).toBe(true);
  });

  it('keeps the last K checkpoints, atomically written', () => {
    const dir = join(ts.dir, 'checkpoints');
    const files = readdirSync(dir);
    expect(files.every((f) => /^v\d{8}\.safetensors$/.test(f))).toBe(true); // no temp files left
  });
});
