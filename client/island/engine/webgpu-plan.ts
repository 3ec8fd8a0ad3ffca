// The WebGPU engine's sizing (its options: webgpu-options.ts): every buffer it allocates for (maxBatch, maxT),
// θ's flat buffers in as many GPUBuffers as the buffer limit needs, the device limits and features it asks for,
// and the checks before it allocates.
// No node: imports (browser, Web Worker and Node).

import { paramLayout } from '../../../core/model/config.ts';
import { type Result, err, ok } from '../../../core/result.ts';
import { type DispatchSpec, resolveParts, splitBuffer, windowRange } from '../../../shaders/kernel.ts';
import { MAX_STORAGE_BINDINGS } from '../../../shaders/ops.ts';
import * as op from '../../../shaders/ops.ts';
import { type StepWindows, stepWindows, thetaOps, trainingStep } from './webgpu-step.ts';
import { type WebGpuEngineOptions, headChunk, validateOptions } from './webgpu-options.ts';

export {
  HEAD_CHUNK,
  type WebGpuEngineOptions,
  engineError,
  headChunk,
  validateOptions,
} from './webgpu-options.ts';

/** The autotuner's time budget at engine start. */
export const AUTOTUNE_BUDGET_MS = 2000;

/** Features the engine uses where the adapter has them: request them with the device. */
export const ENGINE_FEATURES: GPUFeatureName[] = ['subgroups', 'timestamp-query', 'shader-f16'];

/** The subset of ENGINE_FEATURES this adapter offers, for `requestDevice({ requiredFeatures })`. */
export const engineFeatures = (adapter: GPUAdapter): GPUFeatureName[] =>
  ENGINE_FEATURES.filter((f) => adapter.features.has(f));

export interface DeviceLost {
  reason: string;
  message: string;
}

/**
 * Dispatches recorded for one training step with the head in `chunks` chunks (checked against what build()
 * records): 8 a chunk (forward: logits, statistics; backward: the logits again but for the last chunk, which is
 * still in its buffer, dlogits, 4 of the matmul's backward), the mean loss, and the rest of the model; the
 * encoder's forward and wte backward once per vocabulary window, the optimizer's per piece of θ.
 */
export const stepDispatches = (L: number, chunks: number, vocabWindows = 1, pieces = 1) =>
  10 + 8 * chunks + 40 * L + 2 * (vocabWindows - 1) + optDispatches(pieces) - optDispatches(1);
/** The step's last dispatches, after the gradients: grad norm (a partial sum per piece, the finalize) and AdamW's. */
export const optDispatches = (pieces = 1) => 2 * pieces + 1;
/** The optimizer's dispatches without windows. */
export const OPT_DISPATCHES = optDispatches(1);

/** A batch of B sequences in micro-batches of at most `micro`: their sizes, a ragged one first. */
export function microBatches(B: number, micro: number): number[] {
  const full = Math.floor(B / micro),
    rest = B % micro;
  return [...(rest ? [rest] : []), ...Array<number>(full).fill(micro)];
}

/** Loss slots after the ring, used by evalLoss (one per chunk of microBatch sequences). */
export const EVAL_SLOTS = 16;

// ---------------------------------------------------------------------------- sizing

export interface Plan {
  /** Storage buffers: name → bytes. */
  storage: Map<string, number>;
  /** Mappable and uniform buffers: bytes. */
  other: Map<string, number>;
  maxT: number;
  ring: number;
  /** Largest grid dimension any dispatch uses. */
  maxGroups: number;
  /** The LM head's chunk width (vocabulary ids) and chunk count. */
  headChunk: number;
  headChunks: number;
  /** wte's vocabulary windows and θ's pieces for the binding limit */
  windows: StepWindows;
}

