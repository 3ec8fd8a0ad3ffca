// End to end: the volunteer page in real headless Chromium against a real `atoll serve`.
//
//   1. Before Start: the page explains the run and its costs, checks WebGPU, and nothing runs.
//   2. Start on WebGPU (SwiftShader): the page completes rounds; /api/islands shows a webgpu
//      island with accepted deltas. Screenshot: test-artifacts/volunteer.png.
//   3. The page's first inner-step losses equal the CPU reference engine's on the same assignment.
//   4. Pause mid-round and resume: the round goes on, nothing is lost, nothing is sent twice.
//   5. Server restart: the page reconnects by itself and goes on contributing.
//   6. Without WebGPU: a clear message and a CPU opt-in that contributes an accepted delta.
//   The run is the default setting (async, sparse); each page's first accepted round (WebGPU from the
//   cold start v0, the CPU page joining a trained θ) evaluates below the version it started from.
//   Also: the phase indicator passes through every phase of a round (screenshots of each, desktop
//   and phone, under test-artifacts/), the device measures its speed before the first round, a
//   sample while training stretches no step by more than 2×, and the busy-GPU back-off engages and
//   releases when steps are slowed down (a test hook in the engine wrapper).
//
// One server and one WebGPU page serve steps 1–5 in order (compiling the WebGPU pipelines on
// SwiftShader is the slowest part, so it is done once). Rounds aim at ROUND_S seconds.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JsEngine } from '../core/engine/js.ts';
import { decodeCheckpoint } from '../core/checkpoint.ts';
import { sampleBatch } from '../core/data/dataset.ts';
import { type Assignment, innerLearningRate } from '../core/protocol.ts';
import { SPARSE_MAX_INNER_STEPS } from '../core/coord/config.ts';
import type { IslandDetail, IslandView } from '../core/api.ts';
import { contributors } from '../core/credit.ts';
import { median } from '../core/coord/aggregate.ts';
import { ensureClientBuild, launchChromium, type LaunchedBrowser } from './helpers/browser.ts';
import { openVolunteerPage, pageLog, pageView, textOf } from './helpers/volunteer-page.ts';

const ROOT = resolve(import.meta.dirname, '..');
const ARTIFACTS = join(ROOT, 'test-artifacts');
/** Rounds aim at this long (DyLU from the speed the page measured before its first round). */
const ROUND_S = 6;
const TITLE = 'Moby-Dick, byte by byte (an e2e run)';

// ---------------------------------------------------------------------------------------------
// a restartable `atoll serve` child process (same port, same run folder)

interface Served {
  child: ChildProcess;
  output: string[];
  exited: Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => res(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

async function serve(port: number, runDir: string): Promise<Served> {
  // rounds of at least 3 steps (the pause test stops mid-round), sized to ROUND_S from the page's measured speed
  const config = `${runDir}.json`;
  // θ (tiny: 140 kB) in 16 kB chunks: the page downloads it chunk by chunk and keeps it (theta-cache.ts)
  writeFileSync(config, JSON.stringify({ coordinator: { minInnerSteps: 3 }, limits: { modelChunkBytes: 16_384 } }));
  const child = spawn(
    process.execPath,
    [
      join(ROOT, 'bin/atoll.js'),
      'serve',
      '--config',
      config,
      '--preset',
      'tiny',
      '--port',
      String(port),
      '--run-dir',
      runDir,
      '--host',
      '127.0.0.1',
      '--round-time',
      String(ROUND_S),
      '--title',
      TITLE,
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: process.env },
  );
  const output: string[] = [];
  const push = (b: Buffer) => {
    output.push(...b.toString().split('\n').filter(Boolean));
    if (process.env.ATOLL_E2E_LOG === '1') process.stderr.write(`[serve] ${b}`);
  };
  child.stdout!.on('data', push);
  child.stderr!.on('data', push);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`atoll serve exited (${child.exitCode}):\n${output.join('\n')}`);
    try {
      if ((await fetch(`http://127.0.0.1:${port}/api/status`)).ok) break;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline) throw new Error(`atoll serve did not come up:\n${output.join('\n')}`);
    await sleep(150);
  }
  return { child, output, exited };
}

async function stop(s: Served | null, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (!s || s.child.exitCode !== null || s.child.signalCode !== null) return;
  s.child.kill(signal);
  const t = setTimeout(() => s.child.kill('SIGKILL'), 5000);
  await s.exited;
  clearTimeout(t);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Truthy<T> = Exclude<T, null | undefined | false | 0 | ''>;

async function waitFor<T>(
  what: string,
  fn: () => Promise<T> | T,
  timeoutMs: number,
  everyMs = 250,
): Promise<Truthy<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v as Truthy<T>;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (${(last as Error).message})` : ''}`,
      );
    await sleep(everyMs);
  }
}

// ---------------------------------------------------------------------------------------------
// what the page exposes (window.__atoll, see client/volunteer/main.ts)

