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
import { getJson, type Proc, ROOT, type ServerHandle, startIsland, startServer } from './helpers/dashboard-server.ts';

const TOKEN = 'dashboard-e2e-admin-token';
const ARTIFACTS = join(ROOT, 'test-artifacts');

interface Status {
  paused: boolean;
  version: number;
  islandsOnline: number;
}

let server: ServerHandle;
let browser: LaunchedBrowser;
const islands: Proc[] = [];
const t0 = Date.now();
const lap = (what: string) =>
  process.stderr.write(`[e2e-dashboard] ${what} at ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);

/** The page's own instrumentation (client/dashboard/main.ts). */
async function dash<T>(expr: string): Promise<T> {
  return browser.page.evaluate(`(() => { const d = window.__atollDashboard; return (${expr}); })()`) as Promise<T>;
}

/** Distinct display names in the islands table (an island that reconnects may be listed twice). */
async function tableNames(): Promise<string[]> {
  const names = await browser.page.$$eval('#islands-table tbody tr td:first-child .nm', (els) =>
    els.map((e) => e.textContent ?? ''),
  );
  return [...new Set(names)].sort();
}

const pageErrors = () => browser.logs.filter((l) => l.startsWith('pageerror'));

describe('dashboard e2e', () => {
  beforeAll(async () => {
    const buildMs = ensureClientBuild();
    lap(`client build ${buildMs} ms`);
    [server, browser] = await Promise.all([
      // sync rounds: the islands table's quality (cosine with the round's merged Δ) is a sync-round figure
      startServer({ token: TOKEN, args: ['--inner-steps', '4', '--mode', 'sync', '--codec', 'int8'] }),
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
    await expect
      .poll(() => page.textContent('#islands-empty'), { timeout: 10_000 })
      .toContain('No islands have joined yet');
    expect(await page.isVisible('#islands-empty')).toBe(true);
    // the headline fills in on the first status tick, which may come after the empty table
    await expect.poll(() => page.textContent('#fig-islands'), { timeout: 10_000 }).toBe('0');
    await expect.poll(() => page.textContent('#islands-summary'), { timeout: 10_000 }).toContain('0 of 0');

    await page.click('#tab-leaderboard');
    // renders are coalesced (≤ 2/s): the empty state shows on the next one
    await expect.poll(() => page.isVisible('#leaderboard-empty'), { timeout: 10_000 }).toBe(true);
    await page.click('#tab-overview');
    // the optimizer's charts (lr, norm) among them: test/e2e-dashboard-charts.test.ts reads them
    expect(await page.locator('#charts .chart').count()).toBe(9);
    // Charts that need deltas say what they wait for instead of drawing nothing.
    await expect
      .poll(() => page.textContent('#chart-staleness .plot-empty'), { timeout: 10_000 })
      .toContain('No accepted deltas yet');
    // One point (version 0): the time axis reads as clock times, not a span of days; the
    // islands-online axis counts in whole numbers ("0, 1", never "0, 1, 1").
    await expect.poll(() => page.getAttribute('#chart-version', 'data-x-ticks'), { timeout: 10_000 }).toBeTruthy();
    expect(await page.getAttribute('#chart-version', 'data-points')).toBe('1');
    const xTicks = (await page.getAttribute('#chart-version', 'data-x-ticks'))!.split('|').filter(Boolean);
    expect(xTicks.length).toBeGreaterThan(0);
    for (const t of xTicks) expect(t).toMatch(/^\d\d:\d\d(:\d\d)?$/);
    const yTicks = (await page.getAttribute('#chart-islands', 'data-y-ticks'))!.split('|');
    expect(new Set(yTicks).size).toBe(yTicks.length);
    for (const t of yTicks) expect(t).toMatch(/^\d+$/);
    expect(pageErrors()).toEqual([]);
  });

  it('live run: lists both islands and the loss chart gains points while open', async () => {
    const { page } = browser;
    islands.push(startIsland(server.url, 'alice'), startIsland(server.url, 'bob'));
    await page.click('#tab-islands');
    await expect.poll(tableNames, { timeout: 60_000, interval: 500 }).toEqual(['alice', 'bob']);
    lap('both islands listed');
    const engines = await page.$$eval('#islands-table tbody tr td:nth-child(2)', (els) =>
      els.map((e) => e.textContent),
    );
    expect(engines.every((e) => e?.startsWith('cpu'))).toBe(true);
    // the numerics each island's hello reported (CPU islands: f32 on one device)
    expect(
      await page.$$eval('#islands-table tbody tr td:nth-child(3)', (els) => els.map((e) => e.textContent)),
    ).toEqual(['f32', 'f32']);

    await page.click('#tab-overview');
    const points = () => page.getAttribute('#chart-loss', 'data-points').then(Number);
    await expect.poll(points, { timeout: 30_000 }).toBeGreaterThanOrEqual(2);
    const before = await points();
    await expect.poll(points, { timeout: 60_000, interval: 500 }).toBeGreaterThanOrEqual(before + 2);
    lap(`loss chart ${before} → ${await points()} points`);
    expect(Number((await page.textContent('#fig-version'))?.replace(/,/g, ''))).toBeGreaterThan(0);
    expect(await page.textContent('#fig-islands')).toBe('2');
    expect(await page.textContent('#fig-mix')).toBe('off'); // this server does not mix (test/mix-live.test.ts: the figures when it does)
    expect(await dash<string>('d.connection')).toBe('live');
    expect(await dash<number>('d.messages')).toBeGreaterThan(2);

    lap('version, islands, live checked');
    // The TOKENS / S headline is the newest point's rate, the figure the chart ends on.
    await expect
      .poll(
        () =>
          dash<boolean>(
            'd.status.version === d.lastPoint.version && d.status.tokensPerSec === d.lastPoint.tokensPerSec && d.status.tokensPerSec > 0',
          ),
        { timeout: 10_000 },
      )
      .toBe(true);
    // Up and down bandwidth: told apart by colour and dash even where the values coincide.
    const styles = (await page.getAttribute('#chart-bytes', 'data-series'))!.split('|').map((x) => x.split(':'));
    const [up, down] = [styles.find((x) => x[0].startsWith('up')), styles.find((x) => x[0].startsWith('down'))];
    expect(up![1]).not.toBe(down![1]);
    expect(up![2]).not.toBe(down![2]);
    await page.click('#tab-leaderboard');
    await expect
      .poll(() => page.$$eval('#leaderboard-table tbody td.t-name', (els) => els.map((e) => e.textContent).sort()), {
        timeout: 30_000,
      })
      .toEqual(['alice', 'bob']);

    await page.click('#tab-overview');
    await page.waitForTimeout(800); // staged chart builds + legend
    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard.png'), fullPage: true });
    lap('screenshot');
    expect(pageErrors()).toEqual([]);
  });

  it('island view of a live CPU island (#island=ID); the table sorts and filters by quality', async () => {
    const { page } = browser;
    const list = await getJson<{ islands: Array<{ id: string; name: string; status: string; cosine: number | null }> }>(
      `${server.url}/api/islands`,
    );
    const alice = list.islands.find((i) => i.name === 'alice' && i.status === 'online')!;
    await page.goto(`${server.url}/dashboard#island=${alice.id}`);
    await page.waitForSelector('#panel-island:not([hidden])', { timeout: 10_000 });
    await expect.poll(() => page.textContent('#island-name'), { timeout: 10_000 }).toBe('Island alice');
    expect(await page.isHidden('#panel-overview')).toBe(true);
    const facts = () => page.textContent('#island-facts');
    await expect.poll(facts, { timeout: 10_000 }).toMatch(/Speed[\d.,]+ (k )?tokens\/s/);
    // sync rounds with two islands: every accepted Δ has a cosine with its round's merged Δ
    await expect
      .poll(async () => Number((await facts())!.match(/Quality \(cosine, last 10\)(-?[\d.]+)/)?.[1]), {
        timeout: 30_000,
      })
      .toBeGreaterThan(-1);
    expect(await facts()).toMatch(/Inner steps \(next round\)4/);
    await expect
      .poll(() => page.getAttribute('#chart-island-quality', 'data-points').then(Number), { timeout: 20_000 })
      .toBeGreaterThanOrEqual(1);
    expect(await page.textContent('#island-rejections')).toBeTruthy();
    await page.waitForTimeout(500);
    await page.screenshot({ path: join(ARTIFACTS, 'dashboard-island.png'), fullPage: true });

    // back to the table: sort by quality, then filter on it
    await page.click('#island-back');
    await page.click('#tab-islands');
    await page.click('button[data-sort="quality"]');
    await expect
      .poll(() => page.getAttribute('th[data-col="quality"]', 'aria-sort'), { timeout: 5_000 })
      .toBe('descending');
    const qualities = async () =>
      (
        await page.$$eval('#islands-table tbody tr', (rows) =>
          rows.map((r) => r.querySelector('td:nth-child(9)')?.textContent ?? ''),
        )
      ).map(Number);
    await expect.poll(async () => (await qualities()).every((q) => Number.isFinite(q)), { timeout: 10_000 }).toBe(true);
    const qs = await qualities();
    expect([...qs].sort((a, b) => b - a)).toEqual(qs);
    await page.selectOption('#island-status', 'quality>=0.5');
    await page.waitForTimeout(600);
    for (const q of await qualities()) expect(q).toBeGreaterThanOrEqual(0.5);
    await page.selectOption('#island-status', 'quality<0.5');
    await page.waitForTimeout(600);
    for (const q of await qualities()) expect(q).toBeLessThan(0.5);
    await page.selectOption('#island-status', '');
    // a row opens its island
    await page.click('#islands-table tbody tr');
    await page.waitForSelector('#panel-island:not([hidden])');
    expect(await page.evaluate(() => location.hash)).toContain('island=');
    expect(pageErrors()).toEqual([]);
  });

  it('falls back to polling the REST API when the socket.io stream is blocked', async () => {
    const page = await browser.context.newPage();
    try {
      await page.route('**/socket.io/**', (route) => route.abort());
      await page.goto(`${server.url}/dashboard#tab=islands`);
      await page.waitForSelector('#connection[data-state="polling"]', { timeout: 15_000 });
      await expect
        .poll(
          async () =>
            [
              ...new Set(
                await page.$$eval('#islands-table tbody tr td:first-child .nm', (els) => els.map((e) => e.textContent)),
              ),
            ].sort(),
          { timeout: 15_000 },
        )
        .toEqual(['alice', 'bob']);
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
    await expect
      .poll(() => page.getAttribute('th[data-col="name"]', 'aria-sort'), { timeout: 5_000 })
      .toBe('ascending');
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
    await expect
      .poll(() => page.getAttribute('th[data-col="speed"]', 'aria-sort'), { timeout: 5_000 })
      .toBe('descending');
    // Keyboard: arrow keys move between tabs.
    await page.focus('#tab-islands');
    await page.keyboard.press('ArrowRight');
    await expect.poll(() => page.getAttribute('#tab-leaderboard', 'aria-selected'), { timeout: 5_000 }).toBe('true');
    expect(await page.evaluate(() => document.activeElement?.id)).toBe('tab-leaderboard');
  });

  it('run panel: configuration in words and units, checkpoint downloads and a sample', async () => {
    const { page } = browser;
    await page.goto(`${server.url}/dashboard#tab=run`);
    await expect.poll(() => page.locator('#run-config tr').count(), { timeout: 10_000 }).toBeGreaterThan(10);
    expect(await page.textContent('#run-config')).toContain('coordinator.outer.lr');
    const facts = (await page.textContent('#run-facts'))!;
    expect(facts).toContain('GPT-2: 2 layers, 2 heads, width 32, context 32 tokens');
    expect(facts).toMatch(/H = 4/);
    expect(facts).toMatch(/Traffic per island and round.*(KiB|MiB|B) up/);
    expect(facts).not.toMatch(/null|undefined|bytesPerRound|innerSteps/);
    await page.click('#checkpoints-refresh');
    await expect.poll(() => page.locator('#checkpoints-table tbody a').count(), { timeout: 20_000 }).toBeGreaterThan(0);
    lap('checkpoints listed');
    // One name per checkpoint: link text, download attribute and the server's filename agree.
    // one snapshot of the last row, the oldest: kept as the first of its span of versions, while the newest
    // ones the table lists may be pruned by the time they are fetched (rounds land every few hundred ms here)
    const row = await page.evaluate(() => {
      const tr = document.querySelector('#checkpoints-table tbody tr:last-child')!;
      const a = tr.querySelector('a.dl-atoll')!,
        hf = tr.querySelector('a.dl-hf')!;
      return {
        href: a.getAttribute('href'),
        name: a.textContent,
        download: a.getAttribute('download'),
        hfHref: hf.getAttribute('href'),
        hfDownload: hf.getAttribute('download'),
      };
    });
    const { href, name } = row;
    expect(href).toMatch(/^\/api\/checkpoints\/\d+$/);
    expect(name).toMatch(/^default-v\d+\.safetensors$/);
    expect(row.download).toBe(name);
    const dl = await fetch(server.url + href);
    expect(dl.status).toBe(200);
    expect(dl.headers.get('content-disposition')).toBe(`attachment; filename="${name}"`);
    expect((await dl.arrayBuffer()).byteLength).toBeGreaterThan(1000);
    // The transformers download: a tar of the export folder.
    const hfName = name!.replace('.safetensors', '-hf.tar');
    expect(row.hfDownload).toBe(hfName);
    const tar = new Uint8Array(await (await fetch(server.url + row.hfHref)).arrayBuffer());
    const entries: string[] = [];
    for (let at = 0; at + 512 <= tar.length && tar[at] !== 0; ) {
      const h = new TextDecoder().decode(tar.subarray(at, at + 512));
      entries.push(h.slice(0, 100).replace(/\0.*$/s, ''));
      at += 512 + Math.ceil(parseInt(h.slice(124, 136), 8) / 512) * 512;
    }
    const folder = hfName.replace('.tar', '');
    expect(entries.sort()).toEqual(
      ['config.json', 'model.safetensors', 'special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json'].map(
        (f) => `${folder}/${f}`,
      ),
    );

    lap('checkpoint downloaded');
    await page.fill('#sample-tokens', '40');
    await page.click('#sample-button');
    await expect
      .poll(() => page.textContent('#sample-meta'), { timeout: 30_000 })
      .toMatch(/40 tokens from version \d+/);
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

    // Wrong token: refused on entry; the controls stay disabled; the run is not paused.
    await page.fill('#admin-token', 'not-the-token');
    await page.click('#admin-token-save');
    // the token is checked on entry (GET /api/admin/whoami, which changes nothing)
    await page.waitForSelector('#admin-token-state[data-verdict="refused"]', { timeout: 5_000 });
    // a refused token leaves every action disabled, and says why
    await page.waitForTimeout(600);
    for (const id of ['#admin-pause', '#admin-resume', '#admin-checkpoint', '#admin-config-apply', '#admin-ban'])
      expect(await page.isDisabled(id)).toBe(true);
    expect(await page.textContent('#admin-gate')).toContain('refused');
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
    await expect
      .poll(() => page.textContent('#admin-answer'), { timeout: 10_000 })
      .toMatch(/^config \{"outerLr":0\.5\}: 200 OK/);
    const run = await getJson<{ config: { coordinator: { outer: { lr: number } } } }>(`${server.url}/api/run`);
    expect(run.config.coordinator.outer.lr).toBe(0.5);

    lap('config patched');
    // Ban bob.
    const list = await getJson<{ islands: Array<{ id: string; name: string; status: string }> }>(
      `${server.url}/api/islands`,
    );
    const bob = list.islands.find((i) => i.name === 'bob' && i.status === 'online')!;
    await page.fill('#admin-ban-id', bob.id);
    await page.fill('#admin-ban-reason', 'e2e');
    await page.click('#admin-ban');
    await expect.poll(() => page.textContent('#admin-answer'), { timeout: 10_000 }).toContain(`ban ${bob.id}: 200 OK`);
    const after = await getJson<{ islands: Array<{ id: string; status: string }> }>(`${server.url}/api/islands`);
    expect(after.islands.find((i) => i.id === bob.id)?.status).toBe('banned');
    expect(pageErrors()).toEqual([]);
  });

  it('phone width (390 px): no horizontal overflow, every tab reachable, the islands table scrolls in its frame', async () => {
    const page = await browser.context.newPage();
    try {
      await page.setViewportSize({ width: 390, height: 844 });
      await page.goto(`${server.url}/dashboard#tab=overview`);
      await page.waitForSelector('#connection[data-state="live"]', { timeout: 20_000 });
      const overflow = () => page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      for (const tab of ['overview', 'islands', 'leaderboard', 'run', 'admin']) {
        await page.click(`#tab-${tab}`);
        await page.waitForSelector(`#panel-${tab}:not([hidden])`);
        await page.waitForTimeout(700); // staged chart builds, coalesced renders
        expect(await overflow(), tab).toBeLessThanOrEqual(0);
        const box = (await page.locator(`#tab-${tab}`).boundingBox())!;
        expect(box.x + box.width, tab).toBeLessThanOrEqual(390);
        if (tab === 'overview') await page.screenshot({ path: join(ARTIFACTS, 'dashboard-390.png'), fullPage: true });
        if (tab === 'islands') {
          // names are readable, not squeezed to "volu…"
          const cell = page.locator('#islands-table tbody tr td.t-name .nm').first();
          expect(await cell.evaluate((e) => e.scrollWidth <= e.clientWidth + 1)).toBe(true);
          await page.screenshot({ path: join(ARTIFACTS, 'dashboard-390-islands.png') });
        }
      }
    } finally {
      await page.close();
    }
  });

  it('the badge says offline within one missed heartbeat of a frozen server, and live again when it answers', async () => {
    const { page } = browser;
    await page.goto(`${server.url}/dashboard#tab=overview`);
    await page.waitForSelector('#connection[data-state="live"]', { timeout: 20_000 });
    // SIGSTOP: the socket stays open, the server says nothing (what a hung or unplugged host looks like).
    const t0 = Date.now();
    server.child.kill('SIGSTOP');
    try {
      await page.waitForSelector('#connection[data-state="offline"]', { timeout: 10_000 });
      const ms = Date.now() - t0;
      lap(`offline after ${ms} ms`);
      // heartbeat 500 ms: one missed (1 s) + 1 s of slack + the watchdog's 250 ms + a render
      expect(ms).toBeLessThan(4_000);
      expect(await page.textContent('#connection')).toBe('offline');
    } finally {
      server.child.kill('SIGCONT');
    }
    await page.waitForSelector('#connection[data-state="live"]', { timeout: 20_000 });
    expect(pageErrors()).toEqual([]);
  });
});