export const f32b = (n: number) => Math.max(16, Math.ceil((n * 4) / 16) * 16); // bytes, padded for vec4 views
/** The readback buffer's size: reads of θ, Δ and the moments go through it in chunks of this. */
export const READBACK_BYTES = 4 * 2 ** 20;
export const h16b = (n: number) => Math.max(16, Math.ceil((n * 2) / 16) * 16); // bytes of n halves, padded alike

/** Activations stored as halves with --precision f16: all but the head's logits (and their gradients: f32). */
export const HALF_ACTIVATIONS = new Set([
  'encoded',
  'ln1',
  'qkv',
  'atty',
  'attproj',
  'residual2',
  'ln2',
  'fch',
  'fcproj',
  'residual3',
  'lnf',
]);

/**
 * The flat buffers of θ's length: θ, its gradients (Δ, as halves with f16, after a round), the Adam moments,
 * θ at the round's start, f16's half weight copy. Each is one GPUBuffer, or where it exceeds the buffer limit one
 * per range of the StepWindows' `parts` (whole tensors), named partName(k, i); the dispatches name its
 * splitBuffer stand-in.
 */
export const FLAT_BUFFERS = ['params', 'grads', 'm', 'v', 'start', 'wcopy'];
export const partName = (k: string, i: number) => `${k}/${i}`;
/** The flat buffer a buffer name is (or is a part of), or undefined. */
const flatOf = (name: string) => FLAT_BUFFERS.find((k) => name === k || name.startsWith(`${k}/`));

/**
 * The plan's storage buffers by name, each made by `make` (name, bytes); a split flat buffer also by its own name, as
 * the stand-in (shaders/kernel.ts splitBuffer) over its parts that the dispatches name.
 */
export function planBuffers(p: Plan, make: (name: string, size: number) => GPUBuffer): Map<string, GPUBuffer> {
  const out = new Map<string, GPUBuffer>();
  for (const [name, size] of p.storage) out.set(name, make(name, size));
  for (const k of FLAT_BUFFERS)
    if (out.has(partName(k, 0)))
      out.set(
        k,
        splitBuffer(
          k,
          p.windows.parts.map(([lo, hi], i) => ({ lo, hi, buffer: out.get(partName(k, i))! })),
        ),
      );
  return out;
}

export function resolve(opts: WebGpuEngineOptions) {
  const c = opts.config;
  const maxT = opts.maxT ?? c.blockSize;
  const micro = Math.min(opts.microBatch ?? opts.maxBatch, opts.maxBatch);
  return { c, maxT, B: opts.maxBatch, micro, ring: Math.max(1, Math.floor(opts.lossReadEvery ?? 64)) };
}

