// One helper thread of the page's Wasm engine: it joins the engine's shared memory and runs its share
// of each kernel call (core/engine/wasm/kernels.ts's serveKernels), started by kernel-threads.ts.

import { type KernelThreadInit, serveKernels } from '../../core/engine/wasm/kernels.ts';

self.onmessage = (e: MessageEvent<KernelThreadInit>) => {
  self.onmessage = null;
  serveKernels(e.data, () => self.postMessage('ready')).catch((err: unknown) => {
    self.postMessage({ error: err instanceof Error ? err.message : String(err) });
  });
};
