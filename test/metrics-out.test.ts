// Metrics out: an `atoll serve` run of one's own (its own name, its own text) with a CPU island writes
// <run-dir>/metrics/scalars.jsonl and a TensorBoard event file. The event file is read back by the tests'
// own reader (test/helpers/tfevents.ts: TFRecord framing, length, masked CRC32C of the length, data, masked
// CRC32C of the data; the Event and Summary protobufs field by field), not by the writer's own code: the eval
// curve is there, and the Admin PATCH of the outer lr is there at the version it took effect. The live
// run serves the same scalars as CSV. Also: the run keeps no word of the default run's description,
// the status's bytesPerUpdate is known once int8 frames outweigh θ, and /api/sample refuses more tokens
// than its limit, naming it.

import { readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type Proc, type ServeProc, freePort, getJson, spawnServe, tempDir, waitFor } from './helpers/server.ts';
import { startIsland } from './helpers/dashboard-server.ts';
import { readEventFile } from './helpers/tfevents.ts';

const dir = tempDir('atoll-metrics-');
const runDir = join(dir, 'run');
const procs: Proc[] = [];
afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  rmSync(dir, { recursive: true, force: true });
});

// ── the run ─────────────────────────────────────────────────────────────────────────────────

describe('metrics out of a serve run of one’s own', () => {
  let server: ServeProc;
  let changedAt = -1;

  it('trains on its own text and takes an Admin PATCH of the outer lr', async () => {
    const text = join(dir, 'mine.txt');
    const docs = readdirSync('docs')
      .filter((f) => f.endsWith('.md'))
      .map((f) => readFileSync(join('docs', f), 'utf8'));
    writeFileSync(text, docs.join('\n').slice(0, 200_000));
    const port = await freePort();
    server = await spawnServe(
      [
        '--preset',
        'tiny',
        '--run-dir',
        runDir,
        '--name',
        'mine',
        '--data',
        text,
        '--inner-steps',
        '4',
        '--codec',
        'int8',
      ],
      port,
    );
    procs.push(server);
    const info = await getJson<{ description: string; title: string }>(`${server.url}/api/run`);
    expect(info.description).not.toMatch(/Moby-Dick/);
    expect(info.description).toContain('mine.txt');
    expect(info.title).toBe('mine');

    procs.push(startIsland(server.url, 'metrics-island'));
    const status = () => getJson<{ version: number; evalVersion: number | null }>(`${server.url}/api/status`);
    await waitFor('three outer updates', async () => (await status()).version >= 3, 90_000, 200);
    const r = await fetch(`${server.url}/api/admin/config`, {
      method: 'PATCH',
      headers: { authorization: 'Bearer test-admin-token', 'content-type': 'application/json' },
      body: JSON.stringify({ outerLr: 0.25 }),
    });
    expect(r.status).toBe(200);
    // the history keeps the change as the operator named it, at its version (/api/history's configChanges)
    const h = await getJson<{ configChanges: Array<{ version: number; changes: unknown }> }>(
      `${server.url}/api/history`,
    );
    expect(h.configChanges).toHaveLength(1);
    changedAt = h.configChanges[0].version;
    expect(changedAt).toBeGreaterThanOrEqual(3);
    expect(h.configChanges[0].changes).toEqual({ outerLr: 0.25 });
    await waitFor(
      'an eval two versions after the change',
      async () => ((await status()).evalVersion ?? -1) >= changedAt + 2,
      90_000,
      200,
    );

    // the live run's CSV: one row per version, the outer lr before and after the change
    const csv = await (await fetch(`${server.url}/api/scalars.csv`)).text();
    const [head, ...rows] = csv.trim().split('\n');
    const cols = head.split(',');
    expect(cols.slice(0, 4)).toEqual(['step', 'time', 'eval/loss', 'train/loss']);
    for (const tag of ['lr/inner', 'lr/outer', 'update/norm', 'tokens/total', 'bytes/in_total', 'islands/online'])
      expect(cols).toContain(tag);
    const at = (row: string, tag: string) => row.split(',')[cols.indexOf(tag)];
    const byStep = new Map(rows.map((row) => [Number(row.split(',')[0]), row]));
    expect(Number(at(byStep.get(changedAt)!, 'lr/outer'))).not.toBe(0.25);
    expect(Number(at(byStep.get(changedAt + 1)!, 'lr/outer'))).toBe(0.25);
    expect(Number(at(byStep.get(changedAt + 1)!, 'lr/inner'))).toBeGreaterThan(0);

    // int8 updates: 5 frames outweigh θ, yet the status says what an update costs to download
    const st = await getJson<{ version: number; bytesPerUpdate: number | null }>(`${server.url}/api/status`);
    const hist = await getJson<{ points: Array<{ version: number; bytesOut: number }> }>(`${server.url}/api/history`);
    const frames = hist.points.filter((p) => p.version > 0 && p.version <= st.version).slice(-8);
    expect(st.version).toBeGreaterThanOrEqual(5);
    expect(st.bytesPerUpdate).toBeCloseTo(frames.reduce((a, p) => a + p.bytesOut, 0) / frames.length, 3);

    const sample = await fetch(`${server.url}/api/sample?tokens=300`);
    expect(sample.status).toBe(400);
    expect(((await sample.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'E_BAD_REQUEST',
      message: expect.stringContaining('256'),
    });
    expect((await fetch(`${server.url}/api/sample?tokens=256`)).status).toBe(200);
  }, 240_000);

  it('writes the scalars as JSONL and as a TensorBoard event file an independent reader reads', async () => {
    await server.stop();
    const metrics = join(runDir, 'metrics');
    const files = readdirSync(metrics);
    const tfevents = files.filter((f) => f.startsWith('events.out.tfevents.'));
    expect(tfevents).toHaveLength(1);

    const events = readEventFile(new Uint8Array(readFileSync(join(metrics, tfevents[0]))));
    expect(events[0].fileVersion).toBe('brain.Event:2');
    const evalCurve = events.filter((e) => 'eval/loss' in e.scalars).map((e) => [e.step, e.scalars['eval/loss']]);
    expect(evalCurve.length).toBeGreaterThanOrEqual(3);
    expect(evalCurve.every(([, loss]) => loss > 0 && loss < 10)).toBe(true);
    expect(evalCurve.at(-1)![1]).toBeLessThan(evalCurve[0][1]); // the tiny model learns its text
    const change = events.filter((e) => 'config/outer.lr' in e.scalars);
    expect(change.map((e) => [e.step, e.scalars['config/outer.lr']])).toEqual([[changedAt, 0.25]]);
    const trained = events.filter((e) => 'train/loss' in e.scalars);
    expect(trained.length).toBeGreaterThanOrEqual(changedAt + 2);
    expect(trained.find((e) => e.step === changedAt + 1)!.scalars['lr/outer']).toBe(0.25);
    expect(events.every((e) => Math.abs(e.wallTime * 1000 - Date.now()) < 600_000)).toBe(true);

    const lines = readFileSync(join(metrics, 'scalars.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.filter((l) => l.event === 'config')).toEqual([
      { step: changedAt, time: expect.any(Number), event: 'config', patch: { outer: { lr: 0.25 } } },
    ]);
    expect(lines.filter((l) => 'eval/loss' in l).map((l) => [l.step, l['eval/loss']])).toEqual(
      evalCurve.map(([s, v]) => [s, expect.closeTo(v, 5)]),
    );
    // and events.jsonl's admin line carries its version
    const admin = readFileSync(join(runDir, 'events.jsonl'), 'utf8')
      .split('\n')
      .filter((l) => l.includes('"action":"config"'))
      .map((l) => JSON.parse(l) as { version: number });
    expect(admin.map((a) => a.version)).toEqual([changedAt]);
  }, 60_000);
});
