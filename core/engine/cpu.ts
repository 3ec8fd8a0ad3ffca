// The CPU engines by name: 'cpu' is the WebAssembly SIMD engine (core/engine/wasm.ts), 'js' the JS
// reference it is tested against (core/engine/js.ts, as llm.c keeps its CPU reference). Storage in
// halves (precision f16) is modelled by the reference alone: the WebGPU kernels' CPU twins.

import type { EngineOptions, TrainingEngine } from './index.ts';
import { JsEngine } from './js.ts';
import { WasmEngine } from './wasm.ts';

export type CpuEngineName = 'cpu' | 'js';
export const CPU_ENGINE_NAMES: readonly CpuEngineName[] = ['cpu', 'js'];

/** A CPU engine: Wasm for 'cpu' at f32, the JS reference for 'js' or for f16 storage. */
export async function createCpuEngine(name: CpuEngineName, opts: EngineOptions): Promise<TrainingEngine> {
  if (name === 'js' || opts.precision === 'f16') return new JsEngine(opts);
  return WasmEngine.create(opts);
}
