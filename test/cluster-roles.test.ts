// `atoll serve --redis URL --role gateway|aggregator`: one aggregator (the real Run: coordinator,
// sync rounds, run folder) and two gateways as child processes on a redis-server of their own, a
// Node island (CPU engine, tiny preset) on each gateway. Both islands get every update (each
// applied and hash-checked by the island) and agree on θ; the aggregator counts both islands'
// tokens. Then gateway A is killed with SIGKILL: its island fails over to B with its identity
// (`--server A,B`) and its deltas keep being applied.
// Aggregator failover: an active aggregator and a `--role all` process (a standby aggregator and a
// gateway) on one run folder; the active one is killed with SIGKILL mid-run: the standby takes the
// lease, reopens the run at its last durable version (no acknowledged update lost), and the islands
// resume with their identities and go on; a call open at the takeover (answered E_TRANSPORT by the
// gateway) is asked again by the island's transport and answered by the new aggregator.

import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { io } from 'socket.io-client';
import { afterAll, describe, expect, it } from 'vitest';
import { SocketIoTransport } from '../client/island/transport-socketio.ts';
import { PROTOCOL_VERSION } from '../core/protocol.ts';
import { type RedisProc, startRedis } from '../server/cluster/redis-proc.ts';
import type { IslandView } from '../core/api.ts';
import {
  type IslandProc,
  type Proc,
  ROOT,
  freePort,
  getJson,
  spawnIsland,
  spawnServe,
  tempDir,
  track,
  waitFor,
} from './helpers/server.ts';

/** An `atoll serve` child that serves no HTTP (an aggregator, active or standby). */
function spawnRole(args: string[], tag: string): Proc {
  return track(
    spawn(process.execPath, [join(ROOT, 'bin/atoll.js'), 'serve', ...args], {
      cwd: ROOT,
      env: { ...process.env, ATOLL_ADMIN_TOKEN: 'test-admin-token' },
      stdio: ['ignore', 'pipe', 'pipe'],
    }),
    tag,
  );
}

