// End to end, a volunteer's first minutes on the `small` preset (the browser default) in headless
// Chromium on SwiftShader, where one full-batch step takes about a minute:
//   - before the click the page shows the costs it can know (download once, upload per round);
//   - after the click the device measures its speed without a full-batch step (batches of 1 and 2,
//     scaled by FLOPs), and the per-hour network cost appears at that speed;
//   - the first round is sized from it to the target round time (within 50 %), the first accepted
//     round arrives within 3 minutes of the click, and the page counts what was sent and received;
//   - the real steps' speed replaces the estimate in what the page saves for the next visit;
//   - the run is `npm start`'s (async, sparse up, int4 down): the first accepted round lowers the
//     global held-out loss below v0's (the cold start's warmup), and the cost card's bytes per round
//     are within 10 % of what the page counted.
// The run's round target is ROUND_S (the preset's 90 s would make two steps of a minute here:
// inside the criteria, but over this file's time budget). Figures go to test-artifacts/.

import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Assignment } from '../core/protocol.ts';
import { ensureClientBuild, launchChromium, type LaunchedBrowser } from './helpers/browser.ts';
import { freePort, getJson, ROOT, type ServeProc, spawnServe, tempDir, waitFor } from './helpers/server.ts';
import { openVolunteerPage, pageLog, pageView, type PageView, textOf } from './helpers/volunteer-page.ts';

const ARTIFACTS = join(ROOT, 'test-artifacts');
const ROUND_S = 30;
/** The bound: click to the first accepted round. */
const FIRST_ROUND_LIMIT_S = 180;

