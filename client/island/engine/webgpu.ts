// The WebGPU training engine: the GPT of core/model/gpt.ts as WGSL kernels, with
// parameters, gradients, Adam moments, θ_start and every activation resident on the GPU.
//
// - Pipelines, bind groups and uniform slots are built once in `create()`.
// - `step()` is ONE queue.submit with no readback: forward, loss, backward, grad norm
//   and clip scale, AdamW. The mean loss goes to a slot of a GPU loss ring; the ring
//   is copied to a mappable buffer every `lossReadEvery` steps (inside that step's
//   submission) and by `takeLosses()`, which alone maps them: no promise is pending
//   while steps run (under Node a pending Dawn promise busy-polls a core). Both readers: webgpu-readback.ts.
// - Nothing is zeroed per step: each kernel that first writes a gradient overwrites
//   it, and only the two true fan-ins accumulate (the residual stream's gradient, and
//   the tied wte that gets the LM head's and the embedding's gradient).
// - Batches of any B ≤ maxBatch and T ≤ maxT: the shape only changes uniforms.
// Works in Node (device from client/island/engine/dawn.ts) and in a browser or Web Worker; no node: imports.

import type { Batch, OptimizerState, StepOptions, TrainingEngine } from '../../../core/engine/index.ts';
import { type GPTConfig, mfu, paramLayout } from '../../../core/model/config.ts';
import { ADAMW_DEFAULTS, type Tokens } from '../../../core/model/ops.ts';
import { unpackHalves } from '../../../core/model/ops-f16.ts';
import { KernelSet, Program, STEP_UNIFORM_BYTES, encodeStepUniform } from './webgpu-kernels.ts';
import {
  AUTOTUNE_BUDGET_MS,
  type DeviceLost,
  EVAL_SLOTS,
  type Plan,
  type WebGpuEngineOptions,
  engineError,
  estimateGpuBytes,
  limitShortfall,
  mib,
  plan,
  requiredLimits,
  resolve,
  stepDispatches,
  validateOptions,
} from './webgpu-plan.ts';
import * as op from '../../../shaders/ops.ts';
import { type KernelTime, type PendingProfile, recordProfiled } from './webgpu-profile.ts';
import { type TuneResult, autotuneMatmuls, modelMatmuls } from './webgpu-tune.ts';
import { trainingStep } from './webgpu-step.ts';
import { LossRing, Readback } from './webgpu-readback.ts';

export {
  AUTOTUNE_BUDGET_MS,
  type DeviceLost,
  ENGINE_FEATURES,
  type WebGpuEngineOptions,
  checkAdapterFits,
  engineFeatures,
  estimateGpuBytes,
  requiredLimits,
} from './webgpu-plan.ts';

// ---------------------------------------------------------------------------- engine

export class WebGpuEngine implements TrainingEngine {
  readonly kind = 'webgpu' as const;
  readonly config: GPTConfig;
  readonly device: string;
  /** Resolves once if the GPU device is lost; then create a new engine and setParams. */
  readonly lost: Promise<DeviceLost>;

  private readonly gpu: GPUDevice;
  /** Whether the reductions use subgroup operations. */
  readonly subgroups: boolean;
  /** Storage precision of the activations the matmuls read, of their weight copy and of Δ. */
  readonly numerics: 'f32' | 'f16';
  /** --precision f16: half.wgsl's storage form on this device (native with shader-f16). */
  readonly halfForm: op.HalfForm;
  /** The adapter's peak FLOP/s, when given (peakTflops). */
  readonly peakFlops?: number;
  /** What the autotuner chose (null: not tuned). */
  tuning: TuneResult | null = null;
  private readonly autotune: WebGpuEngineOptions['autotune'];
  private readonly N: number;
  private readonly maxB: number;
  private readonly maxT: number;
  private readonly R: number;
  private readonly buf: Map<string, GPUBuffer>;
  private program!: Program;
  private deltaProgram!: Program;
  private packProgram: Program | null = null; // f16: θ → the matmuls' weight copy, after setParams
  private fwdEnd = 0; // dispatches [0, fwdEnd): forward to the logits
  private lossEnd = 0; // [fwdEnd, lossEnd): cross-entropy and mean loss
  private optStart = 0; // [optStart, end): grad norm, clip, AdamW (after the gradients)
  private readonly hyper: typeof ADAMW_DEFAULTS;
  private readonly stepUniform = new ArrayBuffer(STEP_UNIFORM_BYTES);
  private readonly tokIn: Uint32Array;
  private readonly tokOut: Uint32Array;
  private t = 0; // AdamW steps (bias correction)
  private losses!: LossRing;
  private reads!: Readback;
  private bytes = 0;
  private isLost = false;
  private destroyed = false;
  private lostCallbacks = new Set<(l: DeviceLost) => void>();

