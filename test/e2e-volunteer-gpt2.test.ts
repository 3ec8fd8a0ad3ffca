// End to end, a volunteer page on a GPT-2-shaped run (issue 37 at a reduced shape): `serve --preset gpt2-mini
// --data DIR` on GPT-2 BPE shards (V = 50,257, the tied head), in headless Chromium on SwiftShader WebGPU:
//   - before Start, the cost card says what the page will download: θ's bytes once, then updates;
//   - θ comes in checked chunks (limits.modelChunkBytes 1 MiB, 14 of them): a download cut off after 4 chunks
//     is resumed by the reload, which fetches only the 10 it lacks;
//   - the page trains on its BPE ranges and its rounds are accepted.
// A second visit that fetches no θ, only updates, is e2e-volunteer's reload (the same code on `small`).

import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataStatus } from '../core/api.ts';
import { paramLayout, PRESETS } from '../core/model/config.ts';
import { formatBytes } from '../client/ui/format.ts';
import { ensureClientBuild, launchChromium, type LaunchedBrowser } from './helpers/browser.ts';
import { prepareMobyShards } from './helpers/shards.ts';
import { freePort, getJson, type ServeProc, spawnServe, tempDir, waitFor } from './helpers/server.ts';
import { openVolunteerPage, pageLog, pageView, textOf } from './helpers/volunteer-page.ts';

const CHUNK = 1 << 20;
const CUT_AFTER = 4;

describe('volunteer page on a GPT-2-shaped run (Chromium, SwiftShader)', () => {
  const root = tempDir('atoll-volunteer-gpt2-');
  const shards = join(root, 'shards');
  let server: ServeProc | null = null;
  let gpu: LaunchedBrowser | null = null;

  beforeAll(async () => {
    ensureClientBuild();
    await prepareMobyShards(root, shards, 'gpt2');
    const config = join(root, 'run.json');
    const coordinator = {
      mode: 'async',
      batchSize: 1,
      seqLen: 8, // a SwiftShader step is mostly the 50,257-wide head: its cost follows the tokens
      ...{ innerSteps: 2, minInnerSteps: 2, maxInnerSteps: 2, dylu: false, targetRoundMs: 0 },
    };
    writeFileSync(config, JSON.stringify({ coordinator, limits: { modelChunkBytes: CHUNK } }));
    const port = await freePort();
    const args = ['--preset', 'gpt2-mini', '--data', shards, '--config', config, '--no-eval'];
    server = await spawnServe([...args, '--run-dir', join(root, 'run')], port);
    gpu = await launchChromium({ webgpu: true });
  }, 120_000);

  afterAll(async () => {
    await gpu?.close();
    await server?.stop();
    rmSync(root, { recursive: true, force: true });
  });

  it('downloads θ in chunks, resumes a cut-off download and trains accepted rounds', async () => {
    const url = `http://localhost:${server!.port}`; // localhost: a secure context (WebGPU, the Cache API)
    const page = gpu!.page;
    const thetaBytes = 4 * paramLayout(PRESETS['gpt2-mini']).total;
    const chunks = Math.ceil(thetaBytes / CHUNK);
    expect(chunks).toBe(14);
    const modelGets: Array<{ url: string; range: string | null }> = [];
    page.on('request', (r) => {
      if (new URL(r.url()).pathname === '/api/model')
        modelGets.push({ url: r.url(), range: r.headers().range ?? null });
    });

    // first visit: the cost card says the download before anything starts
    await openVolunteerPage(gpu!, `${url}/?autotune=0`);
    const run = await getJson<{ config: { tokenizer: string }; params: number }>(`${url}/api/run`);
    expect(run.config.tokenizer).toBe('gpt2');
    await textOf(gpu!, '#cost-down', `${formatBytes(thetaBytes)} once (the `);
    expect(await page.locator('#saved-model').isHidden()).toBe(true);

    // the download cut off after CUT_AFTER chunks: every later chunk request fails at the network
    let served = 0;
    await page.route('**/api/model', (route) => {
      if (route.request().headers().range && served >= CUT_AFTER) return route.abort('connectionreset');
      served += 1;
      return route.continue();
    });
    await page.click('#start');
    // the engine is built and its speed measured first: minutes on SwiftShader beside another file
    await waitFor('the download cut off', async () => modelGets.length > CUT_AFTER, 180_000, 100);
    expect(modelGets.slice(0, CUT_AFTER).every((g) => g.range !== null)).toBe(true);
    await page.unroute('**/api/model');

    // the reload resumes: only the chunks it lacks, each by Range
    modelGets.length = 0;
    await openVolunteerPage(gpu!, `${url}/?autotune=0`);
    await page.click('#start');
    const accepted = await waitFor(
      'an accepted round',
      async () => {
        const v = await pageView(gpu!);
        if (v.phase === 'error') throw new Error(`page error: ${JSON.stringify(v)}`);
        return v.roundsAccepted >= 1 ? v : null;
      },
      120_000,
      250,
    ).catch(async (e: Error) => {
      throw new Error(`${e.message}; ${(await pageLog(gpu!)).slice(-8).join(' | ')}`);
    });
    expect(accepted!.engine).toBe('webgpu');
    expect(modelGets.length, JSON.stringify(modelGets)).toBe(chunks - CUT_AFTER);
    expect(modelGets.every((g) => g.range !== null)).toBe(true);
    const firstByte = (g: { range: string | null }) => Number(/bytes=(\d+)-/.exec(g.range!)![1]);
    expect(Math.min(...modelGets.map(firstByte))).toBe(CUT_AFTER * CHUNK);
    // it trained its assigned BPE ranges: 2 steps of 1 × 9 tokens each
    const data = await getJson<DataStatus>(`${url}/api/data`);
    const mine = data.recent.filter((r) => r.islandId === accepted!.islandId);
    expect(mine.length).toBeGreaterThanOrEqual(1);
    expect(mine.every((r) => r.length === 2 * 9)).toBe(true);
  }, 360_000);
});