describe('volunteer page, small preset (Chromium, SwiftShader)', () => {
  let server: ServeProc | null = null;
  let gpu: LaunchedBrowser | null = null;
  let url = '';
  const runDir = tempDir('atoll-volunteer-small-');
  const figures: Record<string, number | string> = {};

  beforeAll(async () => {
    ensureClientBuild();
    mkdirSync(ARTIFACTS, { recursive: true });
    const port = await freePort();
    server = await spawnServe(['--preset', 'small', '--run-dir', runDir, '--round-time', String(ROUND_S)], port);
    url = `http://localhost:${port}`; // localhost: a secure context, so WebGPU is offered
    gpu = await launchChromium({ webgpu: true });
  }, 120_000);

  afterAll(async () => {
    const log = gpu ? await pageLog(gpu).catch(() => []) : [];
    writeFileSync(join(ARTIFACTS, 'volunteer-small.json'), JSON.stringify({ figures, log }, null, 2));
    process.stderr.write(`e2e-volunteer-small figures: ${JSON.stringify(figures)}\n`);
    await gpu?.close();
    await server?.stop();
    rmSync(runDir, { recursive: true, force: true });
  });

  it(
    'the first round is sized to the device and accepted within 3 minutes of the click, with its costs shown',
    async () => {
      const page = gpu!.page;
      await openVolunteerPage(gpu!, `${url}/`);
      const run = await getJson<{
        batch: number;
        seqLen: number;
        modelBytes: number;
        data: { trainBytes: number };
        bytesPerRound: { up: number; down: number };
        config: { coordinator: { mode: string; uplink: { encoding: string } } };
      }>(`${url}/api/run`);
      expect(run.config.coordinator).toMatchObject({ mode: 'async', uplink: { encoding: 'sparse' } });
      await textOf(gpu!, '#cost-down', 'once');
      await textOf(gpu!, '#cost-up', 'per round');
      await textOf(gpu!, '#cost-hour', 'Known once');

      const clicked = Date.now();
      await page.click('#start');
      const pageError = (v: PageView) => {
        if (v.phase === 'error') throw new Error(`page error: ${JSON.stringify(v)}`);
      };
      const cal = await waitFor(
        'the speed measurement',
        async () => {
          const v = await pageView(gpu!);
          pageError(v);
          return v.calibration;
        },
        150_000,
        250,
      );
      figures.clickToMeasuredS = round1((Date.now() - clicked) / 1000);
      figures.calibrationS = round1(cal!.ms / 1000);
      figures.calibrationSteps = cal!.timed.map((t) => `${t.B}: ${round1(t.ms / 1000)} s`).join(', ');
      figures.estimatedStepS = round1(cal!.stepMs / 1000);
      // a slow device is not charged a full-batch step for its measurement
      expect(cal!.estimated, 'a step of about a minute is estimated, not timed').toBe(true);
      expect(cal!.ms).toBeLessThan(cal!.stepMs);
      // the per-hour cost at this speed, as the round planner will size rounds
      const hour = await textOf(gpu!, '#cost-hour', 'an hour', 10_000);
      expect(hour).toContain('a round every');

      const accepted = await waitFor(
        'the first accepted round',
        async () => {
          const v = await pageView(gpu!);
          pageError(v);
          return v.roundsAccepted >= 1 ? v : null;
        },
        2 * FIRST_ROUND_LIMIT_S * 1000,
        500,
      );
      const clickToAcceptedS = (Date.now() - clicked) / 1000;
      figures.clickToFirstAcceptedS = round1(clickToAcceptedS);
      const first = await page.evaluate(
        () => (globalThis as unknown as { __atoll: { assignments: Assignment[] } }).__atoll.assignments[0],
      );
      // the real steps' median (compute only), against the estimate
      const stepS = accepted!.stepMs! / 1000;
      const plannedS = (first.innerSteps * cal!.stepMs) / 1000;
      const trainS = first.innerSteps * stepS;
      Object.assign(figures, {
        firstRoundSteps: first.innerSteps,
        targetS: ROUND_S,
        plannedS: round1(plannedS),
        plannedOverTarget: round2(plannedS / ROUND_S),
        stepS: round1(stepS),
        trainS: round1(trainS),
        trainOverTarget: round2(trainS / ROUND_S),
        estimateOverStep: round2(cal!.stepMs / 1000 / stepS),
      });
      // the first contribution never hurts: the version holding it evaluates below v0
      const evals = await waitFor(
        'the eval of the first accepted version',
        async () => {
          const { points } = await getJson<{ points: Array<{ version: number; evalLoss: number | null }> }>(
            `${url}/api/history`,
          );
          const v0 = points.find((p) => p.version === 0)?.evalLoss,
            v1 = points.find((p) => p.version >= 1 && p.evalLoss !== null)?.evalLoss;
          return v0 != null && v1 != null ? { v0, v1 } : null;
        },
        60_000,
        500,
      );
      Object.assign(figures, { evalV0: round3(evals!.v0), evalFirstAccepted: round3(evals!.v1) });
      expect(evals!.v1, JSON.stringify(figures)).toBeLessThan(evals!.v0);

      // the cost card against what the page counted: one Δ up, and (past the model and text) one update down
      const down = await waitFor(
        'the first update downloaded',
        async () => {
          const v = await pageView(gpu!);
          return v.bytesDown > run.modelBytes + run.data.trainBytes ? v : null;
        },
        30_000,
        250,
      );
      const cardUp = bytesIn(await textOf(gpu!, '#cost-up', 'per round'));
      const cardDown = bytesIn((await textOf(gpu!, '#cost-down', 'about', 20_000)).split('then')[1]);
      const pageUp = down!.bytesUp / (down!.roundsAccepted + down!.roundsRejected);
      const pageDown = down!.bytesDown - run.modelBytes - run.data.trainBytes;
      Object.assign(figures, {
        cardUp,
        pageUp,
        cardDown,
        pageDown: Math.round(pageDown),
        codecDownBound: run.bytesPerRound.down,
      });
      expect(Math.abs(cardUp / pageUp - 1), JSON.stringify(figures)).toBeLessThanOrEqual(0.1);
      expect(Math.abs(cardDown / pageDown - 1), JSON.stringify(figures)).toBeLessThanOrEqual(0.1);

      expect(accepted!.engine).toBe('webgpu');
      expect(first.batchSize * first.seqLen).toBe(run.batch * run.seqLen);
      expect(clickToAcceptedS, JSON.stringify(figures)).toBeLessThan(FIRST_ROUND_LIMIT_S);
      // sized from the measurement: the planned steps fit the target within 50 %, or are one step where one
      // measured step is already longer than the target (a slow machine: SwiftShader's step of small is about
      // the target here); as they ran, too, with 2× slack (a machine shared with other work makes steps
      // slower or faster than when measured)
      const oneLongStep = first.innerSteps === 1 && cal!.stepMs / 1000 >= ROUND_S;
      if (!oneLongStep) expect(Math.abs(plannedS / ROUND_S - 1), JSON.stringify(figures)).toBeLessThanOrEqual(0.5);
      expect(Math.abs(trainS / Math.max(ROUND_S, plannedS) - 1), JSON.stringify(figures)).toBeLessThanOrEqual(1);
      // the page counts the costs as it goes: one update up, the model and data down
      expect(accepted!.bytesUp).toBeGreaterThan(0);
      expect(accepted!.bytesUp).toBeLessThan(2 * run.bytesPerRound.up);
      expect(accepted!.bytesDown).toBeGreaterThan(0);
      await textOf(gpu!, '#s-up', (t) => t !== '–' && t !== '0 B');
      await textOf(gpu!, '#s-rounds', (t) => t !== '0' && t !== '–');

      await page.screenshot({ path: join(ARTIFACTS, 'volunteer-small.png'), fullPage: true });

      // the estimate gives way to the real steps' median, saved for the next visit (a reload re-uses
      // the saved measurement: test/e2e-volunteer.test.ts)
      expect(accepted!.calibration).toMatchObject({ estimated: false, stepMs: accepted!.stepMs });
      const saved = await page.evaluate(() =>
        Object.values({ ...localStorage })
          .map((v) => {
            try {
              return JSON.parse(v).calibration;
            } catch {
              return undefined;
            }
          })
          .find(Boolean),
      );
      expect(saved).toMatchObject({ estimated: false, stepMs: accepted!.stepMs });
    },
    2 * FIRST_ROUND_LIMIT_S * 1000 + 60_000,
  );
});

const round1 = (x: number) => Math.round(x * 10) / 10;
const round3 = (x: number) => Math.round(x * 1000) / 1000;
/** The first byte figure in a cost-card line ("115.8 KiB per round"), in bytes (to the text's 3 figures). */
function bytesIn(text: string): number {
  const m = /([\d.,]+)\s*(B|KiB|MiB|GiB)\b/.exec(text);
  if (!m) throw new Error(`no byte figure in ${JSON.stringify(text)}`);
  return Number(m[1].replace(/,/g, '')) * 1024 ** ['B', 'KiB', 'MiB', 'GiB'].indexOf(m[2]);
}
const round2 = (x: number) => Math.round(x * 100) / 100;
