// The CPU engines by name: 'cpu' is the WebAssembly SIMD engine (core/engine/wasm.ts), 'js' the JS
// reference it is tested against (core/engine/js.ts, as llm.c keeps its CPU reference). Storage in
// halves (precision f16) is modelled by the reference alone: the WebGPU kernels' CPU twins.

import type { EngineOptions, TrainingEngine } from './index.ts';
import { JsEngine } from './js.ts';
import { WasmEngine } from './wasm.ts';
import type { SpawnKernelThread } from './wasm/kernels.ts';

/** The Wasm engine's threads: how many, and how a helper starts where the engine runs (Node, a page). */
export interface CpuThreads {
  count: number;
  spawn: SpawnKernelThread;
}

export type CpuEngineName = 'cpu' | 'js';
export const CPU_ENGINE_NAMES: readonly CpuEngineName[] = ['cpu', 'js'];

/** A CPU engine: Wasm for 'cpu' at f32 (on `threads`, default one), the JS reference for 'js' or f16. */
export async function createCpuEngine(
  name: CpuEngineName,
  opts: EngineOptions,
  threads?: CpuThreads,
): Promise<TrainingEngine> {
  if (name === 'js' || opts.precision === 'f16') {
    if ((threads?.count ?? 1) > 1)
      throw Object.assign(new Error("E_BAD_CONFIG: --threads is the Wasm engine's (--engine cpu, f32)"), {
        code: 'E_BAD_CONFIG',
      });
    return new JsEngine(opts);
  }
  return WasmEngine.create({ ...opts, threads: threads?.count ?? 1, spawn: threads?.spawn });
}
