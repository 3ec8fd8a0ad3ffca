// PATCH /api/admin/config reaches the inner lr (peak and schedule), batch, token budget and weight
// decay: a change holds from the next assignment, is logged with its version in events.jsonl and
// kept in the history (/api/history's configChanges), and a bad value's error names the field and range.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestServer, getJson, startTestServer } from './helpers/server.ts';

let ts: TestServer;
beforeAll(async () => {
  ts = await startTestServer();
});
afterAll(async () => {
  await ts?.close();
});

const patch = (body: unknown) =>
  fetch(`${ts.url}/api/admin/config`, {
    method: 'PATCH',
    headers: { authorization: 'Bearer test-admin-token', 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

describe('the Admin knobs', () => {
  it('inner lr, floor, warmup, weight decay, batch and budget hold from the next assignment', async () => {
    const run = ts.server.run;
    const r = await patch({
      innerLr: 0.001,
      innerMinLr: 0.0001,
      innerWarmupTokens: 512,
      weightDecay: 0.05,
      batch: 3,
      totalTokens: 90_000,
    });
    expect(r.status).toBe(200);
    const j = run.coord.join({ caps: { engine: 'cpu' } }, Date.now());
    if (!j.ok) throw new Error(j.error.message);
    const a = j.value.assignment!;
    expect(a.lr).toMatchObject({
      maxLr: 0.001,
      minLr: 0.0001,
      warmupTokens: 512,
      weightDecay: 0.05,
      totalTokens: 90_000,
    });
    expect(a.batchSize).toBe(3);
    // logged with its version, kept in the history, and stored
    const lines = readFileSync(run.store.paths.log, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const ev = lines.find((l) => l.type === 'admin' && l.action === 'config');
    expect(ev).toMatchObject({ version: run.version, changes: { innerLr: 0.001, batch: 3 } });
    const h = await getJson<{ configChanges: Array<{ version: number; changes: Record<string, unknown> }> }>(
      `${ts.url}/api/history`,
    );
    expect(h.configChanges.at(-1)).toMatchObject({ version: run.version, changes: { weightDecay: 0.05 } });
    expect(run.store.readConfig<{ coordinator: { batchSize: number } }>()!.coordinator.batchSize).toBe(3);
  });

  it('a bad knob is refused naming the field and its range, and nothing changes', async () => {
    const before = JSON.stringify(ts.server.run.coord.config());
    const said = async (body: unknown) => {
      const r = await patch(body);
      const b = (await r.json()) as { error: { code: string; message: string } };
      return `${r.status} ${b.error.code}: ${b.error.message}`;
    };
    expect(await said({ innerLr: { maxLr: 0.001 } })).toMatch(
      /^400 E_BAD_REQUEST: innerLr must be a number, got \{"maxLr":0\.001\} \(peak inner AdamW learning rate, \[0, 10\]\)/,
    );
    expect(await said({ batch: 0 })).toMatch(/batch must be an integer in \[1, 1000000\], got 0/);
    expect(await said({ weightDecay: -1 })).toMatch(/weightDecay must be a number in \[0, 10\]/);
    expect(await said({ mode: 'sync' })).toMatch(/mode is fixed while the run is live \(the live knobs: outerLr/);
    expect(await said({ nope: 1 })).toMatch(/nope is not a knob/);
    expect(JSON.stringify(ts.server.run.coord.config())).toBe(before);
  });
});