  private constructor(device: GPUDevice, opts: WebGpuEngineOptions) {
    this.gpu = device;
    this.config = { ...opts.config };
    this.device = opts.adapterInfo ?? 'webgpu';
    this.subgroups = (opts.subgroups ?? true) && device.features.has('subgroups');
    this.numerics = opts.precision ?? 'f32';
    this.halfForm = op.halfForm(device.features);
    this.autotune = opts.autotune;
    if (opts.peakTflops) this.peakFlops = opts.peakTflops * 1e12;
    const r = resolve(opts);
    this.maxB = r.B;
    this.maxT = r.maxT;
    this.R = r.ring;
    this.N = paramLayout(this.config).total;
    this.hyper = {
      beta1: opts.beta1 ?? ADAMW_DEFAULTS.beta1,
      beta2: opts.beta2 ?? ADAMW_DEFAULTS.beta2,
      eps: opts.eps ?? ADAMW_DEFAULTS.eps,
      weightDecay: opts.weightDecay ?? ADAMW_DEFAULTS.weightDecay,
    };
    this.tokIn = new Uint32Array(this.maxB * this.maxT);
    this.tokOut = new Uint32Array(this.maxB * this.maxT);
    this.buf = new Map();
    this.lost = device.lost.then((info) => {
      this.isLost = true;
      const l = { reason: String(info.reason ?? 'unknown'), message: info.message };
      for (const cb of this.lostCallbacks) cb(l);
      return l;
    });
  }

  /**
   * Allocates everything and compiles every pipeline. Rejects with code
   * E_ADAPTER_TOO_SMALL (naming the limit) when the device's limits are too small:
   * request `requiredLimits(opts)` when creating the device.
   */
  static async create(device: GPUDevice, opts: WebGpuEngineOptions): Promise<WebGpuEngine> {
    try {
      validateOptions(opts);
    } catch (e) {
      throw engineError('E_BAD_CONFIG', (e as Error).message);
    }
    const fits = limitShortfall(requiredLimits(opts), device.limits, opts, 'device');
    if (!fits.ok)
      throw Object.assign(new Error(`${fits.error.code}: ${fits.error.message}`), { code: fits.error.code });
    const e = new WebGpuEngine(device, opts);
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    let thrown: unknown = null;
    try {
      e.allocate(plan(opts));
      await e.build();
    } catch (x) {
      thrown = x;
    }
    const validation = await device.popErrorScope();
    const oom = await device.popErrorScope();
    if (thrown || oom || validation) {
      e.destroy();
      if (oom)
        throw engineError('E_GPU_OUT_OF_MEMORY', `allocating ${mib(estimateGpuBytes(opts))} failed: ${oom.message}`);
      if (validation) throw engineError('E_GPU_VALIDATION', validation.message);
      throw thrown;
    }
    return e;
  }

  /** Parameters of the model (θ's length). */
  get paramCount(): number {
    return this.N;
  }

  /** Bytes allocated on the device. */
  get gpuBytes(): number {
    return this.bytes;
  }

