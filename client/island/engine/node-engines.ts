// Creating a training engine in Node: a CPU engine (Wasm SIMD, or the JS reference: core/engine/cpu.ts),
// or WebGPU through Dawn on one device or several (an island of N devices: multi-device.ts).

import type { EngineOptions, TrainingEngine } from '../../../core/engine/index.ts';
import type { EngineKind } from '../../../core/protocol.ts';
import { type CpuEngineName, createCpuEngine } from '../../../core/engine/cpu.ts';
import type { WebGpuEngine as WebGpuEngineT } from './webgpu.ts';

export interface EngineChoice {
  /** WebGPU: tune the matmuls at start (default true), cached in a file (client/island/engine/tune-cache.ts). */
  autotune?: boolean;
  /** WebGPU: storage precision (default f32). */
  precision?: 'f32' | 'f16';
  /** WebGPU: devices training data-parallel as one island (default 1); opts.maxBatch is their total. */
  devices?: number;
  /** CPU (Wasm): threads of this process the step runs on (default 1; worker_threads share its memory). */
  threads?: number;
}

const badConfig = (message: string) => Object.assign(new Error(`E_BAD_CONFIG: ${message}`), { code: 'E_BAD_CONFIG' });

/** A fresh engine; for WebGPU each device is requested with only the limits the config needs. */
export async function createEngine(
  kind: EngineKind | CpuEngineName,
  opts: EngineOptions,
  o: EngineChoice = {},
): Promise<TrainingEngine> {
  const devices = o.devices ?? 1;
  if (!Number.isInteger(devices) || devices < 1 || devices > 64)
    throw badConfig(`--devices ${devices} must be an integer in 1..64`);
  if (kind !== 'webgpu') {
    if (devices > 1) throw badConfig('--devices needs --engine webgpu');
    // f16 on the CPU: the kernels' CPU twins (a model of the WebGPU engine's numerics, not a speed-up)
    const threads = o.threads ?? 1;
    if (!Number.isInteger(threads) || threads < 1 || threads > 64)
      throw badConfig(`--threads ${threads} must be an integer in 1..64`);
    const { spawnNodeKernelThread } = await import('./wasm-threads.ts');
    return createCpuEngine(kind, { ...opts, precision: o.precision }, { count: threads, spawn: spawnNodeKernelThread });
  }
  if ((o.threads ?? 1) > 1) throw badConfig('--threads needs --engine cpu');
  if (opts.maxBatch < devices) throw badConfig(`a batch of ${opts.maxBatch} cannot feed ${devices} devices`);
  const { createNodeGpu } = await import('./dawn.ts');
  const { WebGpuEngine, requiredLimits, withDeviceLimits, ENGINE_FEATURES } = await import('./webgpu.ts');
  const { fileTuneCache } = await import('./tune-cache.ts');
  const autotune = o.autotune === false ? undefined : { cache: fileTuneCache() };
  const per = { ...opts, maxBatch: Math.ceil(opts.maxBatch / devices), precision: o.precision };
  const made: Array<{ engine: WebGpuEngineT; destroy: () => void; dispose: () => Promise<void> }> = [];
  try {
    for (let i = 0; i < devices; i++) {
      // the adapter's binding and buffer limits: windows and θ's buffers past them, only the largest requested
      const gpu = await createNodeGpu({
        requiredLimits: (limits) => requiredLimits(withDeviceLimits(per, limits)),
        optionalFeatures: ENGINE_FEATURES,
      });
      try {
        const engine = await WebGpuEngine.create(gpu.device, { ...per, adapterInfo: gpu.info.description, autotune });
        made.push({ engine, destroy: engine.destroy.bind(engine), dispose: gpu.dispose });
      } catch (e) {
        await gpu.dispose();
        throw e;
      }
    }
  } catch (e) {
    for (const m of made) {
      m.destroy();
      await m.dispose();
    }
    throw e;
  }
  const disposeAll = () => {
    for (const m of made) {
      m.destroy();
      void m.dispose();
    }
  };
  if (devices === 1) {
    const engine = made[0].engine;
    engine.destroy = disposeAll;
    return engine;
  }
  const { MultiDeviceEngine } = await import('./multi-device.ts');
  const multi = new MultiDeviceEngine(made.map((m) => m.engine));
  multi.destroy = disposeAll;
  return multi;
}
