// End to end: the dashboard's optimizer charts, log axis, config-change markers and run overlay, in real headless
// Chromium against a real `atoll serve --preset tiny` and a Node island (CPU engine).
//
//   1. The learning-rate and update-norm charts draw the history's innerLr, outerLr and updateNorm.
//   2. The loss chart's log axis is a toggle that lives in the URL (#log=1) and survives a reload.
//   3. An Admin PATCH of the outer lr made outside the page (REST, as curl would) becomes a marker at its version
//      on every chart over time or tokens, with the change in its tooltip and in the list above the charts,
//      and the outer-lr chart steps to the new value.
//      The island view's quality chart (over versions) marks it too.
//   4. The run's own metrics JSONL (<run folder>/metrics/scalars.jsonl), loaded as another run's file, is drawn
//      beside the loss, lr and norm curves; a file that is not one is refused in words.

import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureClientBuild, launchChromium, type LaunchedBrowser } from './helpers/browser.ts';
import { getJson, type Proc, ROOT, type ServerHandle, startIsland, startServer } from './helpers/dashboard-server.ts';

const TOKEN = 'dashboard-charts-e2e-token';
let server: ServerHandle;
let browser: LaunchedBrowser;
let island: Proc;
const pageErrors = () => browser.logs.filter((l) => l.startsWith('pageerror'));

/** A chart's newest value per series (ChartBox's data-latest: "label:value|…"). */
async function latest(id: string): Promise<Record<string, number | null>> {
  const attr = (await browser.page.getAttribute(`#chart-${id}`, 'data-latest')) ?? '';
  return Object.fromEntries(
    attr.split('|').map((kv) => {
      const at = kv.lastIndexOf(':');
      return [kv.slice(0, at), kv.slice(at + 1) === '' ? null : Number(kv.slice(at + 1))];
    }),
  );
}

