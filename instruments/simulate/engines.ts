// The engines a simulated row trains and evaluates on: the CPU reference (default), or WebGPU
// through Dawn (`--engine webgpu`), one device per row shared by all its islands. Virtual time stays
// virtual: an engine only computes, and the VirtualClock waits (track) for any real GPU work in
// flight before it moves time on, so a row's schedule does not depend on the device's speed.

import { createCpuEngine } from '../../core/engine/cpu.ts';
import type { VirtualClock } from './clock.ts';
import type { EngineOptions, TrainingEngine } from '../../core/engine/index.ts';
import type { GPTConfig } from '../../core/model/config.ts';

export type SimEngineKind = 'cpu' | 'js' | 'webgpu';

export interface EngineMaker {
  readonly kind: SimEngineKind;
  make(opts: EngineOptions): Promise<TrainingEngine>;
  /** Destroys the engines made and the device. */
  dispose(): Promise<void>;
}

/**
 * Engines for one row. `largest` bounds every engine the row makes (the device is created with the
 * limits it needs); the WebGPU engines are not autotuned (a row's engines would each time variants).
 */
export async function engineMaker(
  kind: SimEngineKind,
  largest: { config: GPTConfig; maxBatch: number; maxT: number },
): Promise<EngineMaker> {
  const made: TrainingEngine[] = [];
  if (kind !== 'webgpu') {
    return {
      kind,
      async make(opts) {
        const e = await createCpuEngine(kind, opts);
        made.push(e);
        return e;
      },
      async dispose() {
        for (const e of made.splice(0)) e.destroy();
      },
    };
  }
  const { createNodeGpu } = await import('../../client/island/engine/dawn.ts');
  const { WebGpuEngine, requiredLimits, ENGINE_FEATURES } = await import('../../client/island/engine/webgpu.ts');
  const gpu = await createNodeGpu({ requiredLimits: requiredLimits(largest), optionalFeatures: ENGINE_FEATURES });
  return {
    kind,
    async make(opts) {
      const e = await WebGpuEngine.create(gpu.device, { ...opts, adapterInfo: gpu.info.description });
      made.push(e);
      return e;
    },
    async dispose() {
      for (const e of made.splice(0)) e.destroy();
      await gpu.dispose();
    },
  };
}

/**
 * Wraps an engine so that each call's real asynchronous work (a GPU readback) holds the virtual
 * clock: time does not move while the device computes. The CPU engine resolves at once.
 */
export function holdClock<E extends TrainingEngine>(engine: E, clock: VirtualClock): E {
  return new Proxy(engine, {
    get(target, key) {
      const v = Reflect.get(target, key);
      if (typeof v !== 'function') return v;
      return (...args: unknown[]) => {
        const r = (v as (...a: unknown[]) => unknown).apply(target, args);
        return r instanceof Promise ? clock.hold(r) : r;
      };
    },
  });
}
