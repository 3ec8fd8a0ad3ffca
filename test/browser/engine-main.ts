// Test page: runs WebGpuEngine on the browser's own WebGPU (navigator.gpu), driven by
// test/webgpu-browser.test.ts through `window.atollRun`.

import type { Batch } from '../../core/engine/index.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import { WebGpuEngine, checkAdapterFits, engineFeatures, requiredLimits } from '../../client/island/engine/webgpu.ts';
import { KernelSet } from '../../client/island/engine/webgpu-kernels.ts';
import { type MatmulShape, autotuneMatmuls, indexedDbTuneCache } from '../../client/island/engine/webgpu-tune.ts';

export interface RunRequest {
  config: GPTConfig;
  maxBatch: number;
  params: number[];
  batches: Array<{ inputs: number[]; targets: number[]; B: number; T: number }>;
  lr: number;
  gradClip: number;
}

export interface RunResult {
  adapter: string;
  losses: number[];
  params: number[];
  createMs: number;
  stepsMs: number;
  /** the engine's reductions used subgroup operations */
  subgroups: boolean;
}

async function run(req: RunRequest): Promise<RunResult> {
  const adapter = await navigator.gpu?.requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter in this browser');
  const opts = { config: req.config, maxBatch: req.maxBatch };
  const fits = checkAdapterFits(adapter, opts);
  if (!fits.ok) throw new Error(fits.error.message);
  const device = await adapter.requestDevice({
    requiredLimits: requiredLimits(opts),
    requiredFeatures: engineFeatures(adapter),
  });
  const t0 = performance.now();
  const engine = await WebGpuEngine.create(device, {
    ...opts,
    adapterInfo: `${adapter.info.vendor} ${adapter.info.architecture}`,
  });
  const t1 = performance.now();
  await engine.setParams(Float32Array.from(req.params));
  for (const b of req.batches) {
    const batch: Batch = { inputs: Uint8Array.from(b.inputs), targets: Uint8Array.from(b.targets), B: b.B, T: b.T };
    await engine.step(batch, { lr: req.lr, gradClip: req.gradClip });
  }
  const losses = await engine.takeLosses();
  const params = Array.from(await engine.getParams());
  const t2 = performance.now();
  engine.destroy();
  device.destroy();
  return { adapter: engine.device, losses, params, createMs: t1 - t0, stepsMs: t2 - t1, subgroups: engine.subgroups };
}

export interface TuneResultSummary {
  /** where the choice came from: timed on the first start, then read from IndexedDB */
  first: string;
  again: string;
  same: boolean;
}

/** The autotuner with its IndexedDB cache (as the volunteer's worker uses it), started twice on a fresh database. */
async function tune(req: { shape: MatmulShape; rows: number }): Promise<TuneResultSummary> {
  const adapter = await navigator.gpu?.requestAdapter();
  if (!adapter) throw new Error('no WebGPU adapter in this browser');
  const device = await adapter.requestDevice();
  const db = 'atoll-autotune-test';
  await new Promise((resolve) => {
    indexedDB.deleteDatabase(db).onsuccess = resolve;
  });
  const start = async (budgetMs: number) =>
    autotuneMatmuls(device, KernelSet.for(device), [req.shape], req.rows, {
      adapter: 'test',
      cache: await indexedDbTuneCache(db),
      budgetMs,
    });
  const first = await start(Infinity);
  const again = await start(0);
  device.destroy();
  return {
    first: first.report[0].from,
    again: again.report[0].from,
    same: JSON.stringify(first.report[0].chosen) === JSON.stringify(again.report[0].chosen),
  };
}

(window as unknown as { atollRun: typeof run; atollTune: typeof tune }).atollRun = run;
(window as unknown as { atollTune: typeof tune }).atollTune = tune;
document.title = 'ready';
