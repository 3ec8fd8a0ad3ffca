// The WGSL kernels on a device, as the engine (and the kernel tests) use them: pipeline
// creation, and "programs" — fixed lists of dispatches (shaders/<op>.ts) whose pipelines,
// bind groups and uniform slots are built once; only the uniform values change when the
// batch shape (B,T) changes.
// No node: imports: this runs in the browser, in a Web Worker and in Node.

import {
  type DispatchSpec,
  type Defines,
  type Kernel,
  type Shape,
  bindWindows,
  resolveParts,
  windowedParams,
  writeParams,
} from '../../../shaders/kernel.ts';

// ---------------------------------------------------------------- uniforms

// Per-step uniform (binding 8), the `Step` struct of the shaders: 12 × 4 bytes.
export const STEP_UNIFORM_BYTES = 48;
export interface StepUniform {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  bc1: number;
  bc2: number;
  maxNorm: number;
  lossSlot: number;
  step: number;
}

export function encodeStepUniform(s: StepUniform, out = new ArrayBuffer(STEP_UNIFORM_BYTES)): ArrayBuffer {
  const f = new Float32Array(out);
  const u = new Uint32Array(out);
  f[0] = s.lr;
  f[1] = s.beta1;
  f[2] = s.beta2;
  f[3] = s.eps;
  f[4] = s.weightDecay;
  f[5] = s.bc1;
  f[6] = s.bc2;
  f[7] = s.maxNorm;
  u[8] = s.lossSlot;
  u[9] = s.step;
  u[10] = 0;
  u[11] = 0;
  return out;
}

// ---------------------------------------------------------------- pipelines

/**
 * Under Node (Dawn), a pending Dawn promise busy-polls the JS thread, which made
 * createComputePipelineAsync 1.6–2.5× slower than the blocking call on 2 cores; a
 * browser keeps the async call so the page (or worker) never blocks on compiles.
 */
