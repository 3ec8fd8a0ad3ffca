// The WGSL kernels as the engine (and the kernel tests) use them: shader sources,
// each entry point's bindings, pipeline creation, and "programs" — fixed lists of
// dispatches whose pipelines, bind groups and uniform slots are built once; only
// the uniform values change when the batch shape (B,T) changes.
// No node: imports: this runs in the browser, in a Web Worker and in Node.

import adamwSrc from '../../shaders/adamw.wgsl?raw';
import attentionSrc from '../../shaders/attention.wgsl?raw';
import crossentropySrc from '../../shaders/crossentropy.wgsl?raw';
import encoderSrc from '../../shaders/encoder.wgsl?raw';
import geluSrc from '../../shaders/gelu.wgsl?raw';
import gradnormSrc from '../../shaders/gradnorm.wgsl?raw';
import layernormSrc from '../../shaders/layernorm.wgsl?raw';
import matmulSrc from '../../shaders/matmul.wgsl?raw';
import preludeSrc from '../../shaders/prelude.wgsl?raw';
import subgroupsSrc from '../../shaders/subgroups.wgsl?raw';
import residualSrc from '../../shaders/residual.wgsl?raw';

/**
 * Expands each `// @repeat NAME = "x", "y"` … `// @end` block once per value, with
 * {{NAME}} replaced by it (gpu.cpp's one-template-many-variants, in a few lines).
 */