/** Every buffer the engine allocates: activations for (microBatch, maxT), the batch's tokens for (maxBatch, maxT). */
export function plan(opts: WebGpuEngineOptions): Plan {
  const { c, maxT, B, micro, ring } = resolve(opts);
  const { vocabSize: V, nLayer: L, nHead: NH, nEmbd: C } = c;
  const Vc = headChunk(opts),
    chunks = op.vocabChunks(V, Vc).length;
  const N = paramLayout(c).total;
  const windows = stepWindows(c, opts.maxBindingBytes, opts.maxBufferBytes);
  // activations for one micro-batch (the whole batch without micro-batches)
  const BT = micro * maxT,
    ROWS = micro * NH * maxT;
  const s = new Map<string, number>();
  const f16 = opts.precision === 'f16';
  // θ's flat buffers (f16: and the matmuls' half weight copy, which AdamW writes), each in its parts where split
  for (const k of FLAT_BUFFERS.filter((k) => f16 || k !== 'wcopy'))
    windows.parts.forEach(([lo, hi], i, all) =>
      s.set(all.length > 1 ? partName(k, i) : k, k === 'wcopy' ? h16b(hi - lo) : f32b(hi - lo)),
    );
  const perLayer: Record<string, number> = {
    ln1: BT * C,
    ln1Mean: BT,
    ln1Rstd: BT,
    qkv: BT * 3 * C,
    atty: BT * C,
    attLse: ROWS,
    residual2: BT * C,
    ln2: BT * C,
    ln2Mean: BT,
    ln2Rstd: BT,
    fch: 2 * BT * 4 * C /* fc output, then its GELU at BT·4C */,
    residual3: BT * C,
  };
  const bytes = (k: string, n: number) => (f16 && HALF_ACTIVATIONS.has(k) ? h16b(n) : f32b(n));
  for (let l = 0; l < L; l++) for (const [k, n] of Object.entries(perLayer)) s.set(`${k}.${l}`, bytes(k, n));
  const single: Record<string, number> = {
    encoded: BT * C,
    attproj: BT * C,
    fcproj: BT * C,
    lnf: BT * C,
    lnfMean: BT,
    lnfRstd: BT,
    // the head a chunk of the vocabulary at a time: its logits, turned into its dlogits in place
    // (webgpu-step.ts), and each row's online softmax statistics (head.wgsl)
    logitsChunk: BT * Vc,
    headStats: BT * op.HEAD_STATS,
    losses: BT,
    // gradients of activations: one layer's worth, reused down the layers; the residual
    // stream's gradient is one buffer that every LayerNorm backward adds into. Buffers whose
    // lives do not overlap are one: attention's dout is dln, its dinp (dqkv) is dfchGelu; f16's
    // in-place GELU backward needs no dfch
    dln: BT * C,
    dres: BT * C,
    dfchGelu: BT * 4 * C,
    ...(f16 ? {} : { dfch: BT * 4 * C }),
    attDsum: ROWS,
    // split-K slices of dW (the largest: fc's, or a head chunk's), row slices of bias and LayerNorm gradients
    dwPartials: op.partialsScratch(Math.max(4 * C * C, Vc * C), BT, 4 * C),
    inputs: BT,
    targets: BT,
    batchTokens: 2 * B * maxT /* the whole batch's inputs, then its targets: each micro-batch's copied out */,
    ring: ring + EVAL_SLOTS,
    partials: op.gradNormPartials(N),
    clip: 4,
    // the grad norm in pieces: each thread's running sum between them
    ...(windows.pieces.length > 1 ? { normCarry: op.gradNormCarry(N) } : {}),
  };
  for (const [k, n] of Object.entries(single)) s.set(k, bytes(k, n));
  const o = new Map<string, number>();
  // θ, Δ and the moments are read back a chunk at a time; logits and eval losses fit in one
  const chunk = Math.min(opts.readbackBytes ?? READBACK_BYTES, opts.maxBufferBytes ?? Infinity); // within the limit
  o.set('readback', Math.min(f32b(N), Math.max(Math.ceil(chunk / 16) * 16, f32b(V), f32b(EVAL_SLOTS))));
  o.set('lossStaging', f32b(ring + EVAL_SLOTS));
  o.set('stepUniform', 256);
  // the step program's uniforms: one 256-byte slot per dispatch, adamw's takes two
  const W = windows.vocab.length,
    P = windows.pieces.length;
  o.set('uniforms', (stepDispatches(L, chunks, W, P) + P) * 256);
  // micro-batches after the first: the step's gradient part again, every parameter gradient accumulating
  if (micro < B) o.set('accUniforms', (stepDispatches(L, chunks, W, P) - optDispatches(P)) * 256);
  o.set('deltaUniforms', 256 * P);
  if (f16) o.set('packUniforms', 256 * P);
  const maxGroups = Math.max(V, micro * NH, maxT, Math.ceil(BT / 64), Math.ceil((4 * C) / 64), 1024);
  return { storage: s, other: o, maxT, ring, maxGroups, headChunk: Vc, headChunks: chunks, windows };
}

