// What the WebGPU engine allocates and builds once, in `WebGpuEngine.create()`: its buffers (from
// webgpu-plan.ts's plan, every byte counted; θ's flat buffers in parts where the buffer limit splits them),
// the two readers (webgpu-readback.ts), the autotuned matmuls and the programs: the training step
// (webgpu-step.ts), Δ, and f16's weight copy.
// The engine (webgpu.ts) records and submits them. No node: imports.

import type { GPTConfig } from '../../../core/model/config.ts';
import { type FlatPart, partsOf } from '../../../shaders/kernel.ts';
import type * as op from '../../../shaders/ops.ts';
import { KernelSet, Program } from './webgpu-kernels.ts';
import { AUTOTUNE_BUDGET_MS, type Plan, type WebGpuEngineOptions, planBuffers, stepDispatches } from './webgpu-plan.ts';
import { LossRing, Readback } from './webgpu-readback.ts';
import { type StepWindows, thetaOps, trainingStep } from './webgpu-step.ts';
import { type TuneResult, autotuneMatmuls, modelMatmuls } from './webgpu-tune.ts';

/** What the engine resolved from its options and device, that building needs. */
export interface ResourceShape {
  config: GPTConfig;
  /** The adapter's name (the autotuner's cache key). */
  device: string;
  subgroups: boolean;
  numerics: 'f32' | 'f16';
  halfForm: op.HalfForm;
  autotune: WebGpuEngineOptions['autotune'];
  maxB: number;
  /** Sequences per micro-batch (≤ maxB): the activations' size. */
  micro: number;
  maxT: number;
  /** The LM head's chunk width in vocabulary ids (webgpu-plan.ts's headChunk). */
  headChunk: number;
  /** Loss ring slots. */
  R: number;
  /** Parameters. */
  N: number;
}

/** The engine's buffers, readers and programs; `destroy()` frees whatever was made. */
export class GpuResources {
  private readonly buf = new Map<string, GPUBuffer>();
  /** Bytes allocated on the device. */
  bytes = 0;
  losses!: LossRing;
  reads!: Readback;
  program!: Program;
  /** Micro-batches after a batch's first: [0, optStart) of the step, every parameter gradient adding (null: none). */
  accProgram: Program | null = null;
  deltaProgram!: Program;
  packProgram: Program | null = null; // f16: θ → the matmuls' weight copy, after setParams
  trunkEnd = 0; // dispatches [0, trunkEnd): forward to the final LayerNorm
  head: Array<op.VocabChunk & { logits: number }> = []; // the head's chunks, each with its logits dispatch
  lossEnd = 0; // [trunkEnd, lossEnd): the head, its cross-entropy and the mean loss
  optStart = 0; // [optStart, end): grad norm, clip, AdamW (after the gradients)
  /** What the autotuner chose (null: not tuned). */
  tuning: TuneResult | null = null;
  /** wte's vocabulary windows and θ's pieces for the binding limit (the plan's) */
  private windows: StepWindows | null = null;

  constructor(
    private readonly gpu: GPUDevice,
    private readonly s: ResourceShape,
  ) {}

  private alloc(label: string, size: number, usage: GPUBufferUsageFlags): GPUBuffer {
    const b = this.gpu.createBuffer({ label, size, usage });
    this.bytes += size;
    return b;
  }

  allocate(p: Plan): void {
    this.windows = p.windows;
    const S = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    for (const [name, b] of planBuffers(p, (n, size) => this.alloc(n, size, S))) this.buf.set(name, b);
    const o = p.other;
    this.buf.set(
      'readback',
      this.alloc('readback', o.get('readback')!, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST),
    );
    this.reads = new Readback(this.gpu, this.b('readback'));
    this.losses = new LossRing(this.gpu, this.b('ring'), this.s.R, o.get('lossStaging')!, (l, n, u) =>
      this.alloc(l, n, u),
    );
    this.buf.set(
      'stepUniform',
      this.alloc('stepUniform', o.get('stepUniform')!, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST),
    );
  }

