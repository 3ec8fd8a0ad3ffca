// The WebGPU engine's options: what each means, its defaults, and the checks before anything is planned.
// No node: imports (browser, Web Worker and Node).

import type { EngineOptions } from '../../../core/engine/index.ts';
import { validateConfig } from '../../../core/model/config.ts';
import type { TuneCache } from './webgpu-tune.ts';

export interface WebGpuEngineOptions extends EngineOptions {
  /** Shown as the engine's `device` (e.g. the adapter's description). */
  adapterInfo?: string;
  /** Size of the GPU loss ring: losses are copied off the GPU every this many steps (default 64). */
  lossReadEvery?: number;
  /** Reductions with subgroup operations (default: when the device has `subgroups`). */
  subgroups?: boolean;
  /** The adapter's fp32 peak in TFLOP/s, where known (gives `peakFlops` and `mfu()`). */
  peakTflops?: number;
  /**
   * Size of the readback buffer θ, Δ and the moments are read through in chunks (default READBACK_BYTES;
   * tests make it small).
   */
  readbackBytes?: number;
  /** Time the matmul variants at start and keep the fastest per shape (absent: no tuning). */
  autotune?: { cache: TuneCache | null; budgetMs?: number };
  /** Vocabulary ids per chunk of the LM head, a multiple of 4 (default HEAD_CHUNK; the whole V where it is smaller). */
  headChunk?: number;
  /**
   * Sequences per micro-batch (default maxBatch: none): a step of B sequences runs ⌈B / microBatch⌉ forward and
   * backward passes whose gradients add, on activations sized for microBatch sequences.
   */
  microBatch?: number;
  /**
   * The binding limit to plan for (bytes): every dispatch binds at most this much of a buffer, the dispatches over all
   * of wte or θ split into windows that fit. The engine uses the smaller of this and the device's
   * maxStorageBufferBindingSize; absent (planning without a device): no limit, as today.
   */
  maxBindingBytes?: number;
  /**
   * The buffer limit to plan for (bytes): θ's flat buffers (webgpu-plan.ts FLAT_BUFFERS) that exceed it are made of
   * several GPUBuffers, cut between tensors. The engine uses the smaller of this and the device's maxBufferSize;
   * absent (planning without a device): no limit.
   */
  maxBufferBytes?: number;
}

/**
 * The LM head's default chunk: no (B·T, V) buffer exists, only (B·T, chunk) logits. At GPT-2's V = 50,257,
 * B·T = 1024: 7 chunks, 32 MiB of logits where the full head took 3 × 196 MiB (logits, probs, dlogits).
 */
export const HEAD_CHUNK = 8192;

/** The head's chunk width for these options: ids per chunk (the last chunk may be narrower). */
export const headChunk = (opts: WebGpuEngineOptions) => Math.min(opts.config.vocabSize, opts.headChunk ?? HEAD_CHUNK);

export function validateOptions(opts: WebGpuEngineOptions): void {
  validateConfig(opts.config);
  const maxT = opts.maxT ?? opts.config.blockSize;
  if (!Number.isInteger(maxT) || maxT < 1 || maxT > opts.config.blockSize)
    throw new Error(`maxT ${maxT} must be an integer in [1, blockSize ${opts.config.blockSize}]`);
  if (!Number.isInteger(opts.maxBatch) || opts.maxBatch < 1)
    throw new Error(`maxBatch ${opts.maxBatch} must be a positive integer`);
  // grid dimensions the kernels index directly (vocab rows, batch·heads, positions)
  const dims = { vocabSize: opts.config.vocabSize, maxBatch·nHead: opts.maxBatch * opts.config.nHead, maxT };
  for (const [k, v] of Object.entries(dims))
    if (v > 65535) throw new Error(`${k} = ${v} exceeds 65535 workgroups per grid dimension`);
  const mb = opts.microBatch;
  if (mb !== undefined && (!Number.isInteger(mb) || mb < 1))
    throw new Error(`microBatch ${mb} must be a positive integer (at least maxBatch: no micro-batches)`);
  const hc = opts.headChunk;
  if (hc !== undefined && (!Number.isInteger(hc) || hc < 4 || hc % 4 !== 0))
    throw new Error(`headChunk ${hc} must be a positive multiple of 4 (vocabulary ids per chunk of the LM head)`);
  const p = opts.precision ?? 'f32';
  if (p !== 'f32' && p !== 'f16') throw new Error(`precision ${String(p)} must be f32 or f16`);
  // attention holds rows as vec4s, in either precision
  const hs = opts.config.nEmbd / opts.config.nHead;
  if (hs % 4 !== 0)
    throw new Error(`the WebGPU engine needs a head size (nEmbd / nHead) that is a multiple of 4, got ${hs}`);
  if (p === 'f16') {
    // halves are read 4 at a time (vec4 loads of the matmuls and attention), 8 by the encoder and LayerNorm
    const { nEmbd: C, nHead: NH, vocabSize: V } = opts.config;
    for (const [k, v, n] of [
      ['nEmbd', C, 8],
      ['vocabSize', V, 4],
      ['head size', C / NH, 4],
    ] as const)
      if (v % n !== 0) throw new Error(`precision f16 needs ${k} a multiple of ${n}, got ${v}`);
  }
}

export function engineError(code: string, message: string): Error & { code: string } {
  return Object.assign(new Error(`${code}: ${message}`), { code });
}
