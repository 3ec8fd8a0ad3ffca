// The CPU engine: the training step on WebAssembly SIMD kernels (core/engine/wasm/), on one thread or
// several sharing one memory. It implements the same TrainingEngine as the JS reference (core/engine/js.ts),
// against which its kernels and its step are tested; θ, the gradient, the AdamW moments, θ_start and
// every activation live in the module's memory, allocated once.

import type { Batch, EngineOptions, OptimizerState, StepOptions, TrainingEngine } from './index.ts';
import { type GPTConfig, paramLayout } from '../model/config.ts';
import { ADAMW_DEFAULTS, clipScale } from '../model/ops.ts';
import { KERNEL_NAMES, type KernelName, KernelRunner, type SpawnKernelThread } from './wasm/kernels.ts';
import { NORM_CHUNK, wasmLayout } from './wasm/layout.ts';
import { WasmGPT } from './wasm/model.ts';

export interface WasmEngineOptions extends EngineOptions {
  /** Threads the step runs on (default 1): the caller's and threads − 1 helpers from `spawn`. */
  threads?: number;
  /** Starts a helper thread (client/island/engine/wasm-threads.ts in Node, a Worker pool in the page). */
  spawn?: SpawnKernelThread;
}

export class WasmEngine implements TrainingEngine {
  readonly kind = 'cpu' as const;
  readonly numerics = 'f32' as const;
  readonly gpuBytes = 0;
  readonly device: string;
  readonly config: GPTConfig;
  readonly threads: number;
  private losses: number[] = [];
  private t = 0;
  private readonly hyper: typeof ADAMW_DEFAULTS;
  private readonly decayRanges: Array<[number, number, boolean]>;

  private constructor(
    private readonly model: WasmGPT,
    opts: EngineOptions,
  ) {
    this.config = opts.config;
    this.threads = model.run.threads;
    this.device = `wasm-simd (${this.threads} thread${this.threads > 1 ? 's' : ''})`;
    this.hyper = {
      beta1: opts.beta1 ?? ADAMW_DEFAULTS.beta1,
      beta2: opts.beta2 ?? ADAMW_DEFAULTS.beta2,
      eps: opts.eps ?? ADAMW_DEFAULTS.eps,
      weightDecay: opts.weightDecay ?? ADAMW_DEFAULTS.weightDecay,
    };
    this.decayRanges = paramLayout(opts.config).tensors.map((t) => [t.offset, t.size, t.decay]);
  }

  static async create(opts: WasmEngineOptions): Promise<WasmEngine> {
    if (opts.precision === 'f16')
      throw new Error('E_BAD_CONFIG: the Wasm engine is f32 only (--engine js models --precision f16 on the CPU)');
    const maxT = opts.maxT ?? opts.config.blockSize;
    if (maxT > opts.config.blockSize) throw new Error(`maxT ${maxT} exceeds blockSize ${opts.config.blockSize}`);
    const bytes = wasmLayout(opts.config, opts.maxBatch, maxT, 0).bytes;
    const run = await KernelRunner.create(bytes, opts.threads ?? 1, opts.spawn);
    return new WasmEngine(new WasmGPT(opts.config, opts.maxBatch, maxT, run), opts);
  }

  /** Times each kernel from now on (on) or stops (off); returns ms and calls per kernel since it was on. */
  profileKernels(on: boolean): Array<{ kernel: KernelName; ms: number; calls: number }> {
    const run = this.model.run;
    const p = run.profile;
    run.profile = on
      ? { ms: new Float64Array(KERNEL_NAMES.length), calls: new Uint32Array(KERNEL_NAMES.length) }
      : null;
    if (!p) return [];
    return KERNEL_NAMES.map((kernel, i) => ({ kernel, ms: p.ms[i], calls: p.calls[i] })).filter((r) => r.calls > 0);
  }

  private get L() {
    return this.model.layout;
  }

  async setParams(params: Float32Array): Promise<void> {
    if (params.length !== this.L.n)
      throw new Error(`E_WRONG_SIZE: parameter array has ${params.length} elements, the model needs ${this.L.n}`);
    this.model.view(this.L.params, this.L.n).set(params);
    this.model.view(this.L.start, this.L.n).set(params);
  }

  async getParams(): Promise<Float32Array> {
    return this.model.view(this.L.params, this.L.n).slice();
  }

  async readDelta(): Promise<Float32Array> {
    const L = this.L;
    this.model.run.run('subtract', L.n, 4, L.delta, L.start, L.params);
    return this.model.view(L.delta, L.n).slice();
  }

  async getOptimizerState(): Promise<OptimizerState> {
    return {
      m: this.model.view(this.L.m, this.L.n).slice(),
      v: this.model.view(this.L.v, this.L.n).slice(),
      step: this.t,
    };
  }

  async setOptimizerState(s: OptimizerState): Promise<void> {
    if (s.m.length !== this.L.n || s.v.length !== this.L.n)
      throw new Error('E_WRONG_SIZE: optimizer state does not match the model');
    this.model.view(this.L.m, this.L.n).set(s.m);
    this.model.view(this.L.v, this.L.n).set(s.v);
    this.t = s.step;
  }

  async resetOptimizerState(): Promise<void> {
    this.model.view(this.L.m, this.L.n).fill(0);
    this.model.view(this.L.v, this.L.n).fill(0);
    this.t = 0;
  }

  async step(batch: Batch, opts: StepOptions): Promise<void> {
    const model = this.model,
      L = this.L,
      run = model.run;
    const loss = model.forward(batch.inputs, batch.targets, batch.B, batch.T);
    model.backward();
    // the global norm from fixed chunks' partial sums, added in order in f64
    const chunks = Math.ceil(L.n / NORM_CHUNK);
    run.run('sumSquares', chunks, 1, L.normParts, L.grads, L.n, NORM_CHUNK);
    const parts = model.view(L.normParts, chunks);
    let sq = 0;
    for (let i = 0; i < chunks; i++) sq += parts[i];
    const scale = clipScale(sq, opts.gradClip);
    this.t += 1;
    const h = this.hyper;
    const bc1 = 1 - Math.pow(h.beta1, this.t),
      bc2 = 1 - Math.pow(h.beta2, this.t);
    const decayNow = opts.weightDecay ?? h.weightDecay; // a live run's knob, as the JS reference takes it
    for (const [off, size, decay] of this.decayRanges) {
      const at = off * 4;
      const wd = decay ? decayNow : 0;
      run.run(
        'adamw',
        size,
        4,
        L.params + at,
        L.grads + at,
        L.m + at,
        L.v + at,
        opts.lr,
        h.beta1,
        h.beta2,
        h.eps,
        wd,
        bc1,
        bc2,
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
    // chunks of the training batch's size: the activations are scratch between steps
    const model = this.model;
    let sum = 0;
    for (let b0 = 0; b0 < batch.B; b0 += model.maxB) {
      const nb = Math.min(model.maxB, batch.B - b0);
      const sl = (x: Batch['inputs']) => x.subarray(b0 * batch.T, (b0 + nb) * batch.T);
      sum += model.forward(sl(batch.inputs), sl(batch.targets), nb, batch.T) * nb;
    }
    return sum / batch.B;
  }

  async nextTokenLogits(context: Uint8Array): Promise<Float32Array> {
    const T = Math.min(context.length, this.model.maxT);
    this.model.forward(context.subarray(context.length - T), null, 1, T);
    const V = this.config.vocabSize;
    return this.model.logits().slice((T - 1) * V, T * V);
  }

  destroy(): void {
    this.model.run.destroy();
  }
}
