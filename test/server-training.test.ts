// A real server (in-process, real socket.io, run folder in a temp dir) and three Node islands as
// child processes (CPU engine, tiny model, short rounds): eval loss goes down over ≥ 5 outer
// updates, and /api/status, /api/islands, /api/history and the dashboard stream tell the truth.
// Then one island is frozen mid-round (SIGSTOP: its socket stays open) and the sync round still
// closes by the grace window; a SIGKILLed island does not stall the rounds either.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { io } from 'socket.io-client';
import {
  type IslandProc,
  type TestServer,
  getJson,
  sleep,
  spawnIsland,
  startTestServer,
  waitFor,
} from './helpers/server.ts';

interface Status {
  version: number;
  hash: string;
  islandsOnline: number;
  tokensTotal: number;
  evalLoss: number | null;
  evalVersion: number | null;
  mode: string;
  paused: boolean;
  bytesIn: number;
  bytesOut: number;
}
interface Island {
  id: string;
  name: string;
  engine: string;
  status: string;
  connected: boolean;
  accepted: number;
  tokens: number;
  speed: number | null;
  innerSteps: number;
  lastSeen: number;
}
interface Point {
  version: number;
  evalLoss: number | null;
  trainLoss: number | null;
  tokens: number;
  totalTokens: number;
  islandsOnline: number;
  tokensByEngine: Record<string, number>;
  tokensPerSecByEngine: Record<string, number>;
}