  /** Calls `cb` once if the device is lost; returns an unsubscribe function. */
  onLost(cb: (l: DeviceLost) => void): () => void {
    this.lostCallbacks.add(cb);
    return () => this.lostCallbacks.delete(cb);
  }

  private alloc(label: string, size: number, usage: GPUBufferUsageFlags): GPUBuffer {
    const b = this.gpu.createBuffer({ label, size, usage });
    this.bytes += size;
    return b;
  }

  private allocate(p: Plan): void {
    const S = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    for (const [name, size] of p.storage) this.buf.set(name, this.alloc(name, size, S));
    const o = p.other;
    this.buf.set(
      'readback',
      this.alloc('readback', o.get('readback')!, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST),
    );
    this.reads = new Readback(this.gpu, this.b('readback'));
    this.losses = new LossRing(this.gpu, this.b('ring'), this.R, o.get('lossStaging')!, (l, n, u) =>
      this.alloc(l, n, u),
    );
    this.buf.set(
      'stepUniform',
      this.alloc('stepUniform', o.get('stepUniform')!, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST),
    );
  }

  private b(name: string): GPUBuffer {
    const x = this.buf.get(name);
    if (!x) throw new Error(`internal: no buffer ${name}`);
    return x;
  }

  /** The training step's dispatches (webgpu-step.ts) built into programs, on tuned matmuls. */
  private async build(): Promise<void> {
    const kernels = KernelSet.for(this.gpu, { subgroups: this.subgroups });
    if (this.autotune) {
      this.tuning = await autotuneMatmuls(
        this.gpu,
        kernels,
        modelMatmuls(this.config.nEmbd, this.config.vocabSize),
        this.maxB * this.maxT,
        { adapter: this.device, cache: this.autotune.cache, budgetMs: this.autotune.budgetMs ?? AUTOTUNE_BUDGET_MS },
      );
    }
    const f16 = this.numerics === 'f16',
      form = this.halfForm;
    const { specs, fwdEnd, lossEnd, optStart } = trainingStep(this.config, (n) => this.b(n), {
      maxRows: this.maxB * this.maxT,
      choices: this.tuning?.choices ?? new Map(),
      ...(f16 ? { f16: { form } } : {}),
    });
    this.fwdEnd = fwdEnd;
    this.lossEnd = lossEnd;
    this.optStart = optStart;
    const L = this.config.nLayer,
      b = (n: string) => this.b(n);
    const params = b('params'),
      grads = b('grads');
    if (specs.length !== stepDispatches(L))
      throw new Error(`internal: ${specs.length} dispatches, expected ${stepDispatches(L)}`);
    const probe = { B: this.maxB, T: this.maxT };
    this.program = await Program.build(kernels, specs, probe, b('stepUniform'), 'step');
    // Δ into the gradient buffer (the next step overwrites it): halves for f16, read back as such
    const delta = f16
      ? op.pseudoGradientF16(grads, b('start'), params, { N: this.N, form })
      : op.pseudoGradient(grads, b('start'), params, { N: this.N });
    this.deltaProgram = await Program.build(kernels, [delta], probe, undefined, 'delta');
    this.bytes += this.program.uniform.size + this.deltaProgram.uniform.size;
    this.deltaProgram.setShape(probe);
    if (f16) {
      this.packProgram = await Program.build(
        kernels,
        [op.packF16(b('wcopy'), params, { N: this.N, form })],
        probe,
        undefined,
        'pack',
      );
      this.bytes += this.packProgram.uniform.size;
      this.packProgram.setShape(probe);
    }
  }

  // ---------------------------------------------------------------- checks

  private usable(): void {
    if (this.destroyed) throw engineError('E_DESTROYED', 'the engine was destroyed');
    if (this.isLost) throw engineError('E_DEVICE_LOST', 'the GPU device was lost: create a new engine and setParams');
  }