  /** The buffer of that name (webgpu-plan.ts's names; a split flat buffer's stand-in, which only dispatches bind). */
  b(name: string): GPUBuffer {
    const x = this.buf.get(name);
    if (!x) throw new Error(`internal: no buffer ${name}`);
    return x;
  }

  /** A flat buffer of θ's length (FLAT_BUFFERS) as its GPUBuffers and their elements of θ, for reads and writes. */
  parts(name: string): readonly FlatPart[] {
    const x = this.b(name);
    return partsOf(x) ?? [{ lo: 0, hi: this.s.N, buffer: x }];
  }

  /** The training step's dispatches (webgpu-step.ts) built into programs, on tuned matmuls. */
  async build(): Promise<void> {
    const s = this.s;
    const kernels = KernelSet.for(this.gpu, { subgroups: s.subgroups });
    if (s.autotune) {
      this.tuning = await autotuneMatmuls(
        this.gpu,
        kernels,
        modelMatmuls(s.config.nEmbd, s.headChunk),
        s.micro * s.maxT,
        { adapter: s.device, cache: s.autotune.cache, budgetMs: s.autotune.budgetMs ?? AUTOTUNE_BUDGET_MS },
      );
    }
    const f16 = s.numerics === 'f16',
      form = s.halfForm;
    const stepOpts = {
      maxRows: s.micro * s.maxT,
      headChunk: s.headChunk,
      choices: this.tuning?.choices ?? new Map(),
      ...(f16 ? { f16: { form } } : {}),
      windows: this.windows!,
    };
    const step = trainingStep(s.config, (n) => this.b(n), stepOpts);
    const specs = step.specs;
    this.trunkEnd = step.trunkEnd;
    this.head = step.chunks.map((ch, j) => ({ ...ch, logits: step.headLogits[j] }));
    this.lossEnd = step.lossEnd;
    this.optStart = step.optStart;
    const L = s.config.nLayer,
      b = (n: string) => this.b(n);
    const w = this.windows!;
    const expected = stepDispatches(L, step.chunks.length, w.vocab.length, w.pieces.length);
    if (specs.length !== expected) throw new Error(`internal: ${specs.length} dispatches, expected ${expected}`);
    const probe = { B: s.micro, T: s.maxT };
    this.program = await Program.build(kernels, specs, probe, b('stepUniform'), 'step');
    if (s.micro < s.maxB) {
      const acc = trainingStep(s.config, (n) => this.b(n), { ...stepOpts, accumulate: true });
      const gradients = acc.specs.slice(0, acc.optStart);
      this.accProgram = await Program.build(kernels, gradients, probe, b('stepUniform'), 'step.accumulate');
      this.bytes += this.accProgram.uniform.size;
    }
    // Δ into the gradient buffer (the next step overwrites it), f16's weight copy: a dispatch per piece of θ
    const theta = thetaOps(s.config, b, { windows: this.windows!, ...(f16 ? { f16: { form } } : {}) });
    this.deltaProgram = await Program.build(kernels, theta.delta, probe, undefined, 'delta');
    this.bytes += this.program.uniform.size + this.deltaProgram.uniform.size;
    this.deltaProgram.setShape(probe);
    if (f16) {
      this.packProgram = await Program.build(kernels, theta.pack, probe, undefined, 'pack');
      this.bytes += this.packProgram.uniform.size;
      this.packProgram.setShape(probe);
    }
  }

  /** Frees the buffers and programs (the device belongs to the caller). */
  destroy(): void {
    for (const b of this.buf.values()) if (!partsOf(b)) b.destroy(); // a stand-in's parts are in buf
    this.losses?.destroy();
    this.program?.destroy();
    this.accProgram?.destroy();
    this.deltaProgram?.destroy();
    this.packProgram?.destroy();
  }
}