/** Bytes the engine allocates on the device for these options (what `gpuBytes` reports after create). */
export function estimateGpuBytes(opts: WebGpuEngineOptions): number {
  const p = plan(opts);
  let total = 0;
  for (const v of p.storage.values()) total += v;
  for (const v of p.other.values()) total += v;
  return total;
}

/** What the engine holds on the device, by what it is for (bytes), and the head's chunking. */
export interface MemoryPlan {
  /** the vocabulary ids per chunk of the LM head, and the chunks */
  headChunk: number;
  headChunks: number;
  /** sequences per micro-batch (the activations' size; maxBatch: no micro-batches) */
  microBatch: number;
  bytes: {
    /** θ, its gradients, the Adam moments, θ at the round's start (and f16's weight copy) */
    parameters: number;
    /** the activations the backward reads, and one layer's worth of their gradients */
    activations: number;
    /** the head's chunk of logits (its dlogits in place), its per-row statistics and losses */
    head: number;
    /** split-K and row-slice partials, the tokens, the loss ring, readback, staging and uniforms */
    scratch: number;
  };
  /** every byte above: what create() allocates (estimateGpuBytes) */
  total: number;
  /** the largest single buffer (what maxBufferSize must hold), and what it holds */
  largestBuffer: number;
  largestBufferAt: string;
  /** the buffer limit planned for (bytes; null: none), and the GPUBuffers each of θ's flat buffers takes under it */
  bufferLimit: number | null;
  thetaBuffers: number;
  /** the binding limit planned for (bytes; null: none, each dispatch binds whole parameter buffers) */
  bindingLimit: number | null;
  /** the largest range any dispatch binds (what maxStorageBufferBindingSize must hold), and what binds it */
  largestWindow: number;
  largestWindowAt: string;
  /** wte's vocabulary windows (the encoder's dispatches) and θ's pieces (AdamW, grad norm, Δ, f16 pack) */
  vocabWindows: number;
  thetaPieces: number;
}

const HEAD_BUFFERS = new Set(['logitsChunk', 'headStats', 'losses']);
const SCRATCH_BUFFERS = new Set([
  'dwPartials',
  'partials',
  'clip',
  'inputs',
  'targets',
  'batchTokens',
  'ring',
  'normCarry',
]);

/** The plan's bytes by category (every storage buffer not otherwise named is an activation or its gradient). */
export function memoryPlan(opts: WebGpuEngineOptions): MemoryPlan {
  const p = plan(opts);
  const bytes = { parameters: 0, activations: 0, head: 0, scratch: 0 };
  for (const [k, n] of p.storage) {
    const cat = flatOf(k)
      ? 'parameters'
      : HEAD_BUFFERS.has(k)
        ? 'head'
        : SCRATCH_BUFFERS.has(k)
          ? 'scratch'
          : 'activations';
    bytes[cat] += n;
  }
  for (const n of p.other.values()) bytes.scratch += n;
  const total = bytes.parameters + bytes.activations + bytes.head + bytes.scratch;
  const microBatch = resolve(opts).micro;
  const w = largestBinding(opts),
    buf = largestBuffer(opts);
  return {
    headChunk: p.headChunk,
    headChunks: p.headChunks,
    microBatch,
    bytes,
    total,
    largestBuffer: buf.bytes,
    largestBufferAt: buf.at,
    bufferLimit: opts.maxBufferBytes ?? null,
    thetaBuffers: p.windows.parts.length,
    bindingLimit: opts.maxBindingBytes ?? null,
    largestWindow: w.bytes,
    largestWindowAt: w.at,
    vocabWindows: p.windows.vocab.length,
    thetaPieces: p.windows.pieces.length,
  };
}