  /** Copies the batch's tokens into the u32 staging arrays; rejects bad shapes and ids. */
  private loadTokens(inputs: Tokens, targets: Tokens | null, B: number, T: number): void {
    if (!Number.isInteger(B) || !Number.isInteger(T) || B < 1 || T < 1 || B > this.maxB || T > this.maxT) {
      throw engineError('E_BAD_BATCH', `batch (${B},${T}) outside the allocated (1..${this.maxB}, 1..${this.maxT})`);
    }
    const n = B * T,
      V = this.config.vocabSize;
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
    q.writeBuffer(this.b('inputs'), 0, this.tokIn, 0, n);
    if (targets) q.writeBuffer(this.b('targets'), 0, this.tokOut, 0, n);
  }

  private writeStep(lr: number, maxNorm: number, lossSlot: number, weightDecay = this.hyper.weightDecay): void {
    const h = this.hyper;
    encodeStepUniform(
      {
        lr,
        beta1: h.beta1,
        beta2: h.beta2,
        eps: h.eps,
        weightDecay,
        bc1: 1 - Math.pow(h.beta1, Math.max(1, this.t)),
        bc2: 1 - Math.pow(h.beta2, Math.max(1, this.t)),
        maxNorm,
        lossSlot,
        step: this.t,
      },
      this.stepUniform,
    );
    this.gpu.queue.writeBuffer(this.b('stepUniform'), 0, this.stepUniform);
  }

  // ---------------------------------------------------------------- training

  /** Enqueues one AdamW step: one submission, no readback. */
  async step(batch: Batch, opts: StepOptions): Promise<void> {
    this.enqueue(batch, opts, (enc, shape) => {
      const pass = enc.beginComputePass();
      this.program.encode(pass, shape);
      pass.end();
    });
  }

  /**
   * One training step (as `step`) with each kernel in its own pass between timestamps:
   * the GPU ms of every dispatch, in order. Needs the device's `timestamp-query`.
   */
  async profileStep(batch: Batch, opts: StepOptions): Promise<KernelTime[]> {
    if (!this.gpu.features.has('timestamp-query'))
      throw engineError('E_NO_TIMESTAMPS', 'the device was created without timestamp-query');
    let pending: PendingProfile | null = null;
    this.enqueue(batch, opts, (enc, shape) => {
      pending = recordProfiled(this.gpu, enc, this.program, shape);
    });
    return (pending as PendingProfile | null)!.read();
  }

  /** Model FLOPs utilisation at `tokensPerSec` (T: sequence length) where the peak is known, else null. */
  mfu(tokensPerSec: number, T = this.maxT): number | null {
    return this.peakFlops ? mfu(this.config, tokensPerSec, this.peakFlops, T) : null;
  }

  // ---------------------------------------------------------------- several devices (multi-device.ts)

  /**
   * The first half of a data-parallel step: forward, loss and backward on this device's share of
   * the batch. Then `addGradientsInto` (the all-reduce is the caller's) and `applyGradients`.
   */
  gradientsStep(batch: Batch, opts: StepOptions): void {
    this.enqueue(batch, opts, (enc, shape) => {
      const pass = enc.beginComputePass();
      this.program.encode(pass, shape, 0, this.optStart);
      pass.end();
    });
  }

  /** The gradients of the last `gradientsStep`, added into `into` × `weight` as they are read back. */
  async addGradientsInto(into: Float32Array, weight: number): Promise<void> {
    this.usable();
    await this.reads.exclusive(() =>
      this.reads.out(this.b('grads'), 4 * this.N, (chunk, at) => {
        const g = new Float32Array(chunk),
          o = at / 4;
        for (let i = 0; i < g.length; i++) into[o + i] += weight * g[i];
      }),
    );
  }

  /** The second half: the all-reduced gradients in, then grad norm, clip and AdamW (one submission). */
  applyGradients(grads: Float32Array): void {
    this.usable();
    if (grads.length !== this.N)
      throw engineError('E_WRONG_SIZE', `gradients have ${grads.length} elements, the model needs ${this.N}`);
    this.gpu.queue.writeBuffer(this.b('grads'), 0, grads);
    const enc = this.gpu.createCommandEncoder({ label: 'applyGradients' });
    const pass = enc.beginComputePass();
    this.program.encode(pass, { B: this.maxB, T: this.maxT }, this.optStart);
    pass.end();
    this.gpu.queue.submit([enc.finish()]);
  }