const activeAt = (p: Proc) => {
  const m = p.output.map((l) => /aggregator active .* at version (\d+), θ hash (\w+)/.exec(l)).find((x) => x);
  return m ? { version: Number(m[1]), hash: m[2] } : null;
};

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
    // sync rounds and dense (auditable) deltas: the former default this test is about
    const common = ['--redis', redis.url, '--name', 'roles'];
    const sync = ['--mode', 'sync', '--codec', 'int8'];
    const agg = spawnRole(
      [
        ...common,
        '--role',
        'aggregator',
        '--run-dir',
        dir,
        '--preset',
        'tiny',
        '--inner-steps',
        '2',
        '--no-eval',
        ...sync,
        '--validator-token',
        'vt',
        '--audit-rate',
        '1',
      ],
      'aggregator',
    );
    procs.push(agg);
    await waitFor(
      'the aggregator to hold the lease',
      () => agg.output.some((l) => l.includes('aggregator active')),
      60_000,
    );
    const ga = await spawnServe([...common, '--role', 'gateway'], await freePort());
    // B is `--role all`: a gateway, and an aggregator that stays a standby while the first one lives
    const gb = await spawnServe(
      [...common, '--role', 'all', '--run-dir', dir, '--preset', 'tiny', '--inner-steps', '2', '--no-eval', ...sync],
      await freePort(),
    );
    procs.push(ga, gb);
    const a = spawnIsland(`${ga.url},${gb.url}`, 'a');
    const b = spawnIsland(`${gb.url},${ga.url}`, 'b');
    procs.push(a, b);
    const applied = (i: IslandProc) => i.report.acks.filter((x) => x.status === 'applied').length;
    await waitFor('2 applied deltas from each island', () => applied(a) >= 2 && applied(b) >= 2, 120_000);

    // every update after its first snapshot reached each island, hash-checked, and they agree on θ
    const byVersion = (i: IslandProc) =>
      new Map(i.report.synced.filter((s) => s.via === 'update').map((s) => [s.version, s.hash]));
    const [ua, ub] = [byVersion(a), byVersion(b)];
    const joined = Math.max(a.report.synced[0].version, b.report.synced[0].version);
    const top = Math.min(Math.max(...ua.keys()), Math.max(...ub.keys()));
    expect(top).toBeGreaterThan(joined);
    for (let v = joined + 1; v <= top; v++) {
      expect(ua.get(v), `island a at version ${v}`).toBeDefined();
      expect(ua.get(v)).toBe(ub.get(v));
    }
    // both gateways answer with the aggregator's durable θ, and its API counts both islands' tokens
    await waitFor(
      'both gateways at one version',
      async () => {
        const [ha, hb] = await Promise.all([
          getJson<{ version: number; hash: string }>(`${ga.url}/healthz`),
          getJson<{ version: number; hash: string }>(`${gb.url}/healthz`),
        ]);
        return ha.version === hb.version && ha.hash === hb.hash && ha.version >= top;
      },
      30_000,
    );
    // θ through a gateway says which version it is, as the embedded server's does
    const hb = await getJson<{ version: number; hash: string }>(`${gb.url}/healthz`);
    const model = await fetch(`${gb.url}/api/model`);
    expect(model.status).toBe(200);
    // (the run may have moved on since /healthz: a version at least as new, its hash the etag's)
    expect(Number(model.headers.get('x-atoll-version'))).toBeGreaterThanOrEqual(hb.version);
    expect(model.headers.get('x-atoll-hash')).toMatch(/^[0-9a-f]{16}$/);
    expect(model.headers.get('etag')).toBe(`"${model.headers.get('x-atoll-hash')}"`);
    const { islands } = await getJson<{ islands: IslandView[] }>(`${gb.url}/api/islands`);
    expect(islands.map((i) => i.name).sort()).toEqual(['a', 'b']);
    for (const i of islands) {
      expect(i.tokens).toBeGreaterThan(0);
      expect(i.connected).toBe(true);
    }
    // the run's API through either gateway: the admin token, a JSON body, /metrics
    const auth = { authorization: 'Bearer test-admin-token', 'content-type': 'application/json' };
    expect((await fetch(`${ga.url}/api/admin/whoami`)).status).toBe(401);
    const patched = await getJson<{ config: { outer: { lr: number } } }>(`${ga.url}/api/admin/config`, {
      method: 'PATCH',
      headers: auth,
      body: JSON.stringify({ outerLr: 0.6 }),
    });
    expect(patched.config.outer.lr).toBe(0.6);
    expect(await (await fetch(`${gb.url}/metrics`)).text()).toMatch(/atoll_model_version \d+/);
    // verified work through a gateway: the token checked there, the job and the verdict the aggregator's
    const validator = io(`${gb.url}/island`, { transports: ['websocket'] });
    expect((await validator.emitWithAck('validator', { token: 'wrong' })).error.code).toBe('E_NOT_VALIDATOR');
    expect((await validator.emitWithAck('validator', { token: 'vt' })).ok).toBe(true);
    const job = (await validator.emitWithAck('auditJob', {})) as {
      ok: boolean;
      value: { jobId: number; islandId: string; params: ArrayBuffer } | null;
    };
    expect(job.ok).toBe(true);
    expect(islands.map((i) => i.id)).toContain(job.value!.islandId);
    const verdict = await validator.emitWithAck('verdict', { jobId: job.value!.jobId, cosine: 1, normRatio: 1 });
    expect(verdict.value).toMatchObject({ islandId: job.value!.islandId, passed: true });
    validator.disconnect();
    const status = await getJson<{ tokensTotal: number }>(`${ga.url}/api/status`);
    expect(status.tokensTotal).toBeGreaterThanOrEqual(islands.reduce((s, i) => s + i.tokens, 0) - 4096);

    // gateway A dies: island a resumes its identity through B and goes on
    const id = a.report.islandId;
    await ga.kill9();
    expect(gb.output.some((l) => l.includes('aggregator active'))).toBe(false);
    const before = applied(a);
    // (a resume is reported with the next assignment, which may come after the resent delta's ack)
    await waitFor(
      'island a to resume through gateway B and get another delta applied',
      () => applied(a) > before && a.report.resumes > 0,
      120_000,
    );
    expect(a.report.islandId).toBe(id);
    const after = await getJson<{ islands: IslandView[] }>(`${gb.url}/api/islands`);
    expect(
      after.islands.map((i) => i.id).sort(),
      JSON.stringify(after.islands.map((i) => [i.id, i.name, i.status])),
    ).toEqual(islands.map((i) => i.id).sort());
  }, 240_000);
});