describe('server + 3 Node islands', () => {
  let ts: TestServer;
  const islands: IslandProc[] = [];

  beforeAll(async () => {
    ts = await startTestServer({
      // sync rounds with a quorum and grace window (the former default, int8 both ways)
      flags: { mode: 'sync', codec: 'int8' },
      evaluate: true,
      file: {
        eval: { batches: 4, batchSize: 8 },
        coordinator: {
          innerSteps: 5,
          minInnerSteps: 3,
          maxInnerSteps: 5,
          quorum: 0.6,
          grace: { factor: 1.5, floorMs: 1000, capMs: 6000 },
          innerLr: { maxLr: 3e-3, minLr: 1e-3 },
        },
      },
    });
    for (const name of ['alpha', 'beta', 'gamma']) islands.push(spawnIsland(ts.url, name));
  });

  afterAll(async () => {
    await Promise.all(islands.map((i) => i.kill9()));
    await ts?.close();
  });

  it('trains: eval loss goes down over ≥ 5 outer updates, and the API tells the truth', async () => {
    const base = ts.url;
    const dash = io(`${base}/dashboard`, { transports: ['websocket'] });
    const ticks: number[] = [];
    dash.on('tick', () => ticks.push(Date.now()));
    try {
      await waitFor(
        '3 islands online',
        async () => (await getJson<Status>(`${base}/api/status`)).islandsOnline === 3,
        60_000,
      );
      await waitFor(
        '6 outer updates',
        async () => (await getJson<Status>(`${base}/api/status`)).version >= 6,
        90_000,
        250,
      );
      await ts.server.run.evalIdle();
      await waitFor(
        'an eval of version ≥ 5',
        async () => ((await getJson<Status>(`${base}/api/status`)).evalVersion ?? 0) >= 5,
        30_000,
      );

      const { points } = await getJson<{ points: Point[] }>(`${base}/api/history`);
      const evals = points.filter((p) => p.evalLoss !== null);
      expect(evals[0].version).toBe(0);
      const first = evals[0].evalLoss!;
      const last = evals[evals.length - 1];
      expect(last.version).toBeGreaterThanOrEqual(5);
      expect(last.evalLoss!).toBeLessThan(first - 0.5); // 5.54 (uniform-ish) → well below
      expect(points.every((p, i) => i === 0 || p.version === points[i - 1].version + 1)).toBe(true);
      // every update's tokens are attributed to the contributors' engine (all CPU here)
      for (const p of points.slice(1)) {
        expect(p.tokensByEngine).toEqual({ cpu: p.tokens });
        expect(p.tokensPerSecByEngine.cpu).toBeGreaterThan(0);
      }

      // status: the durable version and hash, the real number of islands, tokens = sum over islands
      // (the islands still train: a version may become durable while the request is in flight)
      const run = ts.server.run;
      await run.drain();
      const durableBefore = run.version;
      const st = await getJson<Status>(`${base}/api/status`);
      expect(st.mode).toBe('sync');
      expect(st.version).toBeGreaterThanOrEqual(durableBefore);
      expect(st.version).toBeLessThanOrEqual(run.version);
      if (st.version === run.version) expect(st.hash).toBe(run.hash);
      expect(st.islandsOnline).toBe(3);
      expect(st.paused).toBe(false);
      expect(st.bytesIn).toBeGreaterThan(0);
      expect(st.bytesOut).toBeGreaterThan(0);
      // /api/islands serves a copy up to ISLANDS_REFRESH_MS old (a bounded cost under polling): take a fresh one
      run.views.invalidate();
      const { islands: list } = await getJson<{ islands: Island[] }>(`${base}/api/islands`);
      expect(list.map((i) => i.name).sort()).toEqual(['alpha', 'beta', 'gamma']);
      for (const i of list) {
        expect(i.status).toBe('online');
        expect(i.connected).toBe(true);
        expect(i.engine).toBe('cpu');
        expect(i.accepted).toBeGreaterThan(0);
        expect(i.innerSteps).toBeGreaterThanOrEqual(3);
        expect(i.speed).toBeGreaterThan(0);
      }
      expect(list.reduce((a, i) => a + i.tokens, 0)).toBe(st.tokensTotal);
      // every island's acks name versions the log holds, and θ's hash at each is what was broadcast
      // (an ack leaves once its update is durable and reaches the test through the child's stdout:
      // an island whose first delta went into the latest update may not have printed it yet)
      await waitFor('an ack at every island', () => islands.every((i) => i.report.acks.length > 0), 15_000, 50);
      for (const isl of islands) {
        expect(isl.report.acks.every((a) => a.status === 'applied' && a.version <= st.version)).toBe(true);
      }
      // the dashboard stream: live, at most 2 messages per second
      await sleep(2500);
      expect(ticks.length).toBeGreaterThan(2);
      const span = (ticks[ticks.length - 1] - ticks[0]) / 1000;
      expect((ticks.length - 1) / Math.max(span, 1e-3)).toBeLessThanOrEqual(2.2);
      // Prometheus
      const metrics = await (await fetch(`${base}/metrics`)).text();
      expect(metrics).toMatch(/atoll_islands_online 3/);
      expect(metrics).toMatch(new RegExp(`atoll_model_version ${run.version}`));
      expect(metrics).toMatch(/atoll_deltas_accepted_total [1-9]/);
      expect(metrics).toMatch(/nodejs_eventloop_lag_seconds/);
    } finally {
      dash.disconnect();
    }
  });

  it('a frozen island (socket still open) does not stall a sync round: the grace window closes it', async () => {
    const run = ts.server.run;
    const gamma = islands[2];
    // freeze gamma right after an update, i.e. mid-round
    const v0 = run.version;
    await waitFor('the next update', () => run.version > v0, 30_000, 20);
    gamma.child.kill('SIGSTOP');
    const frozenAt = Date.now();
    try {
      const v1 = run.version;
      await waitFor('a round to close without the frozen island', () => run.version >= v1 + 2, 30_000, 50);
      // well before socket.io's ping timeout (20 s) would have dropped the frozen connection
      expect(Date.now() - frozenAt).toBeLessThan(20_000);
      expect(run.islandsOnline()).toBe(3);
    } finally {
      gamma.child.kill('SIGCONT');
    }
  });

  it('a SIGKILLed island leaves, and the others keep training', async () => {
    const run = ts.server.run;
    const beta = islands[1];
    await beta.kill9();
    await waitFor('beta to be seen leaving', () => run.islandsOnline() === 2, 30_000, 50);
    const v = run.version;
    await waitFor('two more updates with two islands', () => run.version >= v + 2, 30_000, 50);
    const { islands: list } = await getJson<{ islands: Island[] }>(`${ts.url}/api/islands`);
    expect(list.find((i) => i.name === 'beta')!.connected).toBe(false);
    expect(list.filter((i) => i.connected).length).toBe(2);
  });
});
