// End to end, at scale: the dashboard stays responsive with 1,000 islands online.
//
// A child process (test/helpers/dashboard-swarm.ts) opens 1,000 socket.io connections to a real
// `atoll serve` on loopback and says hello on each, so the server lists 1,000 islands; each
// simulated island then pings every ~4 s, which refreshes its last-seen time, so the server's
// /dashboard stream (≤ 2 messages/s) carries a steady flow of ~125 changed islands per message
// on top of the initial 1,000.
//
// The page is measured where it matters, in the page itself:
//   • long tasks (PerformanceObserver 'longtask', ≥ 50 ms of main-thread work in one go), and
//   • the largest gap between animation frames,
// over a steady-state window on the islands tab (the heaviest view: a sort and a page of rows
// per render), plus the latency of a sort click and of tab switches.
//
// Bounds, and why:
//   • no long task over 250 ms and no frame gap over 500 ms: a 100 ms stall is the RAIL threshold
//     of a perceptible delay; this box has 2 cores shared by Chromium, the server and a process
//     holding 1,000 sockets, so 2.5× that is the "never freezes" line (a 1,000-row full render
//     with the old toLocaleString formatter took 225–290 ms here and failed it).
//   • main-thread long-task time under 25% of the window: the page must leave most of the
//     thread to the user while updates stream in (measured: ~2–7%).
//   • renders ≤ 2 per second (+1 for the window edge): the coalescing contract.
//   • a sort click and a tab switch are on screen within 500 ms.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureClientBuild, launchChromium, type LaunchedBrowser } from './helpers/browser.ts';
import { ROOT, type ServerHandle, startServer, waitFor } from './helpers/dashboard-server.ts';

const N = 1000;
const WINDOW_MS = 6000;