export function expandTemplate(src: string): string {
  return src.replace(/^\/\/ @repeat (\w+) = (.*)\n([\s\S]*?)^\/\/ @end\n/gm, (_, name: string, values: string, body: string) =>
    [...values.matchAll(/"([^"]*)"/g)].map(([, v]) => body.replaceAll(`{{${name}}}`, v)).join('\n'));
}

/**
 * A shader as the device sees it: the shared prelude, then the file with its templates
 * expanded and each {{NAME}} of `defines` written in (e.g. attention's head size, the direct
 * matmul's tile). With
 * `subgroups` the prelude's reductions use subgroup operations.
 */
export function withPrelude(src: string, defines: Defines = {}, subgroups = false): string {
  // {{NAME}}, or {{NAME=default}} where the shader has one
  const fill = (text: string, d: Defines) => text.replace(/\{\{(\w+)(?:=(\w+))?\}\}/g, (m, k: string, dflt?: string) => (k in d ? String(d[k]) : dflt ?? m));
  const prelude = fill(preludeSrc, { SUBGROUPS: String(subgroups) });
  const sg = subgroups ? subgroupsSrc : 'fn sg_reduce2(x: vec2<f32>, lid: u32, n: u32, is_max: bool) -> vec2<f32> { return x; }\n';
  return `${subgroups ? 'enable subgroups;\n' : ''}${prelude}\n${sg}\n${fill(expandTemplate(src), defines)}`;
}

/** Values written into a shader's {{NAME}} placeholders. */
export type Defines = Record<string, number | string>;

const RAW_SOURCES = {
  adamw: adamwSrc,
  attention: attentionSrc,
  crossentropy: crossentropySrc,
  encoder: encoderSrc,
  gelu: geluSrc,
  gradnorm: gradnormSrc,
  layernorm: layernormSrc,
  matmul: matmulSrc,
  residual: residualSrc,
} as const;

export type ShaderFile = keyof typeof RAW_SOURCES;

/** A shader file's source with these defines. */
export const shaderSource = (file: ShaderFile, defines?: Defines, subgroups = false): string => withPrelude(RAW_SOURCES[file], defines, subgroups);

interface EntryInfo {
  file: ShaderFile;
  /** Storage bindings in argument order (binding 0 is always the entry's Params uniform). */
  storage: number[];
  /** Also binds the per-step uniform (lr, Adam constants, clip, loss slot) at binding 8. */
  step?: boolean;
}

/** Binding numbers per entry point, in the order the shaders document them. */
export const ENTRIES = {
  encoder_forward: { file: 'encoder', storage: [1, 2, 3] },             // out, inp, params
  encoder_backward_wte: { file: 'encoder', storage: [1, 2, 3] },        // grads, inp, dout
  encoder_backward_wpe: { file: 'encoder', storage: [1, 3] },           // grads, dout
  layernorm_forward: { file: 'layernorm', storage: [1, 2, 3, 4, 5] },   // out, mean, rstd, inp, params
  residual_layernorm_forward: { file: 'layernorm', storage: [1, 2, 3, 4, 5, 6, 7] }, // out, mean, rstd, res, params, inp1, inp2
  layernorm_backward_dinp: { file: 'layernorm', storage: [1, 2, 4, 5, 6, 7] }, // dinp, dout, inp, params, mean, rstd
  layernorm_backward_dweight: { file: 'layernorm', storage: [1, 2, 4, 6, 7] }, // grads, dout, inp, mean, rstd
  matmul_forward: { file: 'matmul', storage: [1, 2, 3] },               // out, inp, params (W and bias)
  matmul_forward_vec4: { file: 'matmul', storage: [1, 2, 3] },
  matmul_backward_dinp: { file: 'matmul', storage: [1, 2, 3] },         // dinp, dout, params (W)
  matmul_backward_dinp_vec4: { file: 'matmul', storage: [1, 2, 3] },
  matmul_backward_dweight: { file: 'matmul', storage: [1, 2, 3] },      // grads, dout, inp
  matmul_backward_dweight_vec4: { file: 'matmul', storage: [1, 2, 3] },
  matmul_forward_direct: { file: 'matmul', storage: [1, 2, 3] },
  matmul_forward_direct_vec4: { file: 'matmul', storage: [1, 2, 3] },
  matmul_backward_dinp_direct: { file: 'matmul', storage: [1, 2, 3] },
  matmul_backward_dinp_direct_vec4: { file: 'matmul', storage: [1, 2, 3] },
  matmul_backward_dweight_direct: { file: 'matmul', storage: [1, 2, 3] },
  matmul_backward_dweight_direct_vec4: { file: 'matmul', storage: [1, 2, 3] },
  matmul_backward_dweight_reduce: { file: 'matmul', storage: [1, 2] },  // grads, partials
  matmul_backward_dbias: { file: 'matmul', storage: [1, 2] },           // grads, dout
  attention_forward: { file: 'attention', storage: [1, 2, 3] },         // out, lse, inp
  attention_backward_dq: { file: 'attention', storage: [1, 2, 3, 4, 5, 6] }, // dinp, dsum, inp, lse, dout, out
  attention_backward_dkv: { file: 'attention', storage: [1, 2, 3, 4, 5] },   // dinp, dsum, inp, lse, dout
  gelu_forward: { file: 'gelu', storage: [1, 2] },                      // out, inp
  gelu_backward: { file: 'gelu', storage: [1, 2, 3] },                  // dinp, inp, dout
  residual_forward: { file: 'residual', storage: [1, 2, 3] },           // out, inp1, inp2
  softmax_crossentropy_forward: { file: 'crossentropy', storage: [1, 2, 3, 4] }, // losses, probs, logits, targets
  softmax_crossentropy_backward: { file: 'crossentropy', storage: [1, 2, 4] },   // dlogits, probs, targets
  mean_loss: { file: 'crossentropy', storage: [1, 2], step: true },     // ring, losses
  grad_norm_partial: { file: 'gradnorm', storage: [1, 2] },             // partials, grads
  grad_norm_finalize: { file: 'gradnorm', storage: [1, 2], step: true }, // clip, partials
  adamw_update: { file: 'adamw', storage: [1, 2, 3, 4, 5], step: true }, // params, grads, m, v, clip
} satisfies Record<string, EntryInfo>;

export type EntryName = keyof typeof ENTRIES;

/** Most storage buffers any entry point binds (browsers guarantee 8). */
export const MAX_STORAGE_BINDINGS = Math.max(...Object.values(ENTRIES).map((e: EntryInfo) => e.storage.length));

// ---------------------------------------------------------------- uniforms

/** A uniform field: a number is written as u32, `f32(x)` as f32. */
export type UValue = number | { f32: number };
export const f32 = (x: number): UValue => ({ f32: x });

export interface Shape {
  B: number;
  T: number;
}

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
  f[0] = s.lr; f[1] = s.beta1; f[2] = s.beta2; f[3] = s.eps;
  f[4] = s.weightDecay; f[5] = s.bc1; f[6] = s.bc2; f[7] = s.maxNorm;
  u[8] = s.lossSlot; u[9] = s.step; u[10] = 0; u[11] = 0;
  return out;
}

// ---------------------------------------------------------------- grids

export const MAX_GROUPS_PER_DIM = 65535;

/** Workgroups for `n` items at `perGroup` each, split into 2-D past 65535 (kernels use wid.y·nwg.x + wid.x). */
export function grid1(n: number, perGroup: number): [number, number, number] {
  const groups = Math.max(1, Math.ceil(n / perGroup));
  if (groups <= MAX_GROUPS_PER_DIM) return [groups, 1, 1];
  const y = Math.ceil(groups / MAX_GROUPS_PER_DIM);
  return [Math.ceil(groups / y), y, 1];
}

// ---------------------------------------------------------------- pipelines

/**
 * Under Node (Dawn), a pending Dawn promise busy-polls the JS thread, which made
 * createComputePipelineAsync 1.6–2.5× slower than the blocking call on 2 cores; a
 * browser keeps the async call so the page (or worker) never blocks on compiles.
 */
