// `atoll serve --downlink sparse` end to end: the server's update goes down in the uplink's own sparse
// code (SPARSE_CODE_DOWNLINK) from the outer step's worker threads (two fragments of `small`), two Node
// islands apply the sparse update frames to their replicas and match θ's hash (synced via 'update', not
// the snapshot), and PATCH /api/admin/config {downlink} switches the code of the next updates live.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeDelta, peekHeader } from '../core/codec/index.ts';
import { SPARSE_CODE_DOWNLINK, SPARSE_DOWNLINK } from '../core/coord/index.ts';
import { type IslandProc, type TestServer, getJson, spawnIsland, startTestServer, waitFor } from './helpers/server.ts';

const TOKEN = 'downlink-token';

describe('a server on the sparse downlink', () => {
  let ts: TestServer;
  const islands: IslandProc[] = [];

  beforeAll(async () => {
    ts = await startTestServer({
      adminToken: TOKEN,
      flags: { preset: 'small', mode: 'async', codec: 'sparse', downlink: 'sparse' },
      file: { coordinator: { innerSteps: 2, minInnerSteps: 1, maxInnerSteps: 2, targetRoundMs: 0, batchSize: 2 } },
    });
    for (const name of ['east', 'west']) islands.push(spawnIsland(ts.url, name));
  }, 60_000);

  afterAll(async () => {
    await Promise.all(islands.map((i) => i.kill9()));
    await ts?.close();
  });

  /** The update frames from `from` on, as islands fetch them. */
  const frames = (from: number) => {
    const r = ts.server.run.coord.updatesSince(from);
    if (!r.ok) throw new Error(r.error.message);
    return r.value.map((u) => u.frame);
  };
  /** Both islands have synced to a version ≥ v by applying an update frame. */
  const bothSyncedPast = (v: number) =>
    waitFor(
      `both islands synced past version ${v} by update`,
      async () =>
        islands.every((i) => i.report.synced.some((s) => s.via === 'update' && s.version > v)) ? true : null,
      120_000,
      250,
    );

  it('applies Δs; islands decode its sparse update frames and match θ', async () => {
    await bothSyncedPast(1);
    const run = await getJson<{ config: { coordinator: { downlink: unknown } }; params: number }>(`${ts.url}/api/run`);
    expect(run.config.coordinator.downlink).toEqual(SPARSE_CODE_DOWNLINK);
    const status = await getJson<{ accepted: number; version: number }>(`${ts.url}/api/status`);
    expect(status.accepted).toBeGreaterThanOrEqual(2);
    const [frame] = frames(0);
    const h = peekHeader(frame);
    expect(h.ok && h.value).toMatchObject({
      encoding: 'sparse',
      blockSize: 4096,
      k: 2048,
      strided: true,
      valueBits: 1,
    });
    // half of each chunk carries the update, the other half waits in the server's residual
    const d = decodeDelta(frame, run.params);
    if (!d.ok) throw new Error(d.error.code);
    const sent = d.value.reduce((a, x) => a + (x !== 0 ? 1 : 0), 0);
    expect(sent).toBeGreaterThan(0.45 * run.params);
    expect(sent).toBeLessThanOrEqual(0.5 * run.params + 4096);
    expect(frame.length).toBeLessThan(run.params / 16 + 8 * Math.ceil(run.params / 4096) + 64); // 1 bit a kept entry
    for (const i of islands) {
      expect(i.report.synced.filter((s) => s.via === 'snapshot').length, 'one snapshot: the first sync').toBe(1);
      expect(i.report.errors).toEqual([]);
    }
  }, 150_000);

  it('PATCH {downlink: int4} switches the next updates; islands follow them by update', async () => {
    const r = await ts.server.app.inject({
      method: 'PATCH',
      url: '/api/admin/config',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      payload: JSON.stringify({ downlink: 'int4' }),
    });
    expect(r.statusCode).toBe(200);
    expect(ts.server.run.coord.config().downlink).toEqual(SPARSE_DOWNLINK);
    const at = ts.server.run.coord.version;
    await bothSyncedPast(at);
    const after = frames(at).map((f) => peekHeader(f));
    expect(after.length).toBeGreaterThanOrEqual(1);
    for (const h of after) expect(h.ok && h.value.encoding).toBe('int4');
  }, 150_000);
});
