// The page's Wasm engine on threads: a pool of Web Workers sharing its WebAssembly.Memory. Shared memory
// needs a cross-origin isolated page (the server sends COOP same-origin and COEP require-corp).

import type { CpuThreads } from '../../core/engine/cpu.ts';
import type { SpawnKernelThread } from '../../core/engine/wasm/kernels.ts';

/** The most threads a page trains on: a volunteer's browser keeps cores for the rest of the machine. */
export const MAX_PAGE_THREADS = 4;

/** Starts one helper Worker; it is ready once it has instantiated the kernels on the shared memory. */
const spawnPageKernelThread: SpawnKernelThread = (init) => {
  const worker = new Worker(new URL('./kernel-thread.worker.ts', import.meta.url), {
    type: 'module',
    name: `atoll-wasm-thread-${init.tid}`,
  });
  const ready = new Promise<void>((resolve, reject) => {
    worker.onmessage = (e: MessageEvent<'ready' | { error: string }>) => {
      if (e.data === 'ready') resolve();
      else reject(new Error(`E_THREAD: Wasm helper thread failed: ${e.data.error}`));
    };
    worker.onerror = (e) => reject(new Error(`E_THREAD: Wasm helper thread failed to start: ${e.message}`));
  });
  worker.postMessage(init);
  return { ready, terminate: () => worker.terminate() };
};

/**
 * The threads this page can give the CPU engine: all its cores up to MAX_PAGE_THREADS when the page is
 * cross-origin isolated (SharedArrayBuffer exists), else one.
 */
export function pageCpuThreads(): CpuThreads {
  const cores = (navigator as Navigator & { hardwareConcurrency?: number }).hardwareConcurrency ?? 1;
  const isolated = (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated === true;
  const count = isolated && typeof SharedArrayBuffer !== 'undefined' ? Math.min(MAX_PAGE_THREADS, cores) : 1;
  return { count: Math.max(1, count), spawn: spawnPageKernelThread };
}
