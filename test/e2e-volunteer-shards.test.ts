// End to end, a volunteer page on a shard run (`serve --data DIR`, byte shards from `atoll data
// prepare`, published too on another origin as a static bucket: `--data-url`, test/helpers/bucket.ts)
// in headless Chromium on SwiftShader WebGPU, the `tiny` preset and 2-step rounds:
//   - the page fetches its ranges from the bucket, cross-origin (the CSP, CORS and COEP let it), and
//     none from the server;
//   - the cost card says the training data comes by range each round (2 bytes a token, the round's
//     tokens) and is cached in this browser up to the cap, not "N of training text once";
//   - the page's rounds are accepted and the server's range ledger (GET /api/data) shows ranges it
//     trained; the page never asks for /api/data/train (a corpus run's split, 404 here) and never errs;
//   - the page counts the data bytes it fetched: at least the index and its first range, at most the
//     index and its assigned ranges (2 bytes a token);
//   - the range cache: a range the page trained is served again with no network bytes and the same
//     tokens as the shard file on disk; a range it never fetched costs its bytes once, then none;
//   - the dashboard's Data card shows the ledger: the epoch, each shard's tokens trained, the bucket.

import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataIndex, DataStatus } from '../core/api.ts';
import type { Assignment } from '../core/protocol.ts';
import type { DataRange } from '../core/server-messages.ts';
import { formatBytes } from '../client/ui/format.ts';
import { type Bucket, startBucket } from './helpers/bucket.ts';
import { ensureClientBuild, launchChromium, type LaunchedBrowser } from './helpers/browser.ts';
import { prepareMobyShards } from './helpers/shards.ts';
import { freePort, getJson, type ServeProc, spawnServe, tempDir, waitFor } from './helpers/server.ts';
import { openVolunteerPage, pageLog, pageView, type PageView, textOf } from './helpers/volunteer-page.ts';

const STEPS = 2;

interface ShardPageView extends PageView {
  dataBytes: number;
  rangeCache: { capBytes: number; hits: number; misses: number; storedBytes: number } | null;
}
type RangeAnswer =
  | { ok: true; tokens: Uint16Array; bytesBefore: number; bytesAfter: number }
  | { ok: false; message: string };
interface Atoll {
  view: ShardPageView;
  assignments: Assignment[];
  phasesSeen: string[];
  fetchRange(r: DataRange): Promise<RangeAnswer>;
}