describe('dashboard e2e: optimizer charts, log axis, config markers, overlay', () => {
  beforeAll(async () => {
    ensureClientBuild();
    [server, browser] = await Promise.all([
      startServer({ token: TOKEN, args: ['--inner-steps', '4', '--mode', 'sync', '--codec', 'int8'] }),
      launchChromium({ webgpu: false, viewport: { width: 1400, height: 1000 } }),
    ]);
    island = startIsland(server.url, 'alice');
  });

  afterAll(async () => {
    await browser?.close();
    await island?.stop();
    await server?.close();
  });

  it('draws the inner and outer lr and the outer update norm from the history', async () => {
    const { page } = browser;
    await page.goto(`${server.url}/dashboard#tab=overview`);
    await page.waitForSelector('#connection[data-state="live"]', { timeout: 20_000 });
    await expect
      .poll(() => page.getAttribute('#chart-norm', 'data-points').then(Number), { timeout: 60_000 })
      .toBeGreaterThanOrEqual(3);
    await expect.poll(async () => (await latest('lr'))['outer lr'], { timeout: 10_000 }).toBe(0.7);
    const inner = (await latest('lr'))['inner lr (AdamW)']!;
    expect(inner).toBeGreaterThan(0);
    expect(inner).toBeLessThanOrEqual(3e-3); // tiny's peak
    const last = await getJson<{ points: Array<{ innerLr: number | null; updateNorm: number }> }>(
      `${server.url}/api/history`,
    );
    expect(last.points.map((p) => p.innerLr)).toContain(inner);
    expect((await latest('norm'))['‖outer update‖']).toBeGreaterThan(0);
    expect(pageErrors()).toEqual([]);
  });

  it('puts the loss on a log axis with a toggle kept in the URL', async () => {
    const { page } = browser;
    await page.check('#loss-log');
    await expect.poll(() => page.evaluate(() => location.hash), { timeout: 5_000 }).toContain('log=1');
    await page.reload();
    await page.waitForSelector('#panel-overview:not([hidden])');
    expect(await page.isChecked('#loss-log')).toBe(true);
    await expect.poll(() => page.getAttribute('#chart-loss', 'data-y-scale'), { timeout: 10_000 }).toBe('log');
    // its ticks are drawn once the plot has drawn (uPlot commits after the build)
    const ticks = async () =>
      ((await page.getAttribute('#chart-loss', 'data-y-ticks')) ?? '').split('|').filter(Boolean);
    await expect.poll(async () => (await ticks()).length, { timeout: 5_000 }).toBeGreaterThan(1);
    expect(await page.getAttribute('#chart-lr', 'data-y-scale')).toBe('linear');
    await page.uncheck('#loss-log');
    await expect.poll(() => page.getAttribute('#chart-loss', 'data-y-scale'), { timeout: 5_000 }).toBe('linear');
    expect(await page.evaluate(() => location.hash)).not.toContain('log=');
    expect(pageErrors()).toEqual([]);
  });

  it('marks an Admin change made elsewhere at its version on every chart; the outer lr steps to it', async () => {
    const { page } = browser;
    const res = await fetch(`${server.url}/api/admin/config`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ outerLr: 0.5 }),
    });
    expect(res.status).toBe(200);
    const hist = await getJson<{ configChanges: Array<{ version: number; changes: Record<string, unknown> }> }>(
      `${server.url}/api/history`,
    );
    expect(hist.configChanges).toHaveLength(1);
    const v = hist.configChanges[0].version;
    // the page did not make the change: it learns of it from /api/history, at most 10 s later
    for (const id of ['loss', 'lr', 'norm', 'tps', 'islands', 'bytes', 'version', 'outcomes'])
      await expect.poll(() => page.getAttribute(`#chart-${id}`, 'data-markers'), { timeout: 20_000 }).toBe(String(v));
    expect(await page.getAttribute('#chart-staleness', 'data-markers')).toBe('');
    const marker = page.locator(`#chart-loss .cfg-marker[data-version="${v}"]`);
    await expect.poll(() => marker.count(), { timeout: 5_000 }).toBe(1);
    expect(await marker.getAttribute('title')).toBe(`v${v}: outerLr 0.5`);
    expect((await marker.boundingBox())!.height).toBeGreaterThan(100);
    expect(await page.textContent('#config-changes')).toContain(`v${v}: outerLr 0.5`);
    // on the tokens axis too
    await page.click('label[for="x-tokens"]');
    await expect.poll(() => page.locator('#chart-lr .cfg-marker').count(), { timeout: 5_000 }).toBe(1);
    // the next update is taken with the new outer lr
    await expect.poll(async () => (await latest('lr'))['outer lr'], { timeout: 30_000 }).toBe(0.5);
    // the island view's chart is over versions: the marker sits at the version itself
    const list = await getJson<{ islands: Array<{ id: string; name: string }> }>(`${server.url}/api/islands`);
    await page.goto(`${server.url}/dashboard#island=${list.islands.find((i) => i.name === 'alice')!.id}`);
    await expect
      .poll(() => page.getAttribute('#chart-island-quality', 'data-markers'), { timeout: 10_000 })
      .toBe(String(v));
    await page.goto(`${server.url}/dashboard#tab=overview&x=tokens`);
    expect(pageErrors()).toEqual([]);
  });

  it('overlays another run from its metrics JSONL, and refuses a file that is not one', async () => {
    const { page } = browser;
    const jsonl = readFileSync(join(server.runDir, 'metrics', 'scalars.jsonl'));
    await page.setInputFiles('#overlay-file', { name: 'baseline.jsonl', mimeType: 'text/plain', buffer: jsonl });
    await page.waitForSelector('#overlay-state[data-verdict="loaded"]', { timeout: 5_000 });
    expect(await page.textContent('#overlay-state')).toMatch(/^baseline: \d+ steps, 1 config change/);
    for (const [id, label] of [
      ['loss', 'baseline eval'],
      ['lr', 'baseline outer lr'],
      ['norm', 'baseline ‖outer update‖'],
    ])
      await expect.poll(() => page.getAttribute(`#chart-${id}`, 'data-series'), { timeout: 5_000 }).toContain(label);
    // the file's evals are this run's: the overlaid curve ends on an eval loss the history holds
    const overlaid = (await latest('loss'))['baseline eval'];
    const evals = (await getJson<{ points: Array<{ evalLoss: number | null }> }>(`${server.url}/api/history`)).points
      .map((p) => p.evalLoss)
      .filter((e) => e !== null);
    expect(evals).toContain(overlaid);
    await page.waitForTimeout(600);
    mkdirSync(join(ROOT, 'test-artifacts'), { recursive: true });
    await page.screenshot({ path: join(ROOT, 'test-artifacts', 'dashboard-overlay.png'), fullPage: true });

    await page.setInputFiles('#overlay-file', { name: 'x.jsonl', mimeType: 'text/plain', buffer: Buffer.from('hi\n') });
    await page.waitForSelector('#overlay-state[data-verdict="error"]', { timeout: 5_000 });
    expect(await page.textContent('#overlay-state')).toContain('x line 1 is not JSON');
    await expect
      .poll(() => page.getAttribute('#chart-loss', 'data-series'), { timeout: 5_000 })
      .not.toContain('baseline');
    expect(pageErrors()).toEqual([]);
  });
});
