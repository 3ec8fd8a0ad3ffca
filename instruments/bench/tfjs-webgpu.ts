// TF.js on the same Dawn adapter as our engine, in the same Node process.
//
// createNodeGpu (client/island/engine/dawn.ts) picks the adapter (hardware first, then SwiftShader) and
// sets up the process for it (Vulkan loader, VK_ICD_FILENAMES). TF.js then needs a
// `navigator.gpu` to request its own adapter and device from: we give it the GPU object
// of that same Dawn instance (NodeGpu.gpu), and the caller still compares the adapter
// descriptions and reports both.
//
// TF.js can be set up once per process (its backend registry is global).

import type { NodeGpu } from '../../client/island/engine/dawn.ts';

export type Tf = typeof import('@tensorflow/tfjs');

export interface TfWebgpu {
  tf: Tf;
  /** The device TF.js requested for itself. */
  device: GPUDevice;
  /** Vendor and architecture of the adapter TF.js got (all that TF.js keeps of its info). */
  description: string;
  /** Flushes TF.js's pending command encoder and waits for the queue to drain. */
  sync(): Promise<void>;
  /** Drains the queue and destroys TF.js's device (TF.js is unusable afterwards). */
  dispose(): Promise<void>;
}

interface WebGpuBackendLike {
  device: GPUDevice;
  adapterInfo?: { vendor?: string; architecture?: string };
  ensureCommandEncoderReady(): void;
  endComputePassEncoder(): void;
  submitQueue(): void;
}

// Dawn rule: the object create() returns must stay referenced while its devices live.
const held = new Set<GPU>();
let current: Promise<TfWebgpu> | null = null;
let finished = false;

async function setup(nodeGpu: NodeGpu): Promise<TfWebgpu> {
  // the very Dawn instance our engine's device came from, so both sides share the adapter
  const gpu = nodeGpu.gpu;
  held.add(gpu); // TF.js's device may outlive ours
  // the webgpu backend registers itself at import time only if navigator.gpu exists
  Object.defineProperty(globalThis, 'navigator', { value: { gpu }, configurable: true, writable: true });
  const tf = await import('@tensorflow/tfjs');
  await import('@tensorflow/tfjs-backend-webgpu');
  if (!(await tf.setBackend('webgpu')) || tf.getBackend() !== 'webgpu') {
    throw new Error('TF.js could not initialise its webgpu backend on this adapter');
  }
  await tf.ready();
  const backend = tf.backend() as unknown as WebGpuBackendLike;
  const device = backend.device;
  const ai = backend.adapterInfo ?? {};
  const description = `${ai.vendor ?? ''} ${ai.architecture ?? ''}`.trim();
  let disposed = false;
  // submit what TF.js has encoded so far, its open compute pass included
  const flush = () => {
    backend.ensureCommandEncoderReady();
    backend.endComputePassEncoder();
    backend.submitQueue();
  };
  return {
    tf,
    device,
    description,
    async sync() {
      flush();
      await device.queue.onSubmittedWorkDone();
    },
    async dispose() {
      if (disposed) return;
      disposed = true;
      flush();
      await device.queue.onSubmittedWorkDone().catch(() => {});
      device.destroy();
      await device.lost.catch(() => {});
      // drop every reference to the Dawn instance so Node can exit
      if (gpu) held.delete(gpu);
      const nav = (globalThis as { navigator?: { gpu?: unknown } }).navigator;
      if (nav && nav.gpu === gpu) delete nav.gpu;
      finished = true;
    },
  };
}

/**
 * TF.js with its webgpu backend on the adapter `nodeGpu` uses. Call createNodeGpu first:
 * it prepares the process for the adapter. Later calls return the same instance.
 */
export function setupTfjsWebgpu(nodeGpu: NodeGpu): Promise<TfWebgpu> {
  if (finished) return Promise.reject(new Error('TF.js on WebGPU was disposed; it can be set up once per process'));
  current ??= setup(nodeGpu);
  return current;
}
