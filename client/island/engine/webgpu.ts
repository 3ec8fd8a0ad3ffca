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
// - Batches of any B ≤ maxBatch and T ≤ maxT: the shape only changes uniforms. With `microBatch`, a
//   step runs its batch as micro-batches (still one submission) whose parameter gradients add.
// Works in Node (device from client/island/engine/dawn.ts) and in a browser or Web Worker; no node: imports.

import type { Batch, OptimizerState, StepOptions, TrainingEngine } from '../../../core/engine/index.ts';
import { type GPTConfig, mfu, paramLayout } from '../../../core/model/config.ts';
import type { Tokens } from '../../../core/model/ops.ts';
import {
  type DeviceLost,
  EVAL_SLOTS,
  type MemoryPlan,
  type WebGpuEngineOptions,
  engineError,
  estimateGpuBytes,
  limitShortfall,
  memoryPlan,
  microBatches,
  mib,
  plan,
  requiredLimits,
  resolve,
  validateOptions,
  withDeviceLimits,
} from './webgpu-plan.ts';
import * as op from '../../../shaders/ops.ts';
import { type KernelTime, type PendingProfile, recordProfiled } from './webgpu-profile.ts';
import type { TuneResult } from './webgpu-tune.ts';
import { GpuResources } from './webgpu-resources.ts';
import type { Program } from './webgpu-kernels.ts';
import { StepInputs } from './webgpu-inputs.ts';

export {
  AUTOTUNE_BUDGET_MS,
  type DeviceLost,
  ENGINE_FEATURES,
  type WebGpuEngineOptions,
  checkAdapterFits,
  engineFeatures,
  estimateGpuBytes,
  type MemoryPlan,
  memoryPlan,
  requiredLimits,
  withDeviceLimits,
} from './webgpu-plan.ts';

// ---------------------------------------------------------------------------- engine

