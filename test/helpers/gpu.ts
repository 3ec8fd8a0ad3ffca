// One WebGPU device per test file (Dawn in Node; SwiftShader when there is no GPU).
// A missing adapter FAILS the test with the message that says how to get one.

import { createHash } from 'node:crypto';
import { createNodeGpu, type NodeGpu, type NodeGpuOptions } from '../../client/island/engine/dawn.ts';
import type { Batch } from '../../core/engine/index.ts';
import { mulberry32 } from '../../core/random.ts';

import { type KernelSet, Program } from '../../client/island/engine/webgpu-kernels.ts';
import type { DispatchSpec, Shape } from '../../shaders/kernel.ts';

export { readF32 } from '../../client/island/engine/webgpu-kernels.ts';

let shared: Promise<NodeGpu> | null = null;

/** The file's shared device; the first call's options win. */
export function getTestDevice(opts?: NodeGpuOptions): Promise<NodeGpu> {
  shared ??= createNodeGpu(opts);
  return shared;
}

/** For afterAll: drain, destroy, and let the worker exit. */
export async function releaseTestDevice(): Promise<void> {
  const p = shared;
  shared = null;
  if (p) await (await p.catch(() => null))?.dispose();
}

/** Uploads data into a new storage buffer (tests only: allocation per call). */
export function upload(device: GPUDevice, data: Float32Array | Uint32Array, extraUsage = 0): GPUBuffer {
  const size = Math.max(16, Math.ceil(data.byteLength / 16) * 16);
  const buf = device.createBuffer({
    size,
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST | extraUsage,
    mappedAtCreation: true,
  });
  new (data.constructor as Float32ArrayConstructor)(buf.getMappedRange()).set(data);
  buf.unmap();
  return buf;
}

/** Largest |a−b| relative to the largest |b| (a scale-aware error for a whole tensor). */
export function maxRelErr(a: ArrayLike<number>, b: ArrayLike<number>): { abs: number; rel: number } {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let abs = 0,
    scale = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= abs)) abs = Number.isNaN(d) ? Infinity : d;
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return { abs, rel: abs / Math.max(scale, 1e-30) };
}

/** Runs dispatches as the engine does (a Program: pipelines, bind groups and Params from the WGSL); a validation error throws. */
export async function runDispatches(
  device: GPUDevice,
  kernels: KernelSet,
  specs: DispatchSpec[],
  shape: Shape,
  stepBuf: GPUBuffer,
): Promise<void> {
  device.pushErrorScope('validation');
  const prog = await Program.build(kernels, specs, shape, stepBuf);
  prog.setShape(shape);
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  prog.encode(pass, shape);
  pass.end();
  device.queue.submit([enc.finish()]);
  const err = await device.popErrorScope();
  if (err) throw new Error(err.message);
  await device.queue.onSubmittedWorkDone();
  prog.destroy();
}

/** B×T random ids over a vocabulary of V, both ends included (every window holds some); targets a fixed map of them. */
export function vocabBatch(B: number, T: number, seed: number, V: number): Batch {
  const r = mulberry32(seed);
  const inputs = Uint32Array.from({ length: B * T }, () => Math.floor(r() * V));
  inputs[0] = 0;
  inputs[1] = V - 1;
  const targets = inputs.map((x) => (x * 7 + 3) % V);
  return { inputs, targets, B, T };
}

/** The SHA-256 of an array's bytes: "bit for bit" in one comparison. */
export const bitsHash = (a: Float32Array) =>
  createHash('sha256')
    .update(new Uint8Array(a.buffer, a.byteOffset, a.byteLength))
    .digest('hex');

/** A device's limits as a plain record. */
export function limitsOf(d: GPUDevice): Record<string, number> {
  const out: Record<string, number> = {};
  for (const k in d.limits) out[k] = (d.limits as unknown as Record<string, number>)[k];
  return out;
}
