// Creating a training engine in Node: the CPU reference, or WebGPU through Dawn.

import type { EngineOptions, TrainingEngine } from '../core/engine.ts';
import type { EngineKind } from '../core/protocol.ts';
import { CpuEngine } from '../client/engine/cpu.ts';

/**
 * A fresh engine; for WebGPU it requests only the limits the config needs and, unless
 * `autotune` is false, tunes the matmuls (cached in a file: server/tune-cache.ts).
 */
export async function createEngine(kind: EngineKind, opts: EngineOptions, o: { autotune?: boolean } = {}): Promise<TrainingEngine> {
  if (kind === 'cpu') return new CpuEngine(opts);
  const { createNodeGpu } = await import('./gpu.ts');
  const { WebGpuEngine, requiredLimits, ENGINE_FEATURES } = await import('../client/engine/webgpu.ts');
  const gpu = await createNodeGpu({ requiredLimits: requiredLimits(opts), optionalFeatures: ENGINE_FEATURES });
  const { fileTuneCache } = await import('./tune-cache.ts');
  const autotune = o.autotune === false ? undefined : { cache: fileTuneCache() };
  const engine = await WebGpuEngine.create(gpu.device, { ...opts, adapterInfo: gpu.info.description, autotune });
  const destroy = engine.destroy.bind(engine);
  engine.destroy = () => { destroy(); void gpu.dispose(); };
  return engine;
}
