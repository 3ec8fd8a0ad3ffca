// WebGPU in the island worker: the capability check shown before anything starts,
// opening a device with only the limits the model needs, and the engine on it. Runs in the worker,
// because the worker's navigator.gpu is the one that trains (it can differ from the
// page's: some browsers expose WebGPU to windows before workers).

import { type CpuThreads, createCpuEngine } from '../../core/engine/cpu.ts';
import {
  WebGpuEngine,
  checkAdapterFits,
  engineFeatures,
  estimateGpuBytes,
  requiredLimits,
  withDeviceLimits,
} from '../island/engine/webgpu.ts';
import { type TuneCache, type TuneResult, indexedDbTuneCache } from '../island/engine/webgpu-tune.ts';
import type { EngineOptions } from '../../core/engine/index.ts';
import type { AdapterSummary, EngineKind, GpuProbe, ModelShape } from './messages.ts';
import { pageCpuThreads } from './kernel-threads.ts';
import type { EngineHandle } from './resilient-engine.ts';

export function engineOptions(shape: ModelShape): EngineOptions {
  return { config: shape.config, maxBatch: shape.maxBatch, maxT: shape.maxT };
}

export function describeAdapter(adapter: GPUAdapter): AdapterSummary {
  const info = adapter.info;
  const vendor = info?.vendor ?? '';
  const architecture = info?.architecture ?? '';
  const name = info?.description || [vendor, architecture].filter(Boolean).join(' ') || 'unnamed GPU';
  return {
    name,
    vendor,
    architecture,
    isFallbackAdapter: !!(info as GPUAdapterInfo & { isFallbackAdapter?: boolean })?.isFallbackAdapter,
  };
}

function gpuApi(): GPU | null {
  return (globalThis.navigator as Navigator & { gpu?: GPU })?.gpu ?? null;
}

async function requestAdapter(gpu: GPU): Promise<GPUAdapter | null> {
  return (await gpu.requestAdapter({ powerPreference: 'high-performance' })) ?? (await gpu.requestAdapter());
}

/** Says whether this worker can train the model on WebGPU, and if not, why. Never throws. */
export async function probeGpu(shape: ModelShape): Promise<GpuProbe> {
  let gpuBytes = 0;
  try {
    gpuBytes = estimateGpuBytes(engineOptions(shape));
  } catch {
    /* a config the engine rejects: checkAdapterFits names it below */
  }
  const gpu = gpuApi();
  if (!gpu)
    return {
      ok: false,
      reason: 'no-navigator-gpu',
      message: "navigator.gpu is missing in the page's web worker (no WebGPU, or not to workers).",
      gpuBytes,
    };
  let adapter: GPUAdapter | null;
  try {
    adapter = await requestAdapter(gpu);
  } catch (e) {
    return {
      ok: false,
      reason: 'error',
      message: `Asking for a GPU adapter failed: ${(e as Error).message}`,
      gpuBytes,
    };
  }
  if (!adapter) {
    return {
      ok: false,
      reason: 'no-adapter',
      message:
        'It may be disabled, blocklisted for this driver, or behind a flag (on Linux, ' +
        'chrome://flags/#enable-unsafe-webgpu).',
      gpuBytes,
    };
  }
  const summary = describeAdapter(adapter);
  const fits = checkAdapterFits(adapter, engineOptions(shape));
  if (!fits.ok)
    return {
      ok: false,
      reason: 'too-small',
      message: `${summary.name}: ${fits.error.message}`,
      adapter: summary,
      gpuBytes,
    };
  return { ok: true, adapter: summary, gpuBytes };
}

export interface OpenedDevice {
  device: GPUDevice;
  adapter: AdapterSummary;
  /** Resolves once, when the device is lost (reason "destroyed" when we destroyed it). */
  lost: Promise<GPUDeviceLostInfo>;
}

/** A fresh adapter and device (after a loss the adapter must be requested again, too). */
export async function openDevice(shape: ModelShape): Promise<OpenedDevice> {
  const gpu = gpuApi();
  if (!gpu) throw new Error('E_NO_WEBGPU: navigator.gpu is missing in this worker');
  const adapter = await requestAdapter(gpu);
  if (!adapter) throw new Error('E_NO_ADAPTER: the browser offered no GPU adapter');
  const opts = engineOptions(shape);
  const fits = checkAdapterFits(adapter, opts);
  if (!fits.ok) throw new Error(`${fits.error.code}: ${fits.error.message}`);
  // the binding and buffer limits the adapter allows: windows and θ's buffers past them, only the largest requested
  const device = await adapter.requestDevice({
    requiredLimits: requiredLimits(withDeviceLimits(opts, adapter.limits)),
    requiredFeatures: engineFeatures(adapter),
    label: 'atoll island',
  });
  return { device, adapter: describeAdapter(adapter), lost: device.lost };
}

let tuneCache: Promise<TuneCache | null> | null = null;
let adapter: AdapterSummary | null = null;

/** The adapter of the last device opened (?precision=auto does not time f16 on a software one). */
export const lastAdapter = (): AdapterSummary | null => adapter;

/**
 * An engine of `kind` for `shape` with its device and the device's loss (ResilientEngine's
 * handle); WebGPU with the matmul autotuner unless `autotune` is false, its choices cached by
 * adapter (IndexedDB: workers have no localStorage).
 */
export async function openEngineHandle(
  kind: EngineKind,
  shape: ModelShape,
  autotune: boolean,
  precision: 'f32' | 'f16' = 'f32',
): Promise<EngineHandle> {
  const eo = engineOptions(shape);
  if (kind === 'cpu') {
    const engine = await createCpuEngine('cpu', eo, (cpuThreads ??= pageCpuThreads())); // WebAssembly SIMD
    return {
      engine,
      lost: new Promise(() => {}),
      dispose: () => {},
      simulateLoss: () => {},
      gpuDevice: null,
    };
  }
  const dev = await openDevice(shape);
  adapter = dev.adapter;
  const e = await WebGpuEngine.create(dev.device, {
    ...eo,
    adapterInfo: dev.adapter.name,
    precision,
    autotune: autotune ? { cache: await (tuneCache ??= indexedDbTuneCache()) } : undefined,
  });
  let simulated = false;
  const lost = dev.lost.then((i) => ({
    reason: simulated ? 'unknown' : (i.reason ?? 'unknown'),
    message: simulated ? 'simulated loss (test hook)' : i.message,
  }));
  return {
    engine: e,
    lost,
    dispose: () => dev.device.destroy(),
    simulateLoss: () => {
      simulated = true;
      dev.device.destroy();
    },
    gpuDevice: dev.device,
  };
}

/** What the matmul autotuner did at this engine start (null: the page's ?autotune=0). */
export function autotuneLine(t: TuneResult | null): string {
  if (!t) return 'Matmul autotuning is off (?autotune=0): every matmul on the default tile.';
  const n = (from: TuneResult['report'][number]['from']) => t.report.filter((r) => r.from === from).length;
  return (
    `Matmul tiles: ${n('timed')} timed now, ${n('cache')} from this browser's cache, ${n('default')} at the ` +
    `default until a later start (${(t.ms / 1000).toFixed(1)} s).`
  );
}

let cpuThreads: CpuThreads | null = null;

/** The training CPU engine's device line: how many of the machine's threads it trains on. */
export function cpuName(): string {
  const n = (navigator as Navigator & { hardwareConcurrency?: number }).hardwareConcurrency;
  const used = (cpuThreads ??= pageCpuThreads()).count;
  return n ? `CPU, WebAssembly SIMD (${used} of ${n} threads)` : 'CPU, WebAssembly SIMD';
}
