// The Wasm engine's helper threads in Node: worker_threads sharing the engine's WebAssembly.Memory, each
// running core/engine/wasm/kernels.ts's serveKernels. This file is also the worker's entry point.

import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';
import { type KernelThreadInit, type SpawnKernelThread, serveKernels } from '../../../core/engine/wasm/kernels.ts';

const REGISTER_URL = new URL('../../../bin/register.js', import.meta.url).href;

/** Starts one helper as a worker_thread; it is ready once it has instantiated the kernels. */
export const spawnNodeKernelThread: SpawnKernelThread = (init) => {
  const worker = new Worker(new URL(import.meta.url), {
    workerData: { kind: 'atoll-wasm-thread', init },
    execArgv: ['--import', REGISTER_URL],
  });
  worker.unref();
  const ready = new Promise<void>((resolve, reject) => {
    worker.once('message', () => resolve());
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`E_THREAD: Wasm helper thread exited with code ${code}`)));
  });
  return { ready, terminate: () => void worker.terminate() };
};

if (!isMainThread && (workerData as { kind?: string } | null)?.kind === 'atoll-wasm-thread') {
  const init = (workerData as { init: KernelThreadInit }).init;
  void serveKernels(init, () => parentPort!.postMessage('ready'));
}