const IS_NODE = typeof (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node === 'string';

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
  constructor(readonly device: GPUDevice, opts: { subgroups?: boolean; syncCompile?: boolean } = {}) {
    this.subgroups = opts.subgroups ?? false;
    this.syncCompile = opts.syncCompile ?? IS_NODE;
  }

  private module(file: ShaderFile, defines: Defines | undefined): GPUShaderModule {
    const key = `${file}${JSON.stringify(defines ?? {})}`;
    let m = this.modules.get(key);
    if (!m) {
      m = this.device.createShaderModule({ code: shaderSource(file, defines, this.subgroups), label: `${file}.wgsl` });
      this.modules.set(key, m);
    }
    return m;
  }

  pipeline(entry: EntryName, defines?: Defines): Promise<GPUComputePipeline> {
    const key = `${entry}${JSON.stringify(defines ?? {})}`;
    let p = this.pipelines.get(key);
    if (!p) {
      const info: EntryInfo = ENTRIES[entry];
      const desc: GPUComputePipelineDescriptor = {
        label: entry,
        layout: 'auto',
        compute: { module: this.module(info.file, defines), entryPoint: entry },
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
    if (this.syncCompile) for (const s of specs) await this.pipeline(s.entry, s.defines);
    else await Promise.all(specs.map((s) => this.pipeline(s.entry, s.defines)));
  }
}

// ---------------------------------------------------------------- programs

export interface DispatchSpec {
  entry: EntryName;
  /** Written into the shader's {{NAME}} placeholders (one module and pipeline per distinct set). */
  defines?: Defines;
  /** Storage buffers in the entry's argument order (whole buffers; offsets go in the uniform). */
  buffers: GPUBuffer[];
  params: (s: Shape) => UValue[];
  grid: (s: Shape) => [number, number, number];
}

interface Built {
  spec: DispatchSpec;
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  slot: number;  // byte offset of the dispatch's uniform slot
  words: number; // u32 words of its params
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

  private constructor(readonly device: GPUDevice, built: Built[], uniform: GPUBuffer) {
    this.built = built;
    this.uniform = uniform;
    this.staging = new ArrayBuffer(uniform.size);
  }

  /** `stepUniform` is bound at binding 8 for the entries that read it. */
  static async build(kernels: KernelSet, specs: DispatchSpec[], probe: Shape, stepUniform?: GPUBuffer, label = 'program'): Promise<Program> {
    const device = kernels.device;
    await kernels.prepare(specs);
    let offset = 0;
    const layout = specs.map((spec) => {
      const words = spec.params(probe).length;
      const slot = offset;
      offset += Math.ceil((words * 4) / SLOT_ALIGN) * SLOT_ALIGN;
      return { slot, words };
    });
    const uniform = device.createBuffer({ label: `${label}.uniforms`, size: Math.max(offset, SLOT_ALIGN), usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    const built: Built[] = [];
    for (let i = 0; i < specs.length; i++) {
      const spec = specs[i];
      const info: EntryInfo = ENTRIES[spec.entry];
      if (spec.buffers.length !== info.storage.length) {
        throw new Error(`${spec.entry}: ${spec.buffers.length} buffers given, the entry binds ${info.storage.length}`);
      }
      const pipeline = await kernels.pipeline(spec.entry, spec.defines);
      const { slot, words } = layout[i];
      const entries: GPUBindGroupEntry[] = [{ binding: 0, resource: { buffer: uniform, offset: slot, size: Math.ceil((words * 4) / 16) * 16 } }];
      info.storage.forEach((binding, j) => entries.push({ binding, resource: { buffer: spec.buffers[j] } }));
      if (info.step) {
        if (!stepUniform) throw new Error(`${spec.entry} needs the step uniform`);
        entries.push({ binding: 8, resource: { buffer: stepUniform, offset: 0, size: STEP_UNIFORM_BYTES } });
      }
      const bindGroup = device.createBindGroup({ label: spec.entry, layout: pipeline.getBindGroupLayout(0), entries });
      built.push({ spec, pipeline, bindGroup, slot, words });
    }
    return new Program(device, built, uniform);
  }

  get length(): number {
    return this.built.length;
  }

  /** Writes every dispatch's uniforms for `shape` (queued, ordered before later submits). */
  setShape(shape: Shape): void {
    if (this.shape && this.shape.B === shape.B && this.shape.T === shape.T) return;
    const dv = new DataView(this.staging);
    for (const b of this.built) {
      const vals = b.spec.params(shape);
      vals.forEach((v, j) => {
        if (typeof v === 'number') dv.setUint32(b.slot + 4 * j, v, true);
        else dv.setFloat32(b.slot + 4 * j, v.f32, true);
      });
    }
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

  /** Records each dispatch in its own pass (descriptor from `pass(i)`); returns each pass's entry, null where the shape skips it. */
  encodeEach(enc: GPUCommandEncoder, shape: Shape, pass: (i: number) => GPUComputePassDescriptor): Array<string | null> {
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

// ---------------------------------------------------------------- readback (tests and benchmarks; the engine has its own)

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