let server: ServerHandle;
let browser: LaunchedBrowser;
let swarm: ReturnType<typeof spawn> | null = null;
let swarmExited: Promise<void> = Promise.resolve();
const cfgDir = mkdtempSync(join(tmpdir(), 'atoll-dash-scale-'));
const t0 = Date.now();
const lap = (what: string) =>
  process.stderr.write(`[e2e-dashboard-scale] ${what} at ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);

interface Window {
  frames: number;
  maxGap: number;
  longTasks: number[];
  busyMs: number;
  renders: number;
  renderMs: number[];
  messages: number;
  islands: number;
}

/** Measures `ms` of the page's main thread in the page: long tasks, frame gaps, renders. */
async function measure(ms: number): Promise<Window> {
  return browser.page.evaluate(`(async () => {
    const d = window.__atollDashboard;
    window.__longTasks.length = 0;
    const r0 = d.perf.renders, m0 = d.messages, start = performance.now();
    let last = start, maxGap = 0, frames = 0;
    await new Promise((done) => {
      const tick = () => {
        const now = performance.now();
        maxGap = Math.max(maxGap, now - last); last = now; frames++;
        if (now - start < ${ms}) requestAnimationFrame(tick); else done();
      };
      requestAnimationFrame(tick);
    });
    const lt = window.__longTasks.map((e) => Math.round(e));
    const renders = d.perf.renders - r0;
    return { frames, maxGap: Math.round(maxGap), longTasks: lt, busyMs: lt.reduce((a, b) => a + b, 0),
      renders, renderMs: d.perf.renderMs.slice(-renders).map((x) => Math.round(x * 10) / 10),
      messages: d.messages - m0, islands: d.islands };
  })()`) as Promise<Window>;
}

/** Clicks `selector` in the page and resolves with ms until `doneExpr` holds and a frame is painted. */
async function latency(selector: string, doneExpr: string): Promise<number> {
  return browser.page.evaluate(`new Promise((res) => {
    const t = performance.now();
    document.querySelector(${JSON.stringify(selector)}).click();
    const check = () => { if (${doneExpr}) requestAnimationFrame(() => res(Math.round(performance.now() - t))); else requestAnimationFrame(check); };
    check();
  })`) as Promise<number>;
}

describe('dashboard with 1,000 islands', () => {
  beforeAll(async () => {
    ensureClientBuild();
    // 1,000 hellos from one loopback address: lift the per-IP hello limit for this run.
    const cfg = join(cfgDir, 'config.json');
    writeFileSync(
      cfg,
      JSON.stringify({ limits: { helloPerMinute: 100_000, maxIslands: 5000, powBits: 0, newIslandsPerHour: 100_000 } }),
    );
    server = await startServer({ args: ['--config', cfg, '--no-eval'] });
    lap('server up');
    swarm = spawn(
      process.execPath,
      [
        '--import',
        join(ROOT, 'bin/register.js'),
        join(ROOT, 'test/helpers/dashboard-swarm.ts'),
        server.url,
        String(N),
        '4000',
      ],
      {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    swarmExited = new Promise((r) => swarm!.once('exit', () => r()));
    const launching = launchChromium({ webgpu: false, viewport: { width: 1400, height: 1000 } });
    let out = '';
    swarm.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
    });
    swarm.stderr!.on('data', (b: Buffer) => {
      out += b.toString();
    });
    const ready = (await waitFor(
      'the swarm to say hello',
      () => {
        if (swarm!.exitCode !== null) throw new Error(`swarm exited: ${out}`);
        const line = out.split('\n').find((l) => l.includes('"ready"'));
        return line ? (JSON.parse(line) as { ok: number; errors: Record<string, number>; ms: number }) : null;
      },
      90_000,
      250,
    )) as { ok: number; errors: Record<string, number>; ms: number };
    lap(`swarm ready: ${ready.ok} hellos in ${ready.ms} ms ${JSON.stringify(ready.errors)}`);
    expect(ready.ok).toBe(N);
    browser = await launching;
    await browser.page.addInitScript(`window.__longTasks = [];
      new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
        .observe({ type: 'longtask', buffered: true });`);
  });

  afterAll(async () => {
    await browser?.close();
    if (swarm && swarm.exitCode === null) {
      swarm.kill('SIGTERM');
      const t = setTimeout(() => swarm?.kill('SIGKILL'), 3000);
      await swarmExited;
      clearTimeout(t);
    }
    await server?.close();
    rmSync(cfgDir, { recursive: true, force: true });
    lap('done');
  });

  it('lists 1,000 islands and stays responsive while their updates stream in', async () => {
    const { page } = browser;
    await page.goto(`${server.url}/dashboard#tab=islands`);
    await page.waitForFunction(
      () => (window as unknown as { __atollDashboard?: { islands: number } }).__atollDashboard?.islands === 1000,
      null,
      { timeout: 30_000 },
    );
    await expect.poll(() => page.textContent('#islands-summary'), { timeout: 10_000 }).toContain('of 1,000 islands');
    expect(await page.textContent('#fig-islands')).toBe('1,000');
    expect(await page.locator('#islands-table tbody tr').count()).toBe(50);
    await page.waitForTimeout(1500); // past the first full render

    const w = await measure(WINDOW_MS);
    lap(`islands tab: ${JSON.stringify(w)}`);
    expect(w.islands).toBe(N);
    expect(w.messages).toBeGreaterThan(0); // the stream was live during the window
    expect(Math.max(0, ...w.longTasks)).toBeLessThan(250);
    expect(w.maxGap).toBeLessThan(500);
    expect(w.busyMs / WINDOW_MS).toBeLessThan(0.25);
    expect(w.renders).toBeLessThanOrEqual(2 * (WINDOW_MS / 1000) + 1);

    // Interactions: sort by name, then page 2, are on screen within 500 ms.
    const sortMs = await latency(
      'button[data-sort="name"]',
      `document.querySelector('th[data-col="name"]').getAttribute('aria-sort') === 'ascending'`,
    );
    const pageMs = await latency(
      'button[aria-label="Next page"]',
      `document.querySelector('.page-label').textContent === 'page 2 of 20'`,
    );
    lap(`sort ${sortMs} ms, next page ${pageMs} ms`);
    expect(sortMs).toBeLessThan(500);
    expect(pageMs).toBeLessThan(500);
    const first = await page.textContent('#islands-table tbody tr td:first-child .nm');
    expect(first).toMatch(/^sim-\d{3}$/);
    expect(page.url()).toContain('sort=name');
    expect(page.url()).toContain('page=2');
  });

  it('switches views quickly with 1,000 islands (leaderboard, overview, admin)', async () => {
    const { page } = browser;
    const tabs: Record<string, number> = {};
    for (const tab of ['leaderboard', 'overview', 'admin', 'islands']) {
      tabs[tab] = await latency(`#tab-${tab}`, `!document.querySelector('#panel-${tab}').hidden`);
      await page.waitForTimeout(300);
    }
    lap(`tab switches ${JSON.stringify(tabs)}`);
    for (const ms of Object.values(tabs)) expect(ms).toBeLessThan(500);
    // The leaderboard credits display names: 1,000 islands under 400 names, none with credit yet.
    await page.click('#tab-leaderboard');
    await expect.poll(() => page.isVisible('#leaderboard-empty'), { timeout: 10_000 }).toBe(true);
    await page.click('#tab-overview');
    const w = await measure(3000);
    lap(`overview: ${JSON.stringify(w)}`);
    expect(Math.max(0, ...w.longTasks)).toBeLessThan(250);
    expect(browser.logs.filter((l) => l.startsWith('pageerror'))).toEqual([]);
  });
});