interface PageLoss {
  step: number;
  roundId: number;
  roundStep: number;
  version: number;
  loss: number;
  at: number;
}
interface PageDebug {
  setDelays(d: Record<string, number>): void;
  phasesSeen: string[];
  log: Array<{ text: string }>;
}
const atoll = () => (globalThis as unknown as { __atoll: PageDebug }).__atoll;
const setDelays = (b: LaunchedBrowser, d: Record<string, number>) =>
  b.page.evaluate(`(${atoll})().setDelays(${JSON.stringify(d)})`);
const phasesSeen = (b: LaunchedBrowser) => b.page.evaluate(`(${atoll})().phasesSeen.slice()`) as Promise<string[]>;
interface IslandRow {
  id: string;
  name: string;
  contributorId: string;
  engine: string;
  adapter: string;
  accepted: number;
  rejected: number;
  rejectedByCode: Record<string, number>;
  tokens: number;
  connected: boolean;
}

const pageLosses = (b: LaunchedBrowser) =>
  b.page.evaluate(() => (globalThis as unknown as { __atoll: { losses: PageLoss[] } }).__atoll.losses.slice());
const pageAssignments = (b: LaunchedBrowser) =>
  b.page.evaluate(() =>
    (globalThis as unknown as { __atoll: { assignments: Assignment[] } }).__atoll.assignments.slice(),
  );
/** Each engine start's matmul autotuner line (the worker's log): shapes timed now, read from the cache, left at the default. */
const autotuneCounts = (log: string[]) =>
  log.flatMap((l) => {
    const m = /^Matmul tiles: (\d+) timed now, (\d+) from this browser's cache, (\d+) at the default/.exec(l);
    return m ? [{ timed: +m[1], cache: +m[2], shapes: +m[1] + +m[2] + +m[3] }] : [];
  });
/** How many choices and variant times the autotuner wrote to IndexedDB (client/island/engine/webgpu-tune.ts: indexedDbTuneCache). */
const cachedTuning = (b: LaunchedBrowser) =>
  b.page.evaluate(
    () =>
      new Promise<number>((resolve, reject) => {
        const open = indexedDB.open('atoll-autotune');
        open.onerror = () => reject(open.error);
        open.onsuccess = () => {
          const count = open.result.transaction('choices', 'readonly').objectStore('choices').count();
          count.onsuccess = () => {
            resolve(count.result);
            open.result.close();
          };
          count.onerror = () => reject(count.error);
        };
      }),
  );

async function getJson<T>(url: string): Promise<T> {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`GET ${url}: ${r.status}`);
  return (await r.json()) as T;
}

// ---------------------------------------------------------------------------------------------

