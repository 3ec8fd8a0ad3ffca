// The WebGPU engine in headless Chromium (its SwiftShader WebGPU): 10 AdamW steps on
// `tiny`, served by Vite's dev server from test/browser/, compared with JsEngine in Node.
// Same tolerances as test/webgpu-engine.test.ts: losses relative 1e-3, parameters absolute 1e-3.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolve } from 'node:path';
import { createServer, type ViteDevServer } from 'vite';
import { JsEngine } from '../core/engine/js.ts';
import { PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { mulberry32 } from '../core/random.ts';
import { launchChromium, type LaunchedBrowser } from './helpers/browser.ts';
import type { RunRequest, RunResult, TuneResultSummary } from './browser/engine-main.ts';

const root = resolve(import.meta.dirname, '..');
let server: ViteDevServer;
let browser: LaunchedBrowser;

beforeAll(async () => {
  server = await createServer({
    configFile: false,
    root: resolve(root, 'test/browser'),
    logLevel: 'error',
    server: { host: '127.0.0.1', port: 0, strictPort: false, fs: { allow: [root] }, hmr: false, watch: null },
    optimizeDeps: { noDiscovery: true, include: [] },
  });
  await server.listen();
  browser = await launchChromium({ webgpu: true });
});

afterAll(async () => {
  await browser?.close();
  await server?.close();
});

const TEXT = new TextEncoder().encode(
  'Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, ' +
    'and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of the world. ',
);

describe('WebGpuEngine in Chromium', () => {
  it('10 AdamW steps match JsEngine in Node', async () => {
    const config = PRESETS.tiny;
    const B = 2,
      T = config.blockSize,
      lr = 3e-3,
      gradClip = 1;
    const init = initParams(config, 1234);
    const batches: RunRequest['batches'] = [];
    for (let s = 0; s < 10; s++) {
      const r = mulberry32(100 + s);
      const inputs: number[] = [],
        targets: number[] = [];
      for (let b = 0; b < B; b++) {
        const st = Math.floor(r() * (TEXT.length - T - 1));
        inputs.push(...TEXT.subarray(st, st + T));
        targets.push(...TEXT.subarray(st + 1, st + T + 1));
      }
      batches.push({ inputs, targets, B, T });
    }

    const cpu = new JsEngine({ config, maxBatch: B });
    await cpu.setParams(init);
    for (const b of batches)
      await cpu.step(
        { inputs: Uint8Array.from(b.inputs), targets: Uint8Array.from(b.targets), B, T },
        { lr, gradClip },
      );
    const want = await cpu.takeLosses();
    const wantParams = await cpu.getParams();

    const address = server.httpServer!.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    const page = browser.page;
    await page.goto(`http://localhost:${port}/engine.html`);
    await page.waitForFunction(() => document.title === 'ready', undefined, { timeout: 60_000 });
    const req: RunRequest = { config, maxBatch: B, params: Array.from(init), batches, lr, gradClip };
    const got = await page
      .evaluate((r) => (window as unknown as { atollRun(r: RunRequest): Promise<RunResult> }).atollRun(r), req)
      .catch((e: Error) => {
        throw new Error(`${e.message}\n${browser.logs.join('\n')}`);
      });

    expect(got.adapter.length).toBeGreaterThan(0);
    expect(got.subgroups).toBe(true); // Chromium's SwiftShader has subgroups: the subgroup reductions ran (Node's engine test runs the workgroup ones)
    expect(got.losses.length).toBe(10);
    let lossErr = 0,
      paramErr = 0;
    got.losses.forEach((l, i) => {
      lossErr = Math.max(lossErr, Math.abs(l - want[i]) / want[i]);
    });
    got.params.forEach((p, i) => {
      paramErr = Math.max(paramErr, Math.abs(p - wantParams[i]));
    });
    console.log(
      `browser (${got.adapter}): create ${Math.round(got.createMs)} ms, 10 steps ${Math.round(got.stepsMs)} ms, loss err ${lossErr.toExponential(2)}, param abs err ${paramErr.toExponential(2)}`,
    );
    expect(lossErr).toBeLessThanOrEqual(1e-3);
    expect(paramErr).toBeLessThanOrEqual(1e-3);
    expect(want[9]).toBeLessThan(want[0]);
  }, 240_000);

  it("the autotuner caches its choice in IndexedDB (the volunteer worker's cache): timed on the first start, read on the next", async () => {
    const address = server.httpServer!.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    const page = browser.page;
    if (!page.url().endsWith('/engine.html')) await page.goto(`http://localhost:${port}/engine.html`);
    await page.waitForFunction(() => document.title === 'ready', undefined, { timeout: 60_000 });
    const req = { shape: { pass: 'dX', C: 48, OC: 144 } as const, rows: 64 };
    const got = await page
      .evaluate((r) => (window as unknown as { atollTune(r: unknown): Promise<TuneResultSummary> }).atollTune(r), req)
      .catch((e: Error) => {
        throw new Error(`${e.message}\n${browser.logs.join('\n')}`);
      });
    expect(got).toEqual({ first: 'timed', again: 'cache', same: true });
  }, 120_000);
});
