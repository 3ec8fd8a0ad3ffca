// End to end: the researchers' dashboard (/dashboard) in real headless Chromium against a real
// `atoll serve --preset tiny` and two Node islands (CPU engine).
//
//   1. Opened before any island has joined: empty states, no errors, live socket.
//   2. Live run: both islands appear in the islands table and the loss chart gains points
//      while the page is open. Screenshot: test-artifacts/dashboard.png.
//   3. With the socket.io stream blocked, the page polls the REST API and still updates.
//   4. Deep links: tab, sort, filter and chart x-axis live in the URL hash; a reload restores them.
//   5. Run panel: configuration, checkpoints with download links, a sample from the model.
//   6. Admin: a wrong token is refused and nothing changes; the right one pauses and resumes
//      (checked on /api/status), edits a hyperparameter, and bans an island.
//
// One server, one browser page for all steps, in order.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureClientBuild, launchChromium, type LaunchedBrowser } from './helpers/browser.ts';
import { getJson, type Proc, ROOT, type ServerHandle, startIsland, startServer, waitFor } from './helpers/dashboard-server.ts';

const TOKEN = 'dashboard-e2e-admin-token';
const ARTIFACTS = join(ROOT, 'test-artifacts');

interface Status { paused: boolean; version: number; islandsOnline: number }

