// The training-engine interface. The CPU reference (core/engine/js.ts) and the
// WebGPU engine (client/island/engine/webgpu.ts) implement it; the island runtime, the
// simulator and `atoll train` only ever talk to this.

import type { GPTConfig } from '../model/config.ts';
import type { Tokens } from '../model/ops.ts';
import type { EngineKind, Numerics } from '../protocol.ts';

/** One micro-batch: inputs and next-token targets, each (B,T) row-major. */
export interface Batch {
  inputs: Tokens;
  targets: Tokens;
  B: number;
  T: number;
}

/** Per-step hyperparameters; AdamW's betas/eps/decay come from the engine options. */
export interface StepOptions {
  lr: number;
  /** Clip the global gradient norm to this (≤ 0 disables). */
  gradClip: number;
  /** AdamW's decoupled weight decay for this step (the round's plan); absent: the engine's own. */
  weightDecay?: number;
}

export interface EngineOptions {
  config: GPTConfig;
  /** Largest batch the engine allocates activations for. */
  maxBatch: number;
  /** Largest sequence length (≤ config.blockSize). */
  maxT?: number;
  /**
   * Storage of the activations the matmuls and attention read, of the matmuls' weight copy and of
   * Δ: 'f16' keeps them as halves (master weights, gradients and Adam moments stay f32; the CPU
   * engine models it with the kernels' CPU twins); default f32.
   */
  precision?: 'f32' | 'f16';
  beta1?: number;
  beta2?: number;
  eps?: number;
  weightDecay?: number;
}

export interface OptimizerState {
  m: Float32Array;
  v: Float32Array;
  /** AdamW steps taken (for bias correction). */
  step: number;
}

export interface TrainingEngine {
  readonly kind: EngineKind;
  readonly config: GPTConfig;
  /** Human-readable device description (adapter name, or "cpu"). */
  readonly device: string;
  /** Storage precision (absent: f32); reported in the island's hello. */
  readonly numerics?: Numerics;
  /** Devices it trains on data-parallel (absent: 1); reported in the island's hello. */
  readonly devices?: number;

  /** Replace θ. Also records θ as the start point for `readDelta()`. */
  setParams(params: Float32Array): Promise<void>;
  getParams(): Promise<Float32Array>;
  /** Δ = θ_start − θ, where θ_start is what the last `setParams` loaded. */
  readDelta(): Promise<Float32Array>;

  getOptimizerState(): Promise<OptimizerState>;
  setOptimizerState(state: OptimizerState): Promise<void>;
  resetOptimizerState(): Promise<void>;

  /**
   * Enqueue one AdamW step on a batch. No readback: the loss is collected by
   * `takeLosses()`. Resolves once the step is queued (CPU: done).
   */
  step(batch: Batch, opts: StepOptions): Promise<void>;
  /** Losses of the steps since the last call, in order. */
  takeLosses(): Promise<number[]>;

  /** Mean loss on a batch without touching θ or the optimizer. */
  evalLoss(batch: Batch): Promise<number>;
  /** Logits (V) for the token after `context` (its last ≤ blockSize tokens). */
  nextTokenLogits(context: Tokens): Promise<Float32Array>;

  /** Bytes held on the device (0 for the CPU). */
  readonly gpuBytes: number;
  /** The device's peak FLOP/s when known (an MFU readout divides by it); absent when unknown. */
  readonly peakFlops?: number;
  destroy(): void;
}