describe('volunteer page (Chromium)', () => {
  let port = 0;
  let url = '';
  let runDir = '';
  let server: Served | null = null;
  let gpu: LaunchedBrowser | null = null;
  let cpu: LaunchedBrowser | null = null;
  let islandId = '';
  let model0: Float32Array | null = null;
  let train: Uint8Array | null = null;
  const timings: Record<string, number> = {};
  let tuneEntries = 0; // the autotuner's IndexedDB entries after the first engine start
  let t = Date.now();
  const lap = (name: string) => {
    timings[name] = Math.round((Date.now() - t) / 100) / 10;
    t = Date.now();
  };
  const islands = async () => (await getJson<{ islands: IslandRow[] }>(`${url}/api/islands`)).islands;
  const events = () => readFileSync(join(runDir, 'events.jsonl'), 'utf8');
  /** The page's activity log and console, kept in test-artifacts/ for a look after a failure. */
  const saveLog = async (name: string, b: LaunchedBrowser | null) => {
    if (!b) return;
    const log = await b.page
      .evaluate(
        () =>
          (globalThis as unknown as { __atoll?: { log: Array<{ level: string; text: string; at: number }> } }).__atoll
            ?.log ?? [],
      )
      .catch(() => []);
    if (log.length === 0) return;
    const lines = log.map((l) => `${new Date(l.at).toISOString()} ${l.level} ${l.text}`);
    writeFileSync(join(ARTIFACTS, `volunteer-${name}-log.txt`), [...lines, '--- console', ...b.logs, ''].join('\n'));
  };

  beforeAll(async () => {
    ensureClientBuild();
    lap('build');
    mkdirSync(ARTIFACTS, { recursive: true });
    port = await freePort();
    url = `http://localhost:${port}`; // localhost: a secure context, so WebGPU is offered
    runDir = mkdtempSync(join(tmpdir(), 'atoll-volunteer-e2e-'));
    server = await serve(port, runDir);
    // rounds sized to 6 s on the sparse uplink: serve says they stop at its cap
    const capLine = `rounds on the sparse uplink take at most ${SPARSE_MAX_INNER_STEPS} inner steps`;
    await waitFor("serve's line on the cap", () => server!.output.some((l) => l.includes(capLine)), 10_000);
    gpu = await launchChromium({ webgpu: true });
    lap('server+browser');
  }, 120_000);

  afterAll(async () => {
    await saveLog('gpu', gpu);
    await saveLog('cpu', cpu);
    await gpu?.close();
    await cpu?.close();
    await stop(server);
    if (runDir) rmSync(runDir, { recursive: true, force: true });
    if (runDir) rmSync(`${runDir}.json`, { force: true });
    process.stderr.write(`e2e-volunteer timings (s): ${JSON.stringify(timings)}\n`);
  });

  it('explains the run and checks WebGPU before anything starts', async () => {
    const page = gpu!.page;
    await openVolunteerPage(gpu!, `${url}/`);
    const run = await getJson<{ title: string; description: string }>(`${url}/api/run`);
    expect(run.title).toBe(TITLE);
    await textOf(gpu!, '#run-name', (t) => t === TITLE);
    await textOf(gpu!, '#run-description', (t) => t === run.description);
    await textOf(gpu!, '#cost-up', 'sparse');
    await textOf(gpu!, '#cost-mem', 'MiB while training');
    await textOf(gpu!, '#gpu-status-text', 'WebGPU is ready');
    expect(await page.locator('#cpu-optin').isHidden()).toBe(true);
    expect(await page.locator('#start').isEnabled()).toBe(true);
    await textOf(gpu!, '.note >> nth=0', 'Nothing runs until you click');
    expect(await page.locator('#saved-model').isHidden()).toBe(true); // a first visit keeps no θ
    // nothing started: no island on the server
    expect(await islands()).toHaveLength(0);
    // keep θ_0 and the training bytes for the numbers check
    const ck = decodeCheckpoint(new Uint8Array(await (await fetch(`${url}/api/model`)).arrayBuffer()));
    if (!ck.ok) throw new Error(ck.error.message);
    expect(ck.value.meta.version).toBe('0');
    model0 = ck.value.params;
    train = new Uint8Array(await (await fetch(`${url}/api/data/train`)).arrayBuffer());
    lap('intro');
  });

  it('contributes a round on WebGPU, through every phase, and the server accepts it', async () => {
    const page = gpu!.page;
    // each phase of the first round lasts long enough for a look: downloads, steps, uploads and waits slowed
    await setDelays(gpu!, { syncMs: 2500, uploadMs: 2500, waitMs: 2500 });
    const clicked = Date.now();
    await page.click('#start');
    const shot = async (phase: string) => {
      await page.screenshot({ path: join(ARTIFACTS, `volunteer-${phase}.png`), fullPage: true });
      await page.setViewportSize({ width: 390, height: 844 });
      await page.screenshot({ path: join(ARTIFACTS, `volunteer-${phase}-phone.png`), fullPage: true });
      await page.setViewportSize({ width: 1280, height: 900 });
    };
    const shown = new Set<string>();
    await waitFor(
      'a screenshot of each phase of the round',
      async () => {
        const v = await pageView(gpu!);
        if (v.phase === 'error') throw new Error(`page error: ${JSON.stringify(v)}`);
        if (['syncing', 'training', 'uploading', 'waiting'].includes(v.phase) && !shown.has(v.phase)) {
          const current = await page.locator('#phases li[data-state="current"]').getAttribute('data-phase');
          expect(current).toBe(v.phase);
          shown.add(v.phase);
          await shot(v.phase);
        }
        return shown.size === 4;
      },
      150_000,
      100,
    );
    await setDelays(gpu!, { syncMs: 0, uploadMs: 0, waitMs: 0 });
    // the phases in round order (starting, then download θ, train, upload Δ, wait)
    const seen = (await phasesSeen(gpu!)).filter((p) => ['syncing', 'training', 'uploading', 'waiting'].includes(p));
    expect(seen.slice(0, 4)).toEqual(['syncing', 'training', 'uploading', 'waiting']);
    // the speed was measured before the first assignment and saved for the next visit
    const cal = (await pageView(gpu!)).calibration;
    expect(cal?.tokensPerSec).toBeGreaterThan(0);
    expect((await pageLog(gpu!)).some((l) => l.startsWith('Measured '))).toBe(true);
    // ?precision=auto on a software adapter keeps f32 without timing f16, and says so
    expect((await pageLog(gpu!)).some((l) => l.startsWith('Numerics: f32 (a software adapter'))).toBe(true);
    await textOf(gpu!, '#cost-hour', 'an hour');
    // the layout must not move while the numbers update: boxes at the first step and after the round
    const boxes = () =>
      page.evaluate(() =>
        [
          '#s-version',
          '#s-loss',
          '#s-speed',
          '#s-up',
          '#round-steps',
          '#round-eta',
          '#loss-chart',
          '#sample',
          '#conn',
        ].map((sel) => {
          const r = document.querySelector(sel)!.getBoundingClientRect();
          return `${sel} ${r.x.toFixed(1)},${r.y.toFixed(1)} ${r.width.toFixed(1)}×${r.height.toFixed(1)}`;
        }),
      );
    await waitFor('the first step', async () => ((await pageView(gpu!)).round?.step ?? 0) >= 1, 150_000, 250);
    const early = await boxes();
    const v = await waitFor(
      'an accepted round',
      async () => {
        const v = await pageView(gpu!);
        if (v.phase === 'error') throw new Error(`page error: ${JSON.stringify(v)}`);
        return v.roundsAccepted >= 1 ? v : null;
      },
      150_000,
      500,
    );
    expect(v.engine).toBe('webgpu');
    expect(v.device).toContain('swiftshader');
    expect(await boxes()).toEqual(early);
    // the first contribution never hurts: v1 (this page's first round, the only island) evaluates below v0
    const ev = await waitFor(
      'the evals of v0 and v1',
      async () => {
        const { points } = await getJson<{ points: Array<{ version: number; evalLoss: number | null }> }>(
          `${url}/api/history`,
        );
        const at = (k: number) => points.find((p) => p.version === k)?.evalLoss;
        return at(0) != null && at(1) != null ? { v0: at(0)!, v1: at(1)! } : null;
      },
      30_000,
      250,
    );
    timings.evalV0 = ev.v0;
    timings.evalV1 = ev.v1;
    expect(ev.v1, JSON.stringify(ev)).toBeLessThan(ev.v0);
    // the matmul autotuner ran at engine start (a fresh profile: nothing cached) and cached what it timed in IndexedDB
    expect(autotuneCounts(await pageLog(gpu!)).at(-1)).toMatchObject({ cache: 0, shapes: 15 });
    tuneEntries = await cachedTuning(gpu!);
    expect(tuneEntries).toBeGreaterThanOrEqual(1);
    islandId = v.islandId!;
    timings.clickToFirstAcceptedS = Math.round((Date.now() - clicked) / 100) / 10;
    expect(Date.now() - clicked).toBeLessThan(180_000);
    // the first round was sized from the measured speed: its inner steps take the target round time ±50 %
    const first = (await pageAssignments(gpu!))[0];
    const fl = (await pageLosses(gpu!)).filter((l) => l.roundId === first.roundId);
    expect(fl.length).toBe(first.innerSteps);
    const trainS = ((fl.at(-1)!.at - fl[0].at) * fl.length) / (fl.length - 1) / 1000;
    timings.firstRoundSteps = first.innerSteps;
    timings.firstRoundTrainS = Math.round(trainS * 10) / 10;
    // planned from the measured speed: within 50 % of the target (exactly what DyLU makes of it)
    const measured = (await pageView(gpu!)).calibration!;
    const plannedS = (first.innerSteps * measured.stepMs) / 1000;
    // DyLU's time rule: the target time over the measured step time, rounded (at least minInnerSteps = 3)
    const exact = (ROUND_S * measured.tokensPerSec) / (first.batchSize * first.seqLen);
    expect(
      Math.abs(first.innerSteps - Math.max(3, exact)),
      `${first.innerSteps} steps for ${exact.toFixed(2)}`,
    ).toBeLessThan(1);
    expect(
      Math.abs(plannedS / ROUND_S - 1),
      `${first.innerSteps} steps of ${measured.stepMs.toFixed(0)} ms`,
    ).toBeLessThanOrEqual(0.5);
    // and as it ran, within 3× (this round's steps share the 2 cores with the phase screenshots and,
    // in the full suite, with other work: 9 steps ran 13.7 s for a 6 s target once, at load 11)
    expect(
      Math.abs(trainS / ROUND_S - 1),
      `${first.innerSteps} steps in ${trainS.toFixed(1)} s, target ${ROUND_S} s`,
    ).toBeLessThanOrEqual(2);
    const row = (await islands()).find((i) => i.id === islandId);
    expect(row, `island ${islandId} on /api/islands`).toBeTruthy();
    expect(row!.engine).toBe('webgpu');
    expect(row!.accepted).toBeGreaterThanOrEqual(1);
    // the stable anonymous contributor id from localStorage reaches the server (leaderboard credit)
    const savedId = await page.evaluate(() =>
      Object.values({ ...localStorage })
        .map((v) => {
          try {
            return JSON.parse(v).contributorId;
          } catch {
            return undefined;
          }
        })
        .find(Boolean),
    );
    expect(savedId).toMatch(/^[\w-]{8,64}$/);
    expect(row!.contributorId).toBe(savedId);
    await textOf(gpu!, '#s-rounds', (t) => t !== '0' && t !== '–');
    timings.tokensPerSec = Math.round(v.tokensPerSec ?? 0);
    lap('first round');
  });

  it("the page's first losses equal the CPU reference engine's on the same assignment", async () => {
    const a = (await pageAssignments(gpu!))[0];
    expect(a.baseVersion).toBe(0);
    const losses = (await pageLosses(gpu!)).filter((l) => l.roundId === a.roundId).map((l) => l.loss);
    expect(losses.length).toBe(a.innerSteps);
    const ref = new JsEngine({
      config: (await getJson<{ model: JsEngine['config'] }>(`${url}/api/run`)).model,
      maxBatch: a.batchSize,
      maxT: a.seqLen,
    });
    await ref.setParams(model0!);
    for (let i = 0; i < losses.length; i++) {
      const batch = sampleBatch(train!, a.batchSize, a.seqLen, a.data.seed, a.data.stream, a.data.stepStart + i);
      await ref.step(batch, { lr: innerLearningRate(a.lr, i), gradClip: a.gradClip });
    }
    const want = await ref.takeLosses();
    for (let i = 0; i < want.length; i++)
      expect(Math.abs(losses[i] - want[i]), `step ${i + 1}: page ${losses[i]} vs cpu ${want[i]}`).toBeLessThan(1e-3);
    lap('numbers');
  });

  it('pauses mid-round and resumes without losing or duplicating work', async () => {
    const page = gpu!.page;
    // pause once a round is under way (at least one step done, not the last)
    await waitFor(
      'a round in progress',
      async () => {
        const v = await pageView(gpu!);
        return v.phase === 'training' && v.round && v.round.step >= 1 && v.round.step < v.round.total - 1;
      },
      90_000,
      100,
    );
    const before = await pageView(gpu!);
    await page.click('#pause');
    expect(await page.locator('#pause').getAttribute('aria-pressed')).toBe('true');
    await waitFor('paused', async () => (await pageView(gpu!)).phase === 'paused', 60_000);
    const paused = await pageView(gpu!);
    const nPaused = (await pageLosses(gpu!)).length;
    await sleep(500);
    expect((await pageLosses(gpu!)).length, 'no steps while paused').toBe(nPaused);
    expect((await pageView(gpu!)).round!.step).toBe(paused.round!.step);
    await textOf(gpu!, '#pause', (t) => t === 'Resume');
    await page.click('#pause');
    const after = await waitFor(
      'the paused round to be accepted',
      async () => {
        const v = await pageView(gpu!);
        return v.roundsAccepted > before.roundsAccepted ? v : null;
      },
      120_000,
      500,
    );
    // the round continued where it paused: one loss per step of it, no step run twice
    const roundLosses = (await pageLosses(gpu!)).filter(
      (l) => l.version === paused.round!.baseVersion && l.roundStep >= 1,
    );
    const steps = roundLosses.map((l) => l.roundStep);
    expect(new Set(steps).size).toBe(steps.length);
    expect(after.roundsRejected).toBe(0);
    const row = (await islands()).find((i) => i.id === islandId)!;
    expect(row.accepted).toBe(after.roundsAccepted);
    expect(row.rejectedByCode.E_DUPLICATE ?? 0).toBe(0);
    expect(events()).not.toContain('E_DUPLICATE');
    lap('pause/resume');
  });

  it('a sample while training stretches no training step by more than 2×', async () => {
    const page = gpu!.page;
    await waitFor('training', async () => (await pageView(gpu!)).phase === 'training', 60_000, 100);
    const t0 = Date.now();
    await page.fill('#sample-prompt', 'Call me ');
    await page.click('#sample-go');
    const meta = await textOf(gpu!, '#sample-meta', 'Model v', 120_000);
    const t1 = Date.now();
    timings.sampleS = Math.round((t1 - t0) / 100) / 10;
    expect(meta).toContain('swiftshader');
    expect(meta).toContain('40 tokens');
    const text = (await page.locator('#sample-out').textContent()) ?? '';
    expect(text.startsWith('Call me ')).toBe(true);
    expect(text.length).toBeGreaterThan('Call me '.length + 20);
    // seconds per step between consecutive loss readings of one round
    const perStep = (ls: PageLoss[]) =>
      ls.slice(1).flatMap((l, i) => {
        const p = ls[i];
        return p.roundId === l.roundId && l.roundStep > p.roundStep
          ? [{ at: l.at, ms: (l.at - p.at) / (l.roundStep - p.roundStep) }]
          : [];
      });
    // the usual step: the median of the steps just before the sample, or of those just after when
    // they are slower (a machine shared with other work slows all steps at times, not only these)
    const after = (
      await waitFor(
        'steps after the sample',
        async () => {
          const a = perStep(await pageLosses(gpu!)).filter((x) => x.at > t1 + 50);
          return a.length >= 4 ? a : null;
        },
        60_000,
        250,
      )
    ).map((x) => x.ms);
    const all = perStep(await pageLosses(gpu!));
    const before = all
      .filter((x) => x.at < t0)
      .slice(-12)
      .map((x) => x.ms);
    const during = all.filter((x) => x.at > t0 && x.at <= t1 + 50).map((x) => x.ms);
    const usual = Math.max(median(before), median(after.slice(0, 12)));
    expect(during.length, 'steps ran while the sample was written').toBeGreaterThan(0);
    timings.sampleTrainingStepMaxOverMedian = Math.round((100 * Math.max(...during)) / usual) / 100;
    timings.sampleStepMedianBeforeMs = Math.round(median(before));
    timings.sampleStepMedianAfterMs = Math.round(median(after));
    for (const ms of during)
      expect(ms, `step ${Math.round(ms)} ms vs median ${Math.round(usual)} ms`).toBeLessThan(2 * usual);
    lap('sample while training');
  });

  it('backs off when the GPU gets busy (slow steps) and returns when steps are quick again', async () => {
    const page = gpu!.page;
    const v0 = await waitFor(
      'a step time',
      async () => {
        const v = await pageView(gpu!);
        return v.stepMs != null && v.phase === 'training' ? v : null;
      },
      60_000,
      100,
    );
    // steps about 5× their median: clearly slow (the threshold is 3×) on a noisy machine too. The
    // hook's wait overlaps the GPU's queued work, so a step takes about the wait, not wait + compute.
    await setDelays(gpu!, { stepMs: Math.max(300, 5 * v0.stepMs!) });
    const busy = await waitFor(
      'the back-off',
      async () => {
        const v = await pageView(gpu!);
        return v.busy ? v : null;
      },
      60_000,
      100,
    )
      .catch(async (e: Error) => {
        throw new Error(
          `${e.message}; median ${v0.stepMs} ms; ${JSON.stringify(await pageView(gpu!))}; ${(await pageLog(gpu!)).slice(-6).join(' | ')}`,
        );
      })
      .finally(() => setDelays(gpu!, { stepMs: 0 }));
    expect(busy.effectiveDutyCycle).toBeLessThan(busy.dutyCycle);
    await textOf(gpu!, '#busy-note', 'busy with something else');
    await page.screenshot({ path: join(ARTIFACTS, 'volunteer-busy.png'), fullPage: true });
    // clearing the delay also ends the rest the back-off took after the slow steps (the hook's doing:
    // that rest is a multiple of their time; e2e-volunteer-resilience checks its length). The clear is
    // sent again at each look, so a rest begun after the first one (the last slow step's: 3× its
    // 5× step, ~30 s that the first clear could miss) or after a quick step ends too: what is judged
    // here is the steps' compute time, not the rests between them.
    // released once two steps in a row are under 2× the calm median: on a machine loaded by other
    // work that can take minutes (at load 15 it took 2 min, all steps ~2× slower meanwhile)
    const back = await waitFor(
      'the back-off released',
      async () => {
        const v = await pageView(gpu!);
        if (v.busy) await setDelays(gpu!, { stepMs: 0 });
        return !v.busy ? v : null;
      },
      240_000,
      250,
    );
    expect(back.effectiveDutyCycle).toBe(back.dutyCycle);
    expect(await page.locator('#busy-note').isHidden()).toBe(true);
    const log = await pageLog(gpu!);
    expect(log.some((l) => l.startsWith('The GPU seems busy'))).toBe(true);
    expect(log.some((l) => l.startsWith('Steps are quick again'))).toBe(true);
    lap('busy back-off');
  }, 420_000);

  it('survives a lost GPU device: a new device, the round replayed, nothing lost', async () => {
    await waitFor(
      'a round in progress',
      async () => {
        const v = await pageView(gpu!);
        return v.phase === 'training' && v.round && v.round.step >= 1 && v.round.step < v.round.total - 1;
      },
      90_000,
      100,
    );
    const before = await pageView(gpu!);
    await gpu!.page.evaluate(() => (globalThis as unknown as { __atoll: { loseDevice(): void } }).__atoll.loseDevice());
    await waitFor(
      'the device to be rebuilt',
      async () => {
        const log = await gpu!.page.evaluate(() =>
          (globalThis as unknown as { __atoll: { log: Array<{ text: string }> } }).__atoll.log.map((l) => l.text),
        );
        return log.some((l) => l.startsWith('GPU device rebuilt'));
      },
      90_000,
      250,
    );
    const after = await waitFor(
      'the round to be accepted',
      async () => {
        const v = await pageView(gpu!);
        return v.roundsAccepted > before.roundsAccepted ? v : null;
      },
      120_000,
      500,
    );
    expect(after.roundsRejected).toBe(0);
    expect(after.engine).toBe('webgpu');
    // the new device's engine read what was timed so far from the cache and timed more (the cache grew)
    expect(autotuneCounts(await pageLog(gpu!)).length).toBeGreaterThanOrEqual(2);
    expect(await cachedTuning(gpu!)).toBeGreaterThan(tuneEntries);
    const round = (await pageLosses(gpu!))
      .filter((l) => l.version === before.round!.baseVersion)
      .map((l) => l.roundStep);
    expect(new Set(round).size, 'each step of the round reported once').toBe(round.length);
    const row = (await islands()).find((i) => i.id === islandId)!;
    expect(row.accepted).toBe(after.roundsAccepted);
    lap('device lost');
  });

  it('reconnects by itself after a server restart and goes on contributing', async () => {
    const before = await pageView(gpu!);
    await stop(server);
    server = null;
    await waitFor('the page to notice', async () => (await pageView(gpu!)).connection !== 'connected', 30_000, 100);
    await textOf(gpu!, '#conn-text', 'Reconnect');
    server = await serve(port, runDir);
    const v = await waitFor(
      'a round accepted after the restart',
      async () => {
        const v = await pageView(gpu!);
        return v.roundsAccepted > before.roundsAccepted && v.connection === 'connected' ? v : null;
      },
      150_000,
      500,
    );
    expect(v.phase).not.toBe('error');
    const rows = await islands();
    expect(rows.filter((r) => r.engine === 'webgpu').reduce((a, r) => a + r.accepted, 0)).toBeGreaterThanOrEqual(1);
    expect(events()).not.toContain('E_DUPLICATE');
    lap('restart');
  });

  it('a saved display name reaches the leaderboard at once; a reload (with ?autotune=0) keeps the totals, the speed measurement and θ (no θ fetched again)', async () => {
    const page = gpu!.page;
    const cid = (await islands()).find((i) => i.id === islandId)!.contributorId;
    const credit = () =>
      getJson<{ name: string | null; tokens: number; rank: number | null }>(`${url}/api/contributors/${cid}`);
    await page.fill('#display-name', 'Ishmael');
    await page.click('#save-name');
    // the dashboard's leaderboard reads /api/islands on its next update: the name is there already
    await waitFor('the new name on the server', async () => (await credit()).name === 'Ishmael', 10_000, 100);
    const c = contributors((await islands()) as unknown as IslandView[]);
    expect(c.find((x) => x.key === cid)?.name).toBe('Ishmael');
    const before = await credit();
    expect(before.tokens).toBeGreaterThan(0);
    expect(before.rank).toBe(1);
    await saveLog('gpu-before-reload', gpu);
    const requests: string[] = [];
    page.on('request', (r) => requests.push(r.url()));
    await page.goto(`${url}/?autotune=0`);
    await waitFor(
      'the page after the reload',
      () => page.evaluate(() => !!(globalThis as unknown as { __atoll?: { run: unknown } }).__atoll?.run),
      30_000,
      100,
    );
    // totals from the server, before anything starts
    await textOf(gpu!, '#cr-rank', (t) => t.startsWith('#1 of'));
    const tokensText = await textOf(gpu!, '#cr-tokens', (t) => t !== '–' && t !== '0');
    expect(tokensText.length).toBeGreaterThan(0);
    expect(await page.locator('#display-name').inputValue()).toBe('Ishmael');
    // θ kept in this browser: said before Start; after it, the island starts from it and fetches no θ chunk
    await textOf(gpu!, '#saved-model-text', (t) => /^Saved in this browser: model v\d+ /.test(t));
    // the speed measured before the first round is re-used, not measured again
    await page.click('#start');
    await waitFor(
      'the saved measurement',
      async () => (await pageLog(gpu!)).some((l) => l.startsWith('Speed measured earlier')),
      60_000,
      200,
    );
    expect((await pageLog(gpu!)).some((l) => l.startsWith('Measured '))).toBe(false);
    await waitFor(
      'a step from the kept θ',
      async () =>
        (await pageLog(gpu!)).some((l) => /^Starting from model v\d+ kept in this browser/.test(l)) &&
        ((await pageView(gpu!)).round?.step ?? 0) > 0,
      60_000,
      200,
    );
    expect(requests.filter((u) => /\/api\/model(\/manifest)?$/.test(new URL(u).pathname))).toEqual([]);
    // ?autotune=0: the engine started without the autotuner
    expect((await pageLog(gpu!)).filter((l) => l.startsWith('Matmul '))).toEqual([
      'Matmul autotuning is off (?autotune=0): every matmul on the default tile.',
    ]);
    lap('name and reload');
  });

  it('without WebGPU: says what is missing and contributes on the CPU when asked', async () => {
    // the WebGPU page stops (closing it is a volunteer leaving) so the CPU page has the cores
    await saveLog('gpu', gpu);
    await gpu!.page.goto('about:blank');
    cpu = await launchChromium({ webgpu: false });
    const page = cpu.page;
    await openVolunteerPage(cpu, `${url}/`);
    await textOf(cpu, '#gpu-status-text', 'offered no GPU');
    expect(await page.locator('#cpu-optin').isVisible()).toBe(true);
    expect(await page.locator('#start').isDisabled()).toBe(true);
    // keyboard only: Space ticks the opt-in, Enter on the focused button starts
    await page.locator('#use-cpu').focus();
    await page.keyboard.press('Space');
    expect(await page.locator('#use-cpu').isChecked()).toBe(true);
    await textOf(cpu, '#start', (t) => t === 'Start contributing (CPU)');
    // a sample before contributing: the CPU engine, the model downloaded for it
    await page.click('#sample-go');
    await textOf(cpu, '#sample-meta', 'CPU', 30_000);
    expect(((await page.locator('#sample-out').textContent()) ?? '').length).toBeGreaterThan(20);
    await page.locator('#start').focus();
    await page.keyboard.press('Enter');
    const v = await waitFor(
      'an accepted CPU round',
      async () => {
        const v = await pageView(cpu!);
        if (v.phase === 'error') throw new Error(`page error: ${JSON.stringify(v)}`);
        return v.roundsAccepted >= 1 ? v : null;
      },
      90_000,
      500,
    );
    expect(v.engine).toBe('cpu');
    expect(v.device, 'the page says which engine it trains on').toMatch(/WebAssembly SIMD/);
    // cross-origin isolated, so the engine's threads share its memory: all the cores, up to 4
    const iso = await page.evaluate(() => ({ isolated: crossOriginIsolated, cores: navigator.hardwareConcurrency }));
    expect(iso.isolated).toBe(true);
    expect(v.device).toContain(`(${Math.min(4, iso.cores)} of ${iso.cores} threads)`);
    // the CPU page's first round (a fresh AdamW joining a trained θ), at the version the server lists
    // its Δ in (it alone made it): below the version before it. Rounds sized to 6 s of this page took
    // ~350 steps and raised it (3.216 → 3.372, 3.262 → 3.692), a long Δ the sparse frame carries badly:
    // the sparse uplink caps a round at SPARSE_MAX_INNER_STEPS (docs/studies/cold-start.md)
    const a0 = (await pageAssignments(cpu))[0];
    const ev = await waitFor(
      "the evals around the CPU page's first round",
      async () => {
        const detail = await getJson<IslandDetail>(`${url}/api/islands/${v.islandId}`);
        const applied = detail.contributions.map((c) => c.version).sort((x, y) => x - y)[0];
        if (applied == null) return null;
        const { points } = await getJson<{
          points: Array<{ version: number; evalLoss: number | null; contributors: number; trustGain?: number }>;
        }>(`${url}/api/history`);
        const at = (k: number) => points.find((p) => p.version === k);
        const [p0, before, after] = [at(0), at(applied - 1), at(applied)];
        return p0?.evalLoss != null && before?.evalLoss != null && after?.evalLoss != null
          ? {
              v0: p0.evalLoss,
              base: a0.baseVersion,
              applied,
              before: before.evalLoss,
              after: after.evalLoss,
              contributors: after.contributors,
              trustGain: after.trustGain ?? null,
            }
          : null;
      },
      30_000,
      250,
    );
    timings.cpuPageEvalBefore = ev.before;
    timings.cpuPageEvalAfter = ev.after;
    timings.cpuPageBaseVersion = ev.base;
    timings.cpuPageAppliedVersion = ev.applied;
    timings.cpuPageTrustGain = ev.trustGain ?? 1; // 1: the trust region left that step alone
    expect(a0.baseVersion, 'the CPU page joined a trained θ').toBeGreaterThan(0);
    expect(ev.contributors, 'the CPU page alone made that version').toBe(1);
    expect(ev.after, JSON.stringify(ev)).toBeLessThan(ev.v0 - 0.5);
    expect(ev.after, `the late page's Δ lowers the loss of its base: ${JSON.stringify(ev)}`).toBeLessThan(ev.before);
    expect(a0.innerSteps, 'a round on the sparse uplink is capped').toBeLessThanOrEqual(SPARSE_MAX_INNER_STEPS);
    const row = (await islands()).find((i) => i.id === v.islandId)!;
    expect(row.engine).toBe('cpu');
    expect(row.accepted).toBeGreaterThanOrEqual(1);

    // pause while the tab is hidden (the page's own visibility handling, driven by a faked hidden state)
    await page.locator('#pause-hidden').check();
    const setHidden = (hidden: boolean) =>
      page.evaluate((h) => {
        Object.defineProperty(document, 'hidden', { configurable: true, get: () => h });
        Object.defineProperty(document, 'visibilityState', {
          configurable: true,
          get: () => (h ? 'hidden' : 'visible'),
        });
        document.dispatchEvent(new Event('visibilitychange'));
      }, hidden);
    await setHidden(true);
    await waitFor(
      'paused while hidden',
      async () => {
        const v = await pageView(cpu!);
        return v.phase === 'paused' && v.pauseReasons.join() === 'hidden';
      },
      30_000,
      100,
    );
    await textOf(cpu, '#phase-text', 'hidden');
    await setHidden(false);
    await waitFor(
      'running again when visible',
      async () => (await pageView(cpu!)).pauseReasons.length === 0,
      10_000,
      100,
    );

    // a phone-sized viewport: nothing wider than the screen
    await page.setViewportSize({ width: 390, height: 844 });
    await sleep(300);
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await page.screenshot({ path: join(ARTIFACTS, 'volunteer-phone.png'), fullPage: true });
    lap('cpu');
  });
});
