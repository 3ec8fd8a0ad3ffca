// The CPU reference engine: the spec the WebGPU engine is checked against, and
// the engine of the simulator and of islands without WebGPU.

import type { Batch, EngineOptions, OptimizerState, StepOptions, TrainingEngine } from './index.ts';
import { type GPTConfig, paramLayout } from '../model/config.ts';
import { GPT } from '../model/gpt.ts';
import { ADAMW_DEFAULTS, type Tokens, adamwUpdate, clipScale, gradNormSquared, pseudoGradient } from '../model/ops.ts';
import { pseudoGradientF16 } from '../model/ops-f16.ts';

export class JsEngine implements TrainingEngine {
  readonly kind = 'cpu' as const;
  readonly device = 'cpu';
  readonly gpuBytes = 0;
  readonly config: GPTConfig;
  /** f16: the WebGPU engine's --precision f16, modelled by the CPU twins of its kernels. */
  get numerics(): 'f32' | 'f16' {
    return this.model.numerics;
  }
  private readonly model: GPT;
  private readonly evalModel: GPT;
  private readonly start: Float32Array;
  private m: Float32Array;
  private v: Float32Array;
  private t = 0;
  private losses: number[] = [];
  private readonly hyper: typeof ADAMW_DEFAULTS;
  private readonly decayRanges: Array<[number, number, boolean]>;

  constructor(opts: EngineOptions) {
    this.config = opts.config;
    const maxT = opts.maxT ?? opts.config.blockSize;
    this.model = new GPT(opts.config, opts.maxBatch, maxT);
    // sampling and eval share the weights but use their own small activations
    this.evalModel = new GPT(opts.config, Math.min(opts.maxBatch, 8), maxT);
    if (opts.precision === 'f16') {
      this.model.useF16Storage();
      this.evalModel.useF16Storage();
    }
    const n = this.model.params.length;
    this.start = new Float32Array(n);
    this.m = new Float32Array(n);
    this.v = new Float32Array(n);
    this.hyper = {
      beta1: opts.beta1 ?? ADAMW_DEFAULTS.beta1,
      beta2: opts.beta2 ?? ADAMW_DEFAULTS.beta2,
      eps: opts.eps ?? ADAMW_DEFAULTS.eps,
      weightDecay: opts.weightDecay ?? ADAMW_DEFAULTS.weightDecay,
    };
    this.decayRanges = paramLayout(opts.config).tensors.map((t) => [t.offset, t.size, t.decay]);
  }

  async setParams(params: Float32Array): Promise<void> {
    if (params.length !== this.model.params.length) {
      throw new Error(
        `E_WRONG_SIZE: parameter array has ${params.length} elements, the model needs ${this.model.params.length}`,
      );
    }
    this.model.params.set(params);
    this.start.set(params);
  }

  async getParams(): Promise<Float32Array> {
    return this.model.params.slice();
  }

  async readDelta(): Promise<Float32Array> {
    const n = this.start.length;
    const delta = new Float32Array(n);
    // f16: Δ as the GPU engine reads it back, rounded once to halves
    (this.numerics === 'f16' ? pseudoGradientF16 : pseudoGradient)(delta, this.start, this.model.params, n);
    return delta;
  }

  async getOptimizerState(): Promise<OptimizerState> {
    return { m: this.m.slice(), v: this.v.slice(), step: this.t };
  }

  async setOptimizerState(s: OptimizerState): Promise<void> {
    if (s.m.length !== this.m.length || s.v.length !== this.v.length)
      throw new Error('E_WRONG_SIZE: optimizer state does not match the model');
    this.m.set(s.m);
    this.v.set(s.v);
    this.t = s.step;
  }

  async resetOptimizerState(): Promise<void> {
    this.m.fill(0);
    this.v.fill(0);
    this.t = 0;
  }

  async step(batch: Batch, opts: StepOptions): Promise<void> {
    const model = this.model;
    const loss = model.forward(batch.inputs, batch.targets, batch.B, batch.T);
    model.backward();
    const n = model.params.length;
    const scale = clipScale(gradNormSquared(model.grads, n), opts.gradClip);
    this.t += 1;
    const h = this.hyper;
    for (const [off, size, decay] of this.decayRanges) {
      adamwUpdate(
        model.params.subarray(off, off + size),
        model.grads.subarray(off, off + size),
        this.m.subarray(off, off + size),
        this.v.subarray(off, off + size),
        size,
        opts.lr,
        h.beta1,
        h.beta2,
        h.eps,
        decay ? (opts.weightDecay ?? h.weightDecay) : 0,
        this.t,
        scale,
      );
    }
    this.losses.push(loss);
  }

  async takeLosses(): Promise<number[]> {
    const out = this.losses;
    this.losses = [];
    return out;
  }

  async evalLoss(batch: Batch): Promise<number> {
    // chunk the batch through the small eval model so eval never resizes training buffers
    const ev = this.evalModel;
    ev.params.set(this.model.params);
    let sum = 0;
    for (let b0 = 0; b0 < batch.B; b0 += ev.maxB) {
      const nb = Math.min(ev.maxB, batch.B - b0);
      const sl = (x: Batch['inputs']) => x.subarray(b0 * batch.T, (b0 + nb) * batch.T);
      sum += ev.forward(sl(batch.inputs), sl(batch.targets), nb, batch.T) * nb;
    }
    return sum / batch.B;
  }

  async nextTokenLogits(context: Tokens): Promise<Float32Array> {
    const T = Math.min(context.length, this.evalModel.maxT);
    const ctx = context.subarray(context.length - T);
    const ev = this.evalModel;
    ev.params.set(this.model.params);
    ev.forward(ctx, null, 1, T);
    const V = this.config.vocabSize;
    return ev.logits().slice((T - 1) * V, T * V);
  }

  destroy(): void {}
}