/** Every dispatch the engine records for these options (the step, its micro-batch form, Δ, the f16 pack). */
export function plannedDispatches(opts: WebGpuEngineOptions, b: (name: string) => GPUBuffer): DispatchSpec[] {
  const p = plan(opts);
  const { micro, maxT, B } = resolve(opts);
  const f16 = opts.precision === 'f16' ? { form: 'packed' as const } : undefined;
  const o = { maxRows: micro * maxT, headChunk: p.headChunk, choices: new Map(), windows: p.windows };
  const step = trainingStep(opts.config, b, { ...o, ...(f16 ? { f16 } : {}) });
  const acc = micro < B ? trainingStep(opts.config, b, { ...o, accumulate: true, ...(f16 ? { f16 } : {}) }) : null;
  const theta = thetaOps(opts.config, b, { windows: p.windows, ...(f16 ? { f16 } : {}) });
  return [...step.specs, ...(acc?.specs.slice(0, acc.optStart) ?? []), ...theta.delta, ...theta.pack];
}

/**
 * The largest range any dispatch binds (bytes), from the dispatches themselves recorded on stand-in buffers of the
 * planned sizes: a window where the dispatch has one, else the whole buffer (every buffer but θ's kind counts whole).
 * `at` names the dispatch and variable, or the buffer.
 */
export function largestBinding(opts: WebGpuEngineOptions): { bytes: number; at: string } {
  const p = plan(opts);
  const fake = planBuffers(p, (name, size) => ({ size, label: name }) as GPUBuffer);
  const b = (name: string) => {
    const x = fake.get(name);
    if (!x) throw new Error(`internal: no planned buffer ${name}`);
    return x;
  };
  // a storage buffer no dispatch windows counts whole (whoever binds it)
  let best = { bytes: 0, at: '' };
  for (const [k, n] of p.storage) if (!flatOf(k) && n > best.bytes) best = { bytes: n, at: `the whole buffer ${k}` };
  for (const spec of plannedDispatches(opts, b).map(resolveParts))
    for (const [name, buf] of Object.entries(spec.buffers)) {
      const w = spec.windows?.[name];
      const bytes = w ? windowRange(w, buf.size).size : buf.size;
      if (bytes > best.bytes) best = { bytes, at: `${spec.entry} ${name} (${buf.label})` };
    }
  return best;
}

/**
 * The device limits this config needs, for `adapter.requestDevice({ requiredLimits })`.
 * Only what the engine uses; every value above the WebGPU defaults must be requested.
 */
export function requiredLimits(opts: WebGpuEngineOptions): Record<string, number> {
  const p = plan(opts);
  return {
    // the largest range a dispatch binds, not the largest buffer
    maxStorageBufferBindingSize: largestBinding(opts).bytes,
    // the largest buffer made: a part of θ's where the flat buffers are split
    maxBufferSize: largestBuffer(opts).bytes,
    maxStorageBuffersPerShaderStage: MAX_STORAGE_BINDINGS,
    maxUniformBufferBindingSize: 512,
    maxBindGroups: 1,
    maxComputeWorkgroupStorageSize: 8192, // matmul's tiles (attention uses none)
    maxComputeInvocationsPerWorkgroup: 256,
    maxComputeWorkgroupSizeX: 256,
    maxComputeWorkgroupsPerDimension: Math.min(p.maxGroups, 65535),
  };
}

/**
 * The largest buffer the plan makes (bytes), and `at` what it holds: θ's tensors where it is (a part of) a flat
 * buffer, else its name.
 */
export function largestBuffer(opts: WebGpuEngineOptions): { bytes: number; at: string } {
  const p = plan(opts);
  let best = { bytes: 0, at: '' };
  for (const [k, n] of [...p.storage, ...p.other]) if (n > best.bytes) best = { bytes: n, at: k };
  if (!flatOf(best.at)) return { ...best, at: `the buffer ${best.at}` };
  const [lo, hi] = p.windows.parts[Number(best.at.split('/')[1] ?? 0)];
  const names = paramLayout(opts.config)
    .tensors.filter((t) => t.offset >= lo && t.offset < hi)
    .map((t) => t.name);
  return { ...best, at: `θ's ${names.length > 1 ? 'tensors' : 'tensor'} ${names.join(', ')} (${best.at})` };
}