  /** Loads the batch and step uniform, records the step with `record`, submits (the loss ring as in `step`). */
  private enqueue(
    batch: Batch,
    opts: StepOptions,
    record: (enc: GPUCommandEncoder, shape: { B: number; T: number }) => void,
  ): void {
    this.usable();
    const { B, T } = batch;
    this.loadTokens(batch.inputs, batch.targets, B, T);
    this.t += 1;
    this.writeStep(opts.lr, opts.gradClip, this.losses.slot, opts.weightDecay);
    const shape = { B, T };
    this.program.setShape(shape);
    const enc = this.gpu.createCommandEncoder({ label: 'step' });
    record(enc, shape);
    this.losses.recorded(enc);
    this.gpu.queue.submit([enc.finish()]);
  }

  /** Losses of the steps since the last call, in order (copied and mapped asynchronously). */
  async takeLosses(): Promise<number[]> {
    this.usable();
    return this.losses.take();
  }

  // ---------------------------------------------------------------- evaluation

  async evalLoss(batch: Batch): Promise<number> {
    this.usable();
    const { B, T } = batch;
    if (T > this.maxT || T < 1 || B < 1)
      throw engineError('E_BAD_BATCH', `eval batch (${B},${T}) needs 1 ≤ T ≤ ${this.maxT}`);
    return this.reads.exclusive(async () => {
      let sum = 0;
      const sizes: number[] = [];
      const flush = async () => {
        const enc = this.gpu.createCommandEncoder({ label: 'evalLoss.read' });
        enc.copyBufferToBuffer(this.b('ring'), this.R * 4, this.b('readback'), 0, sizes.length * 4);
        this.gpu.queue.submit([enc.finish()]);
        const vals = await this.reads.mapped(sizes.length);
        sizes.forEach((nb, j) => {
          sum += vals[j] * nb;
        });
        sizes.length = 0;
      };
      for (let b0 = 0; b0 < B; b0 += this.maxB) {
        const nb = Math.min(this.maxB, B - b0);
        const sl = (x: Tokens) => x.subarray(b0 * T, (b0 + nb) * T);
        this.loadTokens(sl(batch.inputs), sl(batch.targets), nb, T);
        this.writeStep(0, 0, this.R + sizes.length);
        const shape = { B: nb, T };
        this.program.setShape(shape);
        const enc = this.gpu.createCommandEncoder({ label: 'evalLoss' });
        const pass = enc.beginComputePass();
        this.program.encode(pass, shape, 0, this.lossEnd);
        pass.end();
        this.gpu.queue.submit([enc.finish()]);
        sizes.push(nb);
        if (sizes.length === EVAL_SLOTS) await flush();
      }
      if (sizes.length) await flush();
      return sum / B;
    });
  }

  async nextTokenLogits(context: Tokens): Promise<Float32Array> {
    this.usable();
    const T = Math.min(context.length, this.maxT);
    if (T < 1) throw engineError('E_BAD_BATCH', 'empty context');
    const ctx = context.subarray(context.length - T);
    return this.reads.exclusive(async () => {
      this.loadTokens(ctx, null, 1, T);
      const shape = { B: 1, T };
      this.program.setShape(shape);
      const V = this.config.vocabSize;
      const enc = this.gpu.createCommandEncoder({ label: 'nextTokenLogits' });
      const pass = enc.beginComputePass();
      this.program.encode(pass, shape, 0, this.fwdEnd);
      pass.end();
      enc.copyBufferToBuffer(this.b('logits'), (T - 1) * V * 4, this.b('readback'), 0, V * 4);
      this.gpu.queue.submit([enc.finish()]);
      return this.reads.mapped(V);
    });
  }