describe('volunteer page on a shard run (Chromium, SwiftShader)', () => {
  const root = tempDir('atoll-volunteer-shards-');
  const shardsDir = join(root, 'shards');
  let server: ServeProc | null = null;
  let bucket: Bucket | null = null;
  let gpu: LaunchedBrowser | null = null;
  const requests: string[] = [];

  beforeAll(async () => {
    ensureClientBuild();
    await prepareMobyShards(root, shardsDir);
    // fixed 2-step rounds: short, and the range a round fetches is known from its assignment
    const config = join(root, 'run.json');
    const coordinator = { mode: 'async', innerSteps: STEPS, minInnerSteps: STEPS, maxInnerSteps: STEPS, dylu: false };
    writeFileSync(config, JSON.stringify({ coordinator }));
    const port = await freePort();
    bucket = await startBucket(shardsDir);
    const args = ['--preset', 'tiny', '--data', shardsDir, '--data-url', bucket.url, '--config', config, '--no-eval'];
    server = await spawnServe([...args, '--run-dir', join(root, 'run')], port);
    gpu = await launchChromium({ webgpu: true });
    // the worker's requests too (Chromium reports a dedicated worker's on its page)
    gpu.page.on('request', (r) => requests.push(r.url()));
  }, 60_000);

  afterAll(async () => {
    await gpu?.close();
    await server?.stop();
    await bucket?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('trains the ranges it is assigned, fetched by range, counted, and cached', async () => {
    const url = `http://localhost:${server!.port}`; // localhost: a secure context (WebGPU, the Cache API)
    const page = gpu!.page;
    const atoll = <T>(f: (a: Atoll) => T | Promise<T>) =>
      page.evaluate(`(${f})(globalThis.__atoll)`) as Promise<Awaited<T>>;
    await openVolunteerPage(gpu!, `${url}/?autotune=0`);
    const run = await getJson<{ batch: number; seqLen: number; data: { shards?: number } }>(`${url}/api/run`);
    expect(run.data.shards).toBe(4);
    const down = await textOf(gpu!, '#cost-down', 'by range');
    expect(down).toContain('2 bytes a token');
    // the round's tokens: 2 steps of 8 × 33, 2 bytes each
    const rangeBytes = 2 * STEPS * run.batch * (run.seqLen + 1);
    expect(down).toContain(`${formatBytes(rangeBytes)} a round (${run.batch * (run.seqLen + 1)} tokens a step)`);
    expect(down).toContain('cached in this browser up to 64.0 MiB');
    expect(down).not.toContain('training text');

    await page.click('#start');
    const accepted = await waitFor(
      'two accepted rounds',
      async () => {
        const v = await pageView(gpu!);
        if (v.phase === 'error') throw new Error(`page error: ${JSON.stringify(v)}`);
        return v.roundsAccepted >= 2 ? v : null;
      },
      40_000,
      250,
    );
    const islandId = accepted!.islandId!;
    const ledger = await waitFor(
      "the page's ranges in the server's ledger",
      async () => {
        const d = await getJson<DataStatus>(`${url}/api/data`);
        return d.recent.filter((r) => r.islandId === islandId).length >= 2 ? d : null;
      },
      10_000,
      250,
    );
    const mine = ledger!.recent.filter((r) => r.islandId === islandId);
    expect(mine.every((r) => r.length === STEPS * run.batch * (run.seqLen + 1))).toBe(true);

    const { view, assignments, phases } = await atoll((a) => ({
      view: a.view,
      assignments: a.assignments,
      phases: a.phasesSeen,
    }));
    const ranges = assignments.map((a) => a.data.range!);
    expect(ranges.every(Boolean)).toBe(true);
    // what the ledger holds of the page is what the page was assigned
    for (const r of mine) expect(ranges).toContainEqual({ shard: r.shard, offset: r.offset, length: r.length });
    expect(phases).not.toContain('error');
    expect((await pageLog(gpu!)).join('\n')).not.toMatch(/Could not download the training data|E_BAD_RANGE/);
    // its ranges from the bucket (206 each), none from the server
    expect(requests.some((u) => u.startsWith(`${bucket!.url}/`))).toBe(true);
    expect(requests.filter((u) => u.includes('/api/data/shards/'))).toEqual([]);
    expect(bucket!.served.length).toBeGreaterThanOrEqual(2);
    for (const g of bucket!.served) expect(g.status).toBe(206);
    expect((await getJson<DataStatus>(`${url}/api/data`)).bytesServed).toBe(0);
    expect(requests.filter((u) => u.includes('/api/data/train'))).toEqual([]);

    // the data bytes: the index and the ranges fetched, within what was assigned; part of bytes received
    const indexBytes = (await (await fetch(`${url}/api/data/index`)).text()).length;
    const assignedBytes = ranges.reduce((a, r) => a + 2 * r.length, 0);
    expect(view.dataBytes).toBeGreaterThanOrEqual(indexBytes + 2 * ranges[0].length);
    expect(view.dataBytes).toBeLessThanOrEqual(indexBytes + assignedBytes);
    expect(view.bytesDown).toBeGreaterThan(view.dataBytes);
    expect(view.rangeCache).toMatchObject({ capBytes: 64 * 1024 * 1024, hits: 0 });
    expect(view.rangeCache!.misses).toBeGreaterThanOrEqual(2);
    expect(view.rangeCache!.storedBytes).toBe(2 * ranges[0].length * view.rangeCache!.misses);
    expect(await pageLog(gpu!)).toContain(
      "Training data: 4 shards; each round's range comes by HTTP Range, kept in this browser up to 64.0 MiB.",
    );

    // a trained range again: from the cache (no network bytes), the same tokens as the shard on disk
    const index = await getJson<DataIndex>(`${url}/api/data/index`);
    const onDisk = (r: DataRange) => {
      const e = index.shards.find((s) => s.name === r.shard)!;
      const b = readFileSync(join(shardsDir, e.name)).subarray(e.headerBytes + 2 * r.offset);
      return Array.from({ length: r.length }, (_, i) => b.readUInt16LE(2 * i));
    };
    const through = async (r: DataRange) => {
      const x = await page.evaluate(async (range) => {
        const m = await (globalThis as unknown as { __atoll: Atoll }).__atoll.fetchRange(range);
        return m.ok ? { ...m, tokens: Array.from(m.tokens) } : m;
      }, r);
      if (!x.ok) throw new Error(x.message);
      return { net: x.bytesAfter - x.bytesBefore, tokens: x.tokens };
    };
    const again = await through(ranges[0]);
    expect(again.net).toBe(0);
    expect(again.tokens).toEqual(onDisk(ranges[0]));
    // a range never fetched: its bytes once, then none
    const last = index.shards.filter((s) => s.name !== index.heldOut).at(-1)!;
    const fresh = { shard: last.name, offset: last.tokens - 100, length: 100 };
    expect(ranges).not.toContainEqual(fresh);
    expect(await through(fresh)).toEqual({ net: 200, tokens: onDisk(fresh) });
    expect(await through(fresh)).toEqual({ net: 0, tokens: onDisk(fresh) });
    const after = await pageView(gpu!);
    expect((after as ShardPageView).rangeCache!.hits).toBeGreaterThanOrEqual(2);

    // the dashboard's Data card: the ledger's epoch, its shards with the tokens trained, the bucket named
    const dash = await gpu!.context.newPage();
    try {
      await dash.goto(`${url}/dashboard#tab=run`);
      await dash.waitForSelector('#data-card:not([hidden]) #data-shards tbody tr', { timeout: 15_000 });
      const epoch = (await dash.textContent('#data-epoch'))!;
      expect(epoch).toMatch(/^epoch 0 at \d+\.\d % of 18,000 train tokens \(0 epochs done\); \d+ ranges? in flight/);
      expect(epoch).toContain(`ranges fetched from ${bucket!.url}`);
      const rows = await dash.$$eval('#data-shards tbody tr', (trs) =>
        trs.map((tr) => Array.from(tr.querySelectorAll('td'), (td) => td.textContent!.trim())),
      );
      const ledger = await getJson<DataStatus>(`${url}/api/data`);
      expect(rows.map((r) => r[0])).toEqual(ledger.shards.map((x) => x.name));
      expect(rows.map((r) => r[1])).toEqual(ledger.shards.map(() => '6,000'));
      expect(rows.some((r) => r[2] !== '0')).toBe(true); // the page's trained ranges
    } finally {
      await dash.close();
    }
  }, 60_000);
});