describe('atoll serve --redis --role: aggregator failover', () => {
  let redis: RedisProc | null = null;
  let dir = '';
  const procs: Proc[] = [];

  afterAll(async () => {
    for (const p of procs.reverse()) {
      p.child.kill('SIGCONT');
      await p.kill9();
    }
    await redis?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('kill -9, then SIGSTOP past the lease: a standby takes over at the last durable version each time, nothing acked is lost, the deposed one exits fenced', async () => {
    redis = await startRedis();
    dir = tempDir('atoll-roles-failover-');
    const run = [
      '--redis',
      redis.url,
      '--name',
      'failover',
      '--lease-ms',
      '1500',
      '--run-dir',
      dir,
      '--preset',
      'tiny',
      '--inner-steps',
      '2',
      '--no-eval',
    ];
    const aggregator = (tag: string) => {
      const p = spawnRole([...run, '--role', 'aggregator'], tag);
      procs.push(p);
      return p;
    };
    const first = aggregator('aggregator 1');
    await waitFor('the first aggregator to hold the lease', () => activeAt(first), 60_000);
    const second = aggregator('aggregator 2');
    const gw = await spawnServe([...run, '--role', 'gateway'], await freePort());
    procs.push(gw);
    const islands = [spawnIsland(gw.url, 'a'), spawnIsland(gw.url, 'b')];
    procs.push(...islands);
    const ids = () => islands.map((i) => i.report.islandId);
    const applied = (i: IslandProc) => i.report.acks.filter((x) => x.status === 'applied');
    await waitFor('an applied delta from each island', () => islands.every((i) => applied(i).length >= 1), 120_000);
    const named = ids();

    /** The standby took over at a version holding every acked delta, with the θ the islands synced; the islands go on. */
    const takeover = async (standby: Proc, t0: number) => {
      const acked = Math.max(...islands.flatMap((i) => applied(i).map((x) => x.version)));
      const at = (await waitFor('the standby to take over', () => activeAt(standby), 60_000))!;
      const ms = Math.round(performance.now() - t0);
      expect(at.version).toBeGreaterThanOrEqual(acked);
      for (const i of islands) {
        const seen = i.report.synced.find((x) => x.version === at.version);
        if (seen) expect(seen.hash).toBe(at.hash);
      }
      await waitFor(
        'a delta from each island applied by the new aggregator',
        () => islands.every((i) => applied(i).some((x) => x.version > at.version)),
        120_000,
      );
      expect(ids()).toEqual(named);
      return ms;
    };

    // a call open while the aggregator cannot answer: the gateway answers E_TRANSPORT (its rpc fails
    // open at the takeover); the island's transport asks again and gets the new aggregator's answer
    const probe = new SocketIoTransport({ url: gw.url });
    expect((await probe.hello({ protocolVersion: PROTOCOL_VERSION, caps: { engine: 'cpu', name: 'probe' } })).ok).toBe(
      true,
    );
    const { version: v0 } = await getJson<{ version: number }>(`${gw.url}/healthz`);
    first.child.kill('SIGSTOP');
    const during = probe.fetchUpdates(v0);
    await new Promise((r) => setTimeout(r, 500));
    const t1 = performance.now();
    await first.kill9();
    const killMs = await takeover(second, t1);
    const answered = await during;
    expect(answered.ok ? 'ok' : answered.error.code).toBe('ok');
    await probe.close('probe done');

    const third = aggregator('aggregator 3');
    await waitFor(
      'a third aggregator as a standby',
      () => third.output.some((l) => l.includes('standby until')),
      60_000,
    );
    const t2 = performance.now();
    second.child.kill('SIGSTOP');
    const stopMs = await takeover(third, t2);
    second.child.kill('SIGCONT');
    // woken after its lease lapsed: its first renewal or fenced write finds it deposed
    expect(await second.exited).toBe(3);
    expect(second.output.some((l) => l.includes('aggregator fenced'))).toBe(true);
    const before = Math.max(...islands.flatMap((i) => applied(i).map((x) => x.version)));
    await waitFor(
      'the run to go on after the deposed one woke',
      async () => (await getJson<{ version: number }>(`${gw.url}/healthz`)).version > before + 1,
      60_000,
    );
    await waitFor('both islands to report their resume', () => islands.every((i) => i.report.resumes > 0), 60_000);
    console.log(
      `[cluster-roles] aggregator failover (lease 1500 ms): ${killMs} ms after SIGKILL, ${stopMs} ms after SIGSTOP, to the standby active`,
    );
  }, 300_000);
});