const IS_NODE =
  typeof (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node === 'string';

/** Compiles the shader modules once and every pipeline once (cached by entry). */
export class KernelSet {
  private readonly modules = new Map<string, GPUShaderModule>();
  private readonly pipelines = new Map<string, Promise<GPUComputePipeline>>();

  readonly subgroups: boolean;
  readonly syncCompile: boolean;

  private static readonly shared = new WeakMap<GPUDevice, Map<boolean, KernelSet>>();

  /** The device's kernel set (engines on one device share compiled pipelines). */
  static for(device: GPUDevice, opts: { subgroups?: boolean } = {}): KernelSet {
    let byMode = KernelSet.shared.get(device);
    if (!byMode) KernelSet.shared.set(device, (byMode = new Map()));
    const sg = opts.subgroups ?? false;
    let ks = byMode.get(sg);
    if (!ks) byMode.set(sg, (ks = new KernelSet(device, { subgroups: sg })));
    return ks;
  }

  /** `subgroups`: reductions with subgroup operations (the device must have the feature). */
  constructor(
    readonly device: GPUDevice,
    opts: { subgroups?: boolean; syncCompile?: boolean } = {},
  ) {
    this.subgroups = opts.subgroups ?? false;
    this.syncCompile = opts.syncCompile ?? IS_NODE;
  }

  private module(kernel: Kernel, defines: Defines | undefined): GPUShaderModule {
    const key = `${kernel.file}${JSON.stringify(defines ?? {})}`;
    let m = this.modules.get(key);
    if (!m) {
      m = this.device.createShaderModule({ code: kernel.source(defines, this.subgroups), label: kernel.file });
      this.modules.set(key, m);
    }
    return m;
  }

  pipeline(kernel: Kernel, entry: string, defines?: Defines): Promise<GPUComputePipeline> {
    const key = `${entry}${JSON.stringify(defines ?? {})}`;
    let p = this.pipelines.get(key);
    if (!p) {
      const desc: GPUComputePipelineDescriptor = {
        label: entry,
        layout: 'auto',
        compute: { module: this.module(kernel, defines), entryPoint: entry },
      };
      p = this.syncCompile ? this.compileSync(desc) : this.device.createComputePipelineAsync(desc);
      this.pipelines.set(key, p);
    }
    return p;
  }

  private async compileSync(desc: GPUComputePipelineDescriptor): Promise<GPUComputePipeline> {
    this.device.pushErrorScope('validation');
    const pipeline = this.device.createComputePipeline(desc);
    const err = await this.device.popErrorScope();
    if (err) throw new Error(`pipeline ${desc.label}: ${err.message}`);
    return pipeline;
  }

  /** Compiles the specs' pipelines (one after another under Node, concurrently in a browser). */
  async prepare(specs: DispatchSpec[]): Promise<void> {
    if (this.syncCompile) for (const s of specs) await this.pipeline(s.kernel, s.entry, s.defines);
    else await Promise.all(specs.map((s) => this.pipeline(s.kernel, s.entry, s.defines)));
  }
}

// ---------------------------------------------------------------- programs

interface Built {
  spec: DispatchSpec;
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  slot: number; // byte offset of the dispatch's uniform slot
  bytes: number; // its Params struct's size
  step: boolean; // binds the step uniform
}

const SLOT_ALIGN = 256; // minUniformBufferOffsetAlignment's guaranteed maximum

/**
 * A fixed list of dispatches: one uniform buffer with a slot per dispatch, a bind
 * group per dispatch, all created once. `encode` records them into a compute pass;
 * the uniforms are rewritten (one writeBuffer) only when the shape changes.
 */
export class Program {
  readonly uniform: GPUBuffer;
  private readonly built: Built[];
  private shape: Shape | null = null;
  private readonly staging: ArrayBuffer;

  private constructor(
    readonly device: GPUDevice,
    built: Built[],
    uniform: GPUBuffer,
  ) {
    this.built = built;
    this.uniform = uniform;
    this.staging = new ArrayBuffer(uniform.size);
  }

  /**
   * `stepUniform` is bound at binding 8 for the entries that read it; a split buffer's windows in the parts that hold
   * them (resolveParts).
   */
  static async build(
    kernels: KernelSet,
    given: DispatchSpec[],
    probe: Shape,
    stepUniform?: GPUBuffer,
    label = 'program',
  ): Promise<Program> {
    const device = kernels.device;
    const specs = given.map(resolveParts);
    await kernels.prepare(specs);
    let offset = 0;
    const layout = specs.map((spec) => {
      const bytes = spec.kernel.params.bytes;
      writeParams(
        spec.kernel.params,
        windowedParams(spec, probe),
        new DataView(new ArrayBuffer(bytes)),
        0,
        `${spec.kernel.file} ${spec.entry}`,
      );
      const slot = offset;
      offset += Math.ceil(bytes / SLOT_ALIGN) * SLOT_ALIGN;
      return { slot, bytes };
    });
    const uniform = device.createBuffer({
      label: `${label}.uniforms`,
      size: Math.max(offset, SLOT_ALIGN),
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
    const built: Built[] = [];
    for (let i = 0; i < specs.length; i++) {
      const spec = specs[i];
      const storage = bindWindows(spec);
      const step = spec.kernel.entries.get(spec.entry)!.step;
      const pipeline = await kernels.pipeline(spec.kernel, spec.entry, spec.defines);
      const { slot, bytes } = layout[i];
      const entries: GPUBindGroupEntry[] = [
        { binding: 0, resource: { buffer: uniform, offset: slot, size: Math.ceil(bytes / 16) * 16 } },
      ];
      for (const [binding, resource] of storage) entries.push({ binding, resource });
      if (step) {
        if (!stepUniform) throw new Error(`${spec.entry} needs the step uniform`);
        entries.push({ binding: 8, resource: { buffer: stepUniform, offset: 0, size: STEP_UNIFORM_BYTES } });
      }
      const bindGroup = device.createBindGroup({ label: spec.entry, layout: pipeline.getBindGroupLayout(0), entries });
      built.push({ spec, pipeline, bindGroup, slot, bytes, step });
    }
    return new Program(device, built, uniform);
  }

  get length(): number {
    return this.built.length;
  }

  /** Writes every dispatch's uniforms for `shape` (queued, ordered before later submits). */
  setShape(shape: Shape): void {
    const same = this.shape && this.shape.B === shape.B && this.shape.T === shape.T;
    if (same && this.shape!.lossRows === shape.lossRows) return;
    const dv = new DataView(this.staging);
    for (const b of this.built)
      writeParams(b.spec.kernel.params, windowedParams(b.spec, shape), dv, b.slot, b.spec.entry);
    this.device.queue.writeBuffer(this.uniform, 0, this.staging);
    this.shape = { ...shape };
  }

  /** Records dispatches [from, to) for `shape` (call setShape first). */
  encode(pass: GPUComputePassEncoder, shape: Shape, from = 0, to = this.built.length): void {
    for (let i = from; i < to; i++) {
      const b = this.built[i];
      const [x, y, z] = b.spec.grid(shape);
      if (x === 0 || y === 0 || z === 0) continue;
      pass.setPipeline(b.pipeline);
      pass.setBindGroup(0, b.bindGroup);
      pass.dispatchWorkgroups(x, y, z);
    }
  }

  /**
   * Records each dispatch in its own pass (descriptor from `pass(i)`); returns each pass's entry, null where the shape
   * skips it.
   */
  encodeEach(
    enc: GPUCommandEncoder,
    shape: Shape,
    pass: (i: number) => GPUComputePassDescriptor,
  ): Array<string | null> {
    const entries: Array<string | null> = [];
    for (let i = 0; i < this.built.length; i++) {
      const [x, y, z] = this.built[i].spec.grid(shape);
      const p = enc.beginComputePass(pass(i));
      if (x > 0 && y > 0 && z > 0) this.encode(p, shape, i, i + 1);
      p.end();
      entries.push(x > 0 && y > 0 && z > 0 ? this.built[i].spec.entry : null);
    }
    return entries;
  }

  destroy(): void {
    this.uniform.destroy();
  }
}

// ---------------------------------------------------------------- readback (tests and benchmarks; the engine has its
// own)

/** Reads `n` f32 values of a buffer back through a fresh staging buffer. */
export async function readF32(device: GPUDevice, buf: GPUBuffer, n: number, offsetElems = 0): Promise<Float32Array> {
  const size = Math.max(16, Math.ceil((n * 4) / 16) * 16);
  const staging = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(buf, offsetElems * 4, staging, 0, Math.min(size, buf.size - offsetElems * 4));
  device.queue.submit([enc.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const out = new Float32Array(staging.getMappedRange().slice(0, n * 4));
  staging.unmap();
  staging.destroy();
  return out;
}
