// kill -9 of `atoll serve` mid-run, restart on the same run folder: the same last durable version
// and θ hash, islands reconnect and resume by themselves, training goes on, and no acknowledged
// delta is lost (every ack an island received is in the event log as a contributor of that version).

import { readFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeCheckpoint } from '../core/checkpoint.ts';
import { hashParams } from '../core/coord/index.ts';
import {
  type IslandProc,
  type ServeProc,
  freePort,
  getJson,
  spawnIsland,
  spawnServe,
  tempDir,
  waitFor,
} from './helpers/server.ts';

interface Status {
  version: number;
  hash: string;
  islandsOnline: number;
}
interface UpdateLine {
  type: 'update';
  version: number;
  hash: string;
  contributors: Array<{ island: string; seq: number }>;
}

function readLog(dir: string): Array<Record<string, unknown>> {
  return readFileSync(join(dir, 'events.jsonl'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
}

describe('server crash and restart', () => {
  const dir = tempDir('atoll-crash-');
  let server: ServeProc | null = null;
  const islands: IslandProc[] = [];
  const args = ['--preset', 'tiny', '--run-dir', dir, '--inner-steps', '4', '--quorum', '0.6', '--no-eval'];

  afterAll(async () => {
    await Promise.all(islands.map((i) => i.kill9()));
    await server?.kill9();
    rmSync(dir, { recursive: true, force: true });
  });

  it('restarts at the same version and hash; no acknowledged delta is lost; islands resume', async () => {
    const port = await freePort();
    server = await spawnServe(args, port);
    const url = server.url;
    islands.push(spawnIsland(url, 'one'), spawnIsland(url, 'two'));
    await waitFor('4 versions', async () => (await getJson<Status>(`${url}/api/status`)).version >= 4, 90_000, 200);

    // crash, mid-run: rounds are in flight, deltas pending
    await server.kill9();
    const ackedBefore = islands.map((i) => i.report.acks.filter((a) => a.status === 'applied').length);
    const maxAcked = Math.max(...islands.flatMap((i) => i.report.acks.map((a) => a.version)));
    expect(maxAcked).toBeGreaterThanOrEqual(1);

    // what the folder says is durable
    const log = readLog(dir);
    const updates = log.filter((e) => e.type === 'update') as unknown as UpdateLine[];
    const _lastLogged = updates[updates.length - 1];

    // the newest checkpoint on disk: θ, its version and hash (a run checkpoint is a model checkpoint too)
    const newest = readdirSync(join(dir, 'checkpoints'))
      .filter((f) => /^v\d+\.safetensors$/.test(f))
      .sort()
      .pop()!;
    const ck = decodeCheckpoint(new Uint8Array(readFileSync(join(dir, 'checkpoints', newest))));
    if (!ck.ok) throw new Error(ck.error.message);
    const ckVersion = Number(ck.value.meta.version);
    expect(hashParams(ck.value.params)).toBe(ck.value.meta.hash);

    server = await spawnServe(args, port);
    const st = await getJson<Status>(`${url}/api/status`);
    expect(st.version).toBeGreaterThanOrEqual(ckVersion);
    // the restart holds at least everything acknowledged, and exactly what was durable
    expect(st.version).toBeGreaterThanOrEqual(maxAcked);
    // the restarted process opened exactly the newest checkpoint: same version, same θ hash
    const resumed = readLog(dir).find((e) => e.type === 'resume') as { version: number; hash: string } | undefined;
    expect(resumed?.version).toBe(ckVersion);
    expect(resumed?.hash).toBe(ck.value.meta.hash);
    const hashAt = new Map<number, string>(updates.map((u) => [u.version, u.hash]));
    if (hashAt.has(ckVersion)) expect(hashAt.get(ckVersion)).toBe(ck.value.meta.hash);

    // islands come back by themselves, as themselves, and training goes on
    await waitFor(
      'both islands back',
      async () => (await getJson<Status>(`${url}/api/status`)).islandsOnline === 2,
      60_000,
      200,
    );
    await waitFor(
      '3 more versions after the restart',
      async () => (await getJson<Status>(`${url}/api/status`)).version >= st.version + 3,
      90_000,
      200,
    );
    await waitFor(
      'new applied acks on both islands',
      () => islands.every((isl, k) => isl.report.acks.filter((a) => a.status === 'applied').length > ackedBefore[k]),
      60_000,
      100,
    );
    const { islands: list } = await getJson<{ islands: Array<{ id: string; connected: boolean }> }>(
      `${url}/api/islands`,
    );
    const ids = islands.map((i) => i.report.islandId!);
    for (const id of ids) expect(list.find((x) => x.id === id)?.connected).toBe(true);
    expect(list.length).toBe(2); // resumed under their ids, not new islands

    // no acknowledged delta lost: every applied ack is a logged contributor of exactly that version
    // (a 'resume' line is the truth: lines logged past its version before the crash are void)
    const after: UpdateLine[] = [];
    for (const e of readLog(dir)) {
      if (e.type === 'resume')
        while (after.length && after[after.length - 1].version > (e.version as number)) after.pop();
      if (e.type === 'update') after.push(e as unknown as UpdateLine);
    }
    const contributorOf = new Map<string, number[]>();
    for (const u of after)
      for (const c of u.contributors) {
        const k = `${c.island}#${c.seq}`;
        contributorOf.set(k, [...(contributorOf.get(k) ?? []), u.version]);
      }
    let checked = 0;
    for (const isl of islands) {
      for (const a of isl.report.acks) {
        if (a.status !== 'applied') continue;
        expect(contributorOf.get(`${isl.report.islandId}#${a.seq}`)).toEqual([a.version]);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(4);
    // versions in the log are contiguous across the crash (a version is never logged twice)
    const vs = after.map((u) => u.version);
    expect(new Set(vs).size).toBe(vs.length);
  });
});