/** Bytes as MiB, or KiB below 1 MiB. */
const bytesText = (n: number) => (n < 2 ** 20 ? `${(n / 1024).toFixed(n % 1024 === 0 ? 0 : 1)} KiB` : mib(n));

export const mib = (n: number) => `${(n / 2 ** 20).toFixed(n % 2 ** 20 === 0 ? 0 : 1)} MiB`;

/** The limits an option may force below the device's: the option, and what the message calls it. */
const FORCED: Record<string, ['maxBindingBytes' | 'maxBufferBytes', string]> = {
  maxStorageBufferBindingSize: ['maxBindingBytes', 'the binding limit'],
  maxBufferSize: ['maxBufferBytes', 'the buffer limit'],
};

export function limitShortfall(
  limits: Record<string, number>,
  have: GPUSupportedLimits,
  opts: WebGpuEngineOptions,
  who: string,
): Result<void> {
  const have_ = have as unknown as Record<string, number>;
  for (const [k, need] of Object.entries(limits)) {
    let h = have_[k],
      allows = `${who} allows`;
    // a binding or buffer limit forced below the device's (maxBindingBytes, maxBufferBytes) is the one to fit
    const forced = FORCED[k];
    const f = forced && opts[forced[0]];
    if (f !== undefined && (h === undefined || f < h)) {
      h = f;
      allows = `${forced[1]} (${forced[0]}) is`;
    }
    if (h === undefined || need <= h) continue;
    const fmt = /Size$/.test(k) && !/WorkgroupSize/.test(k) ? bytesText : String;
    const { c, maxT, B, micro } = resolve(opts);
    // what binds the range that no window splits, or what the buffer that no cut splits holds
    const at =
      k === 'maxStorageBufferBindingSize' ? largestBinding(opts) : k === 'maxBufferSize' ? largestBuffer(opts) : null;
    const what = at && at.bytes === need ? `; unsplittable: ${at.at}` : '';
    // a tensor of θ no cut splits: only the model's shape changes it
    const tryThis = /^θ's tensor /.test(at?.at ?? '')
      ? 'a smaller model'
      : 'a smaller batch, micro-batch, head chunk or model';
    return err(
      'E_ADAPTER_TOO_SMALL',
      `${k}: model needs ${fmt(need)}, ${allows} ${fmt(h)} ` +
        `(config L=${c.nLayer} C=${c.nEmbd} V=${c.vocabSize}, ` +
        `batch ${B}×${maxT}${micro < B ? ` in micro-batches of ${micro}` : ''}, ` +
        `head in chunks of ${headChunk(opts)}${what}; try ${tryThis})`,
    );
  }
  return ok(undefined);
}

/** Whether the adapter can run this config; names the first limit it lacks. */
export function checkAdapterFits(adapter: GPUAdapter, opts: WebGpuEngineOptions): Result<void> {
  try {
    validateOptions(opts);
  } catch (e) {
    return err('E_BAD_CONFIG', (e as Error).message);
  }
  const o = withDeviceLimits(opts, adapter.limits);
  return limitShortfall(requiredLimits(o), adapter.limits, o, 'adapter');
}

/**
 * The options with the limits to plan for on a device or adapter with these limits: the smaller of `maxBindingBytes`
 * and its maxStorageBufferBindingSize, and of `maxBufferBytes` and its maxBufferSize.
 */
export function withDeviceLimits(opts: WebGpuEngineOptions, limits: GPUSupportedLimits): WebGpuEngineOptions {
  const least = (forced: number | undefined, has: number) => Math.min(forced ?? has, has);
  return {
    ...opts,
    maxBindingBytes: least(opts.maxBindingBytes, limits.maxStorageBufferBindingSize),
    maxBufferBytes: least(opts.maxBufferBytes, limits.maxBufferSize),
  };
}