  // ---------------------------------------------------------------- parameters and state

  async setParams(params: Float32Array): Promise<void> {
    this.usable();
    if (params.length !== this.N)
      throw engineError('E_WRONG_SIZE', `parameter array has ${params.length} elements, the model needs ${this.N}`);
    const q = this.gpu.queue;
    q.writeBuffer(this.b('params'), 0, params);
    q.writeBuffer(this.b('start'), 0, params);
    if (this.packProgram) {
      // f16: the matmuls' weight copy, rounded once from θ (AdamW keeps it after each step)
      const enc = this.gpu.createCommandEncoder({ label: 'setParams.pack' });
      const pass = enc.beginComputePass();
      this.packProgram.encode(pass, { B: this.maxB, T: this.maxT });
      pass.end();
      q.submit([enc.finish()]);
    }
  }

  async getParams(): Promise<Float32Array> {
    return this.readBuffer('params');
  }

  /** Δ = θ_start − θ, computed on the GPU (into the gradient buffer, which the next step overwrites). */
  async readDelta(): Promise<Float32Array> {
    this.usable();
    return this.reads.exclusive(async () => {
      const delta = (enc: GPUCommandEncoder) => {
        const pass = enc.beginComputePass();
        this.deltaProgram.encode(pass, { B: this.maxB, T: this.maxT });
        pass.end();
      };
      const out = new Float32Array(this.N);
      if (this.numerics === 'f32') {
        await this.reads.out(
          this.b('grads'),
          4 * this.N,
          (chunk, at) => out.set(new Float32Array(chunk), at / 4),
          delta,
        );
      } else {
        // N halves, half the bytes of f32, unpacked here once (for the codec); chunks hold whole words
        await this.reads.out(
          this.b('grads'),
          4 * Math.ceil(this.N / 2),
          (chunk, at) => {
            const from = at / 2,
              n = Math.min(this.N - from, (chunk.byteLength / 4) * 2);
            unpackHalves(new Uint32Array(chunk), n, out.subarray(from, from + n));
          },
          delta,
        );
      }
      return out;
    });
  }

  async getOptimizerState(): Promise<OptimizerState> {
    const m = await this.readBuffer('m');
    const v = await this.readBuffer('v');
    return { m, v, step: this.t };
  }

  async setOptimizerState(s: OptimizerState): Promise<void> {
    this.usable();
    if (s.m.length !== this.N || s.v.length !== this.N)
      throw engineError('E_WRONG_SIZE', 'optimizer state does not match the model');
    this.gpu.queue.writeBuffer(this.b('m'), 0, s.m);
    this.gpu.queue.writeBuffer(this.b('v'), 0, s.v);
    this.t = s.step;
  }

  async resetOptimizerState(): Promise<void> {
    this.usable();
    const enc = this.gpu.createCommandEncoder({ label: 'resetOptimizerState' });
    enc.clearBuffer(this.b('m'));
    enc.clearBuffer(this.b('v'));
    this.gpu.queue.submit([enc.finish()]);
    this.t = 0;
  }

  /** Test/debug only: the gradients of the last step (before clipping), flat like the params. */
  async debugReadGrads(): Promise<Float32Array> {
    return this.readBuffer('grads');
  }

  // ---------------------------------------------------------------- readback helpers

  private readBuffer(name: string): Promise<Float32Array> {
    this.usable();
    return this.reads.exclusive(async () => {
      const out = new Float32Array(this.N);
      await this.reads.out(this.b(name), 4 * this.N, (chunk, at) => out.set(new Float32Array(chunk), at / 4));
      return out;
    });
  }

  /** Frees the engine's buffers (the device belongs to the caller). */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    for (const b of this.buf.values()) b.destroy();
    this.losses?.destroy();
    this.program?.destroy();
    this.deltaProgram?.destroy();
    this.packProgram?.destroy();
    this.lostCallbacks.clear();
  }
}
