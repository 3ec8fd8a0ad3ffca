// `atoll serve --redis URL --role gateway|aggregator`: one aggregator (the real Run: coordinator,
// sync rounds, run folder) and two gateways as child processes on a redis-server of their own, a
// Node island (CPU engine, tiny preset) on each gateway. Both islands get every update (each
// applied and hash-checked by the island) and agree on θ; the aggregator counts both islands'
// tokens. Then gateway A is killed with SIGKILL: its island fails over to B with its identity
// (`--server A,B`) and its deltas keep being applied.

import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type RedisProc, startRedis } from '../server/cluster/redis-proc.ts';
import type { IslandView } from '../core/api.ts';
import { type IslandProc, type Proc, ROOT, freePort, getJson, spawnIsland, spawnServe, tempDir, track, waitFor } from './helpers/server.ts';

describe('atoll serve --redis --role: two gateways, one aggregator', () => {
  let redis: RedisProc | null = null;
  let dir = '';
  const procs: Proc[] = [];

  afterAll(async () => {
    for (const p of procs.reverse()) await p.kill9();
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('islands on both gateways get every update, agree on θ, and fail over with their identity', async () => {
    redis = await startRedis();
    dir = tempDir('atoll-roles-');
    const common = ['--redis', redis.url, '--name', 'roles'];
    const agg = track(spawn(process.execPath, [join(ROOT, 'bin/atoll.js'), 'serve', ...common, '--role', 'aggregator', '--run-dir', dir, '--preset', 'tiny', '--inner-steps', '2', '--no-eval'], {
      cwd: ROOT, env: { ...process.env, ATOLL_ADMIN_TOKEN: 'test-admin-token' }, stdio: ['ignore', 'pipe', 'pipe'],
    }), 'aggregator');
    procs.push(agg);
    await waitFor('the aggregator to hold the lease', () => agg.output.some((l) => l.includes('aggregator active')), 60_000);
    const ga = await spawnServe([...common, '--role', 'gateway'], await freePort());
    const gb = await spawnServe([...common, '--role', 'gateway'], await freePort());
    procs.push(ga, gb);
    const a = spawnIsland(`${ga.url},${gb.url}`, 'a');
    const b = spawnIsland(`${gb.url},${ga.url}`, 'b');
    procs.push(a, b);
    const applied = (i: IslandProc) => i.report.acks.filter((x) => x.status === 'applied').length;
    await waitFor('3 applied deltas from each island', () => applied(a) >= 3 && applied(b) >= 3, 120_000);

    // every update reached both islands, hash-checked, and they agree on θ at every version
    const byVersion = (i: IslandProc) => new Map(i.report.synced.filter((s) => s.via === 'update').map((s) => [s.version, s.hash]));
    const [ua, ub] = [byVersion(a), byVersion(b)];
    const top = Math.min(Math.max(...ua.keys()), Math.max(...ub.keys()));
    expect(top).toBeGreaterThanOrEqual(3);
    for (let v = 1; v <= top; v++) {
      expect(ua.get(v), `island a at version ${v}`).toBeDefined();
      expect(ua.get(v)).toBe(ub.get(v));
    }
    // both gateways answer with the aggregator's durable θ, and its API counts both islands' tokens
    await waitFor('both gateways at one version', async () => {
      const [ha, hb] = await Promise.all([getJson<{ version: number; hash: string }>(`${ga.url}/healthz`), getJson<{ version: number; hash: string }>(`${gb.url}/healthz`)]);
      return ha.version === hb.version && ha.hash === hb.hash && ha.version >= top;
    }, 30_000);
    const { islands } = await getJson<{ islands: IslandView[] }>(`${gb.url}/api/islands`);
    expect(islands.map((i) => i.name).sort()).toEqual(['a', 'b']);
    for (const i of islands) {
      expect(i.tokens).toBeGreaterThan(0);
      expect(i.connected).toBe(true);
    }
    const status = await getJson<{ tokensTotal: number }>(`${ga.url}/api/status`);
    expect(status.tokensTotal).toBeGreaterThanOrEqual(islands.reduce((s, i) => s + i.tokens, 0) - 4096);

    // gateway A dies: island a resumes its identity through B and goes on
    const id = a.report.islandId;
    await ga.kill9();
    const before = applied(a);
    await waitFor('2 more applied deltas from island a through gateway B', () => applied(a) >= before + 2, 120_000);
    expect(a.report.islandId).toBe(id);
    expect(a.report.resumes).toBeGreaterThan(0);
    const after = await getJson<{ islands: IslandView[] }>(`${gb.url}/api/islands`);
    expect(after.islands.map((i) => i.id).sort()).toEqual(islands.map((i) => i.id).sort());
  }, 240_000);
});