/** One micro-batch of a step: its rows from r0, its shape, the program that records it. */
interface MicroBatch {
  r0: number;
  shape: { B: number; T: number; lossRows: number };
  program: Program;
}

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
  /** What it holds on the device by category, and the LM head's chunking (webgpu-plan.ts). */
  readonly memory: MemoryPlan;
  private readonly N: number;
  private readonly maxB: number;
  private readonly micro: number;
  private readonly maxT: number;
  private readonly R: number;
  /** Buffers, readers and programs (webgpu-resources.ts). */
  private readonly res: GpuResources;
  /** The step's tokens and uniform (webgpu-inputs.ts). */
  private readonly inputs: StepInputs;
  private t = 0; // AdamW steps (bias correction)
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
    if (opts.peakTflops) this.peakFlops = opts.peakTflops * 1e12;
    const r = resolve(opts);
    this.maxB = r.B;
    this.micro = r.micro;
    this.maxT = r.maxT;
    this.R = r.ring;
    this.N = paramLayout(this.config).total;
    this.memory = memoryPlan(opts);
    this.res = new GpuResources(device, {
      config: this.config,
      device: this.device,
      subgroups: this.subgroups,
      numerics: this.numerics,
      halfForm: this.halfForm,
      autotune: opts.autotune,
      maxB: this.maxB,
      micro: this.micro,
      maxT: this.maxT,
      headChunk: this.memory.headChunk,
      R: this.R,
      N: this.N,
    });
    this.inputs = new StepInputs(device, (n) => this.res.b(n), this.config.vocabSize, this.maxB, this.maxT, opts);
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
  static async create(device: GPUDevice, opts_: WebGpuEngineOptions): Promise<WebGpuEngine> {
    try {
      validateOptions(opts_);
    } catch (e) {
      throw engineError('E_BAD_CONFIG', (e as Error).message);
    }
    // the binding and buffer limits: the device's, or smaller ones forced by the options (tests)
    const opts = withDeviceLimits(opts_, device.limits);
    const fits = limitShortfall(requiredLimits(opts), device.limits, opts, 'device');
    if (!fits.ok)
      throw Object.assign(new Error(`${fits.error.code}: ${fits.error.message}`), { code: fits.error.code });
    const e = new WebGpuEngine(device, opts);
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    let thrown: unknown = null;
    try {
      e.res.allocate(plan(opts));
      await e.res.build();
      e.tuning = e.res.tuning;
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
    return this.res.bytes;
  }

  /** Calls `cb` once if the device is lost; returns an unsubscribe function. */
  onLost(cb: (l: DeviceLost) => void): () => void {
    this.lostCallbacks.add(cb);
    return () => this.lostCallbacks.delete(cb);
  }

  private b(name: string): GPUBuffer {
    return this.res.b(name);
  }

  // ---------------------------------------------------------------- checks

  private usable(): void {
    if (this.destroyed) throw engineError('E_DESTROYED', 'the engine was destroyed');
    if (this.isLost) throw engineError('E_DEVICE_LOST', 'the GPU device was lost: create a new engine and setParams');
  }

  // ---------------------------------------------------------------- training

  /** Enqueues one AdamW step: one submission, no readback. */
  async step(batch: Batch, opts: StepOptions): Promise<void> {
    this.enqueue(batch, opts, (enc, parts) => {
      this.recordGradients(enc, parts);
      const pass = enc.beginComputePass();
      this.res.program.encode(pass, parts[0].shape, this.res.optStart);
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
    if (batch.B > this.micro)
      throw engineError('E_BAD_BATCH', `profileStep takes one micro-batch: at most ${this.micro} sequences`);
    let pending: PendingProfile | null = null;
    this.enqueue(batch, opts, (enc, parts) => {
      this.inputs.copyRows(enc, 0, batch.B, batch.T);
      pending = recordProfiled(this.gpu, enc, this.res.program, parts[0].shape);
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
    this.enqueue(batch, opts, (enc, parts) => this.recordGradients(enc, parts));
  }

  /** The gradients of the last `gradientsStep`, added into `into` × `weight` as they are read back. */
  async addGradientsInto(into: Float32Array, weight: number): Promise<void> {
    this.usable();
    await this.res.reads.exclusive(async () => {
      for (const { lo, hi, buffer } of this.res.parts('grads'))
        await this.res.reads.out(buffer, 4 * (hi - lo), (chunk, at) => {
          const g = new Float32Array(chunk),
            o = lo + at / 4;
          for (let i = 0; i < g.length; i++) into[o + i] += weight * g[i];
        });
    });
  }

  /** The second half: the all-reduced gradients in, then grad norm, clip and AdamW (one submission). */
  applyGradients(grads: Float32Array): void {
    this.usable();
    if (grads.length !== this.N)
      throw engineError('E_WRONG_SIZE', `gradients have ${grads.length} elements, the model needs ${this.N}`);
    this.write('grads', grads);
    const enc = this.gpu.createCommandEncoder({ label: 'applyGradients' });
    const pass = enc.beginComputePass();
    this.res.program.encode(pass, { B: this.maxB, T: this.maxT }, this.res.optStart);
    pass.end();
    this.gpu.queue.submit([enc.finish()]);
  }

  /**
   * The batch's micro-batches (microBatches: a ragged one first), each with its first row, its shape (lossRows: the
   * whole batch's, whose mean loss it adds to) and its program: the step's for the first, the accumulating one after.
   */
  private parts(B: number, T: number): MicroBatch[] {
    let r0 = 0;
    return microBatches(B, this.micro).map((n, i) => {
      const part = { r0, shape: { B: n, T, lossRows: B * T }, program: i ? this.res.accProgram! : this.res.program };
      r0 += n;
      return part;
    });
  }

  /** Forward, loss and backward of each micro-batch, its tokens copied in first: the gradients of the batch. */
  private recordGradients(enc: GPUCommandEncoder, parts: MicroBatch[]): void {
    for (const p of parts) {
      this.inputs.copyRows(enc, p.r0, p.shape.B, p.shape.T);
      const pass = enc.beginComputePass();
      p.program.encode(pass, p.shape, 0, this.res.optStart);
      pass.end();
    }
  }

  /** Loads the batch and step uniform, records the step with `record`, submits (the loss ring as in `step`). */
  private enqueue(
    batch: Batch,
    opts: StepOptions,
    record: (enc: GPUCommandEncoder, parts: MicroBatch[]) => void,
  ): void {
    this.usable();
    const { B, T } = batch;
    this.inputs.tokens(batch.inputs, batch.targets, B, T);
    this.t += 1;
    this.inputs.step(this.t, opts.lr, opts.gradClip, this.res.losses.slot, opts.weightDecay);
    const parts = this.parts(B, T);
    for (const p of parts) p.program.setShape(p.shape);
    const enc = this.gpu.createCommandEncoder({ label: 'step' });
    record(enc, parts);
    this.res.losses.recorded(enc);
    this.gpu.queue.submit([enc.finish()]);
  }

  /** Losses of the steps since the last call, in order (copied and mapped asynchronously). */
  async takeLosses(): Promise<number[]> {
    this.usable();
    return this.res.losses.take();
  }

  // ---------------------------------------------------------------- evaluation

  async evalLoss(batch: Batch): Promise<number> {
    this.usable();
    const { B, T } = batch;
    if (T > this.maxT || T < 1 || B < 1)
      throw engineError('E_BAD_BATCH', `eval batch (${B},${T}) needs 1 ≤ T ≤ ${this.maxT}`);
    return this.res.reads.exclusive(async () => {
      let sum = 0;
      const sizes: number[] = [];
      const flush = async () => {
        const enc = this.gpu.createCommandEncoder({ label: 'evalLoss.read' });
        enc.copyBufferToBuffer(this.b('ring'), this.R * 4, this.b('readback'), 0, sizes.length * 4);
        this.gpu.queue.submit([enc.finish()]);
        const vals = await this.res.reads.mapped(sizes.length);
        sizes.forEach((nb, j) => {
          sum += vals[j] * nb;
        });
        sizes.length = 0;
      };
      for (let b0 = 0; b0 < B; b0 += this.micro) {
        const nb = Math.min(this.micro, B - b0);
        const sl = (x: Tokens) => x.subarray(b0 * T, (b0 + nb) * T);
        this.inputs.tokens(sl(batch.inputs), sl(batch.targets), nb, T);
        this.inputs.step(this.t, 0, 0, this.R + sizes.length);
        const shape = { B: nb, T };
        this.res.program.setShape(shape);
        const enc = this.gpu.createCommandEncoder({ label: 'evalLoss' });
        this.inputs.copyRows(enc, 0, nb, T);
        const pass = enc.beginComputePass();
        this.res.program.encode(pass, shape, 0, this.res.lossEnd);
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
    return this.res.reads.exclusive(async () => {
      this.inputs.tokens(ctx, null, 1, T);
      const shape = { B: 1, T };
      this.res.program.setShape(shape);
      // the trunk, then the head a chunk at a time: each chunk's last row into its place in the readback
      const enc = this.gpu.createCommandEncoder({ label: 'nextTokenLogits' });
      this.inputs.copyRows(enc, 0, 1, T);
      let pass = enc.beginComputePass();
      this.res.program.encode(pass, shape, 0, this.res.trunkEnd);
      for (const ch of this.res.head) {
        this.res.program.encode(pass, shape, ch.logits, ch.logits + 1);
        pass.end();
        enc.copyBufferToBuffer(
          this.b('logitsChunk'),
          (T - 1) * ch.width * 4,
          this.b('readback'),
          ch.v0 * 4,
          ch.width * 4,
        );
        pass = enc.beginComputePass();
      }
      pass.end();
      this.gpu.queue.submit([enc.finish()]);
      return this.res.reads.mapped(this.config.vocabSize);
    });
  }

  // ---------------------------------------------------------------- parameters and state

  async setParams(params: Float32Array): Promise<void> {
    this.usable();
    if (params.length !== this.N)
      throw engineError('E_WRONG_SIZE', `parameter array has ${params.length} elements, the model needs ${this.N}`);
    const q = this.gpu.queue;
    this.write('params', params);
    this.write('start', params);
    if (this.res.packProgram) {
      // f16: the matmuls' weight copy, rounded once from θ (AdamW keeps it after each step)
      const enc = this.gpu.createCommandEncoder({ label: 'setParams.pack' });
      const pass = enc.beginComputePass();
      this.res.packProgram.encode(pass, { B: this.maxB, T: this.maxT });
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
    const delta = (enc: GPUCommandEncoder) => {
      const pass = enc.beginComputePass();
      this.res.deltaProgram.encode(pass, { B: this.maxB, T: this.maxT });
      pass.end();
    };
    const reads = this.res.reads;
    return reads.exclusive(() => reads.floats(this.res.parts('grads'), this.numerics === 'f16', delta));
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
    this.write('m', s.m);
    this.write('v', s.v);
    this.t = s.step;
  }

  async resetOptimizerState(): Promise<void> {
    this.usable();
    const enc = this.gpu.createCommandEncoder({ label: 'resetOptimizerState' });
    for (const p of [...this.res.parts('m'), ...this.res.parts('v')]) enc.clearBuffer(p.buffer);
    this.gpu.queue.submit([enc.finish()]);
    this.t = 0;
  }

  /** Test/debug only: the gradients of the last step (before clipping), flat like the params. */
  async debugReadGrads(): Promise<Float32Array> {
    return this.readBuffer('grads');
  }

  // ---------------------------------------------------------------- whole flat buffers, a GPUBuffer at a time

  /** A flat buffer of θ's length (webgpu-plan.ts FLAT_BUFFERS) read back. */
  private readBuffer(name: string): Promise<Float32Array> {
    this.usable();
    const reads = this.res.reads;
    return reads.exclusive(() => reads.floats(this.res.parts(name)));
  }

  /** N values written into a flat buffer of θ's length (queued). */
  private write(name: string, values: Float32Array): void {
    for (const p of this.res.parts(name)) this.gpu.queue.writeBuffer(p.buffer, 0, values, p.lo, p.hi - p.lo);
  }

  /** Frees the engine's buffers (the device belongs to the caller). */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.res.destroy();
    this.lostCallbacks.clear();
  }
}