let server: ServerHandle;
let browser: LaunchedBrowser;
const islands: Proc[] = [];
const t0 = Date.now();
const lap = (what: string) => process.stderr.write(`[e2e-dashboard] ${what} at ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);

/** The page's own instrumentation (client/dashboard/main.ts). */
async function dash<T>(expr: string): Promise<T> {
  return browser.page.evaluate(`(() => { const d = window.__atollDashboard; return (${expr}); })()`) as Promise<T>;
}

/** Distinct display names in the islands table (an island that reconnects may be listed twice). */
async function tableNames(): Promise<string[]> {
  const names = await browser.page.$$eval('#islands-table tbody tr td:first-child .nm', (els) => els.map((e) => e.textContent ?? ''));
  return [...new Set(names)].sort();
}

const pageErrors = () => browser.logs.filter((l) => l.startsWith('pageerror'));

describe('dashboard e2e', () => {
  beforeAll(async () => {
    const buildMs = ensureClientBuild();
    lap(`client build ${buildMs} ms`);
    [server, browser] = await Promise.all([
      startServer({ token: TOKEN, args: ['--inner-steps', '4'] }),
      launchChromium({ webgpu: false, viewport: { width: 1400, height: 1000 } }),
    ]);
    lap('server up');
  });

  afterAll(async () => {
    await browser?.close();
    await Promise.all(islands.map((i) => i.stop()));
    await server?.close();
    lap('done');
  });

  it('opens before any island has joined, with empty states', async () => {
    const { page } = browser;
    await page.goto(`${server.url}/dashboard#tab=islands`);
    await page.waitForSelector('#connection[data-state="live"]', { timeout: 20_000 });
    await expect.poll(() => page.textContent('#islands-empty'), { timeout: 10_000 }).toContain('No islands have joined yet');
    expect(await page.isVisible('#islands-empty')).toBe(true);
    // the headline fills in on the first status tick, which may come after the empty table
    await expect.poll(() => page.textContent('#fig-islands'), { timeout: 10_000 }).toBe('0');
    await expect.poll(() => page.textContent('#islands-summary'), { timeout: 10_000 }).toContain('0 of 0');

    await page.click('#tab-leaderboard');
    expect(await page.isVisible('#leaderboard-empty')).toBe(true);
    await page.click('#tab-overview');
    expect(await page.locator('.chart').count()).toBe(7);
    // Charts that need deltas say what they wait for instead of drawing nothing.
    await expect.poll(() => page.textContent('#chart-staleness .plot-empty'), { timeout: 10_000 }).toContain('No accepted deltas yet');
    expect(pageErrors()).toEqual([]);
  });

  it('live run: lists both islands and the loss chart gains points while open', async () => {
    const { page } = browser;
    islands.push(startIsland(server.url, 'alice'), startIsland(server.url, 'bob'));
    await page.click('#tab-islands');
    await expect.poll(tableNames, { timeout: 60_000, interval: 500 }).toEqual(['alice', 'bob']);
    lap('both islands listed');
    const engines = await page.$$eval('#islands-table tbody tr td:nth-child(2)', (els) => els.map((e) => e.textContent));
    expect(engines.every((e) => e?.startsWith('cpu'))).toBe(true);

    await page.click('#tab-overview');
    const points = () => page.getAttribute('#chart-loss', 'data-points').then(Number);
    await expect.poll(points, { timeout: 30_000 }).toBeGreaterThanOrEqual(2);
    const before = await points();
    await expect.poll(points, { timeout: 60_000, interval: 500 }).toBeGreaterThanOrEqual(before + 2);
    lap(`loss chart ${before} → ${await points()} points`);
    expect(Number((await page.textContent('#fig-version'))?.replace(/,/g, ''))).toBeGreaterThan(0);
    expect(await page.textContent('#fig-islands')).toBe('2');
    expect(await dash<string>('d.connection')).toBe('live');
    expect(await dash<number>('d.messages')).toBeGreaterThan(2);

    lap('version, islands, live checked');
    await page.click('#tab-leaderboard');
    await expect.poll(() => page.$$eval('#leaderboard-table tbody td.t-name', (els) => els.map((e) => e.textContent).sort()), { timeout: 30_000 }).toEqual(['alice', 'bob']);

    await page.click('#tab-overview');
    await page.waitForTimeout(800); // staged chart builds + legend
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png'), fullPage: true });
    lap('screenshot');
    expect(pageErrors()).toEqual([]);
  });

  it('falls back to polling the REST API when the socket.io stream is blocked', async () => {
    const page = await browser.context.newPage();
    try {
      await page.route('**/socket.io/**', (route) => route.abort());
      await page.goto(`${server.url}/dashboard#tab=islands`);
      await page.waitForSelector('#connection[data-state="polling"]', { timeout: 15_000 });
      await expect.poll(async () => [...new Set(await page.$$eval('#islands-table tbody tr td:first-child .nm', (els) => els.map((e) => e.textContent)))].sort(), { timeout: 15_000 }).toEqual(['alice', 'bob']);
      const version = async () => Number((await page.textContent('#fig-version'))?.replace(/,/g, ''));
      const v0 = await version();
      await expect.poll(version, { timeout: 30_000, interval: 500 }).toBeGreaterThan(v0);
    } finally {
      await page.close();
    }
  });

  it('keeps the view state in the URL: a reload restores tab, sort, filter and x-axis', async () => {
    const { page } = browser;
    await page.goto(`${server.url}/dashboard#tab=islands&sort=name&dir=asc&q=ali`);
    await page.reload();
    await expect.poll(tableNames, { timeout: 10_000 }).toEqual(['alice']);
    expect(await page.inputValue('#island-filter')).toBe('ali');
    await expect.poll(() => page.getAttribute('th[data-col="name"]', 'aria-sort'), { timeout: 5_000 }).toBe('ascending');
    expect(await page.getAttribute('#tab-islands', 'aria-selected')).toBe('true');

    // Change things through the UI: the hash follows, and a reload brings them back.
    await page.fill('#island-filter', '');
    await page.click('button[data-sort="speed"]');
    await page.click('#tab-overview');
    await page.click('label[for="x-tokens"]');
    const hash = await page.evaluate(() => location.hash);
    expect(hash).toContain('tab=overview');
    expect(hash).toContain('sort=speed');
    expect(hash).toContain('x=tokens');
    expect(hash).not.toContain('q=');
    await page.reload();
    await page.waitForSelector('#panel-overview:not([hidden])');
    expect(await page.isChecked('#x-tokens')).toBe(true);
    await page.click('#tab-islands');
    // renders are coalesced (≤ 2/s), so the table may draw a moment after the click
    await expect.poll(() => page.getAttribute('th[data-col="speed"]', 'aria-sort'), { timeout: 5_000 }).toBe('descending');
    // Keyboard: arrow keys move between tabs.
    await page.focus('#tab-islands');
    await page.keyboard.press('ArrowRight');
    await expect.poll(() => page.getAttribute('#tab-leaderboard', 'aria-selected'), { timeout: 5_000 }).toBe('true');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('tab-leaderboard');
  });

  it('run panel: configuration, checkpoint downloads and a sample', async () => {
    const { page } = browser;
    await page.goto(`${server.url}/dashboard#tab=run`);
    await expect.poll(() => page.locator('#run-config tr').count(), { timeout: 10_000 }).toBeGreaterThan(10);
    expect(await page.textContent('#run-config')).toContain('coordinator.outer.lr');
    await page.click('#checkpoints-refresh');
    await expect.poll(() => page.locator('#checkpoints-table tbody a').count(), { timeout: 20_000 }).toBeGreaterThan(0);
    lap('checkpoints listed');
    const href = await page.getAttribute('#checkpoints-table tbody a', 'href');
    expect(href).toMatch(/^\/api\/checkpoints\/\d+$/);
    const dl = await fetch(server.url + href);
    expect(dl.status).toBe(200);
    expect((await dl.arrayBuffer()).byteLength).toBeGreaterThan(1000);

    lap('checkpoint downloaded');
    await page.fill('#sample-tokens', '40');
    await page.click('#sample-button');
    await expect.poll(() => page.textContent('#sample-meta'), { timeout: 30_000 }).toMatch(/40 tokens from version \d+/);
    expect((await page.textContent('#sample-output'))!.length).toBeGreaterThan(0);
    lap('sampled');
  });

  it('admin: a wrong token is refused and changes nothing; the right one pauses, resumes, edits, bans', async () => {
    const { page } = browser;
    const status = () => getJson<Status>(`${server.url}/api/status`);
    await page.goto(`${server.url}/dashboard#tab=admin`);
    // No token (this tab never had one): the controls say so and are disabled.
    expect(await page.textContent('#admin-gate')).toContain('disabled');
    expect(await page.isDisabled('#admin-pause')).toBe(true);

    // Wrong token: the server's refusal is shown; the run is not paused.
    await page.fill('#admin-token', 'not-the-token');
    await page.click('#admin-token-save');
    // the token is checked on entry (GET /api/admin/whoami, which changes nothing)
    await page.waitForSelector('#admin-token-state[data-verdict="refused"]', { timeout: 5_000 });
    expect(await page.isDisabled('#admin-pause')).toBe(false);
    await page.click('#admin-pause');
    await page.waitForSelector('#admin-answer[data-status="401"]');
    expect(await page.textContent('#admin-answer')).toMatch(/401 refused.*E_UNAUTHORIZED/);
    expect(await page.textContent('#admin-answer')).toContain('nothing was changed');
    expect(await page.getAttribute('#admin-token-state', 'data-verdict')).toBe('refused');
    expect((await status()).paused).toBe(false);
    await page.waitForTimeout(600);
    expect(await page.isHidden('#header-paused')).toBe(true);

    lap('wrong token refused');
    // Right token: pause → /api/status paused; the header says so.
    await page.fill('#admin-token', TOKEN);
    await page.click('#admin-token-save');
    await page.click('#admin-pause');
    await page.waitForSelector('#admin-answer[data-status="200"]');
    expect(await page.textContent('#admin-answer')).toContain('pause: 200 OK');
    expect((await status()).paused).toBe(true);
    await page.waitForSelector('#header-paused:not([hidden])', { timeout: 5_000 });

    lap('paused');
    // The token survives a reload (sessionStorage); resume undoes the pause.
    await page.reload();
    expect(await page.textContent('#admin-token-state')).toContain('Token set');
    await page.click('#admin-resume');
    await page.waitForSelector('#admin-answer[data-status="200"]');
    expect((await status()).paused).toBe(false);
    await page.waitForSelector('#header-paused', { state: 'hidden', timeout: 5_000 });

    lap('resumed');
    // A hyperparameter edit goes through PATCH and shows up in /api/run.
    await expect.poll(() => page.inputValue('#cfg-outerLr'), { timeout: 5_000 }).toBe('0.7');
    await page.fill('#cfg-outerLr', '0.5');
    await page.click('#admin-config-apply');
    await expect.poll(() => page.textContent('#admin-answer'), { timeout: 10_000 }).toMatch(/^config \{"outerLr":0\.5\}: 200 OK/);
    const run = await getJson<{ config: { coordinator: { outer: { lr: number } } } }>(`${server.url}/api/run`);
    expect(run.config.coordinator.outer.lr).toBe(0.5);

    lap('config patched');
    // Ban bob.
    const list = await getJson<{ islands: Array<{ id: string; name: string; status: string }> }>(`${server.url}/api/islands`);
    const bob = list.islands.find((i) => i.name === 'bob' && i.status === 'online')!;
    await page.fill('#admin-ban-id', bob.id);
    await page.fill('#admin-ban-reason', 'e2e');
    await page.click('#admin-ban');
    await expect.poll(() => page.textContent('#admin-answer'), { timeout: 10_000 }).toContain(`ban ${bob.id}: 200 OK`);
    const after = await getJson<{ islands: Array<{ id: string; status: string }> }>(`${server.url}/api/islands`);
    expect(after.islands.find((i) => i.id === bob.id)?.status).toBe('banned');
    expect(pageErrors()).toEqual([]);
  });
});
