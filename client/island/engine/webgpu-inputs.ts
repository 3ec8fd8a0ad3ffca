// What the WebGPU engine's step reads from the host: the batch's tokens (checked, staged as u32)
// and the step uniform (lr, AdamW's hyperparameters and bias corrections, clip, loss slot).
// No node: imports.

import type { EngineOptions } from '../../../core/engine/index.ts';
import { ADAMW_DEFAULTS, type Tokens } from '../../../core/model/ops.ts';
import { STEP_UNIFORM_BYTES, encodeStepUniform } from './webgpu-kernels.ts';
import { engineError } from './webgpu-plan.ts';

/**
 * Writes a step's tokens into the engine's `batchTokens` (the whole batch: inputs, then targets), copies each
 * micro-batch's rows into `inputs` and `targets` (what the kernels read), and writes `stepUniform`.
 */
export class StepInputs {
  private readonly hyper: typeof ADAMW_DEFAULTS;
  private readonly stepUniform = new ArrayBuffer(STEP_UNIFORM_BYTES);
  private readonly tokIn: Uint32Array;
  private readonly tokOut: Uint32Array;

  constructor(
    private readonly gpu: GPUDevice,
    private readonly b: (name: string) => GPUBuffer,
    private readonly V: number,
    private readonly maxB: number,
    private readonly maxT: number,
    opts: EngineOptions,
  ) {
    this.hyper = {
      beta1: opts.beta1 ?? ADAMW_DEFAULTS.beta1,
      beta2: opts.beta2 ?? ADAMW_DEFAULTS.beta2,
      eps: opts.eps ?? ADAMW_DEFAULTS.eps,
      weightDecay: opts.weightDecay ?? ADAMW_DEFAULTS.weightDecay,
    };
    this.tokIn = new Uint32Array(maxB * maxT);
    this.tokOut = new Uint32Array(maxB * maxT);
  }

  /** Copies the batch's tokens into the u32 staging arrays; rejects bad shapes and ids. */
  tokens(inputs: Tokens, targets: Tokens | null, B: number, T: number): void {
    if (!Number.isInteger(B) || !Number.isInteger(T) || B < 1 || T < 1 || B > this.maxB || T > this.maxT) {
      throw engineError('E_BAD_BATCH', `batch (${B},${T}) outside the allocated (1..${this.maxB}, 1..${this.maxT})`);
    }
    const n = B * T,
      V = this.V;
    if (inputs.length < n || (targets && targets.length < n))
      throw engineError('E_BAD_BATCH', `a (${B},${T}) batch needs ${n} tokens`);
    for (let i = 0; i < n; i++) {
      const x = inputs[i],
        y = targets ? targets[i] : 0;
      if (!(x < V && y < V && x >= 0 && y >= 0))
        throw engineError('E_BAD_BATCH', `token id out of range [0, ${V}) at ${i}`);
      this.tokIn[i] = x;
      this.tokOut[i] = y;
    }
    const q = this.gpu.queue;
    q.writeBuffer(this.b('batchTokens'), 0, this.tokIn, 0, n);
    if (targets) q.writeBuffer(this.b('batchTokens'), 4 * this.maxB * this.maxT, this.tokOut, 0, n);
  }

  /** Records the copy of rows [r0, r0 + rows) of the batch (T tokens a row) into `inputs` and `targets`. */
  copyRows(enc: GPUCommandEncoder, r0: number, rows: number, T: number): void {
    const all = this.b('batchTokens'),
      bytes = 4 * rows * T;
    enc.copyBufferToBuffer(all, 4 * r0 * T, this.b('inputs'), 0, bytes);
    enc.copyBufferToBuffer(all, 4 * (this.maxB * this.maxT + r0 * T), this.b('targets'), 0, bytes);
  }

  /** The step uniform for AdamW step `t` (bias corrections from max(1, t)). */
  step(t: number, lr: number, maxNorm: number, lossSlot: number, weightDecay = this.hyper.weightDecay): void {
    const h = this.hyper;
    encodeStepUniform(
      {
        lr,
        beta1: h.beta1,
        beta2: h.beta2,
        eps: h.eps,
        weightDecay,
        bc1: 1 - Math.pow(h.beta1, Math.max(1, t)),
        bc2: 1 - Math.pow(h.beta2, Math.max(1, t)),
        maxNorm,
        lossSlot,
        step: t,
      },
      this.stepUniform,
    );
    this.gpu.queue.writeBuffer(this.b('stepUniform'), 0, this.stepUniform);
  }
}
