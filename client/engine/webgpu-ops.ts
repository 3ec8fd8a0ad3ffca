// The GPU twins of core/model/ops.ts: each function returns the dispatch(es) of one
// op, with the twin's name and argument order (outputs, inputs, then dims). B and T
// come from the Shape at encode time, so one dispatch serves every batch shape.
//
// `accumulate`: the twins ADD into gradient outputs (+=). The kernels do that when
// accumulate is true; the engine passes false wherever it is the first writer, so it
// never has to zero the gradients (see webgpu.ts).
//
// Parameter tensors live in one flat buffer, so weights and biases are given as
// element offsets into it (and into the flat gradient buffer for the backward).

import { type Defines, type DispatchSpec, type EntryName, type Shape, f32, grid1 } from './webgpu-kernels.ts';

const TILE = 64; // the default matmul output tile (matmul.wgsl BM = BN)

const rows = (s: Shape) => s.B * s.T;
const acc = (a: boolean | undefined) => (a ? 1 : 0);

// ---------------------------------------------------------------------------- encoder

export interface EncoderDims { C: number; V: number; maxT: number; wteOff: number; wpeOff: number }

/** out (B,T,C) = wte[inp] + wpe[t]; wte, wpe in `params` at the given offsets. */
export function encoderForward(out: GPUBuffer, inp: GPUBuffer, params: GPUBuffer, d: EncoderDims): DispatchSpec {
  return {
    entry: 'encoder_forward',
    buffers: [out, inp, params],
    params: (s) => [s.B, s.T, d.C, d.V, d.wteOff, d.wpeOff, d.maxT, 0],
    grid: (s) => grid1(rows(s) * d.C, 256),
  };
}

/** dwte, dwpe (in `grads` at the offsets) from dout (B,T,C): two gather passes, no atomics. */
export function encoderBackward(grads: GPUBuffer, dout: GPUBuffer, inp: GPUBuffer, d: EncoderDims & { accumulateWte?: boolean; accumulateWpe?: boolean }): DispatchSpec[] {
  return [
    {
      entry: 'encoder_backward_wte',
      buffers: [grads, inp, dout],
      params: (s) => [s.B, s.T, d.C, d.V, d.wteOff, d.wpeOff, d.maxT, acc(d.accumulateWte)],
      grid: () => [Math.ceil(d.C / 64), d.V, 1],
    },
    {
      entry: 'encoder_backward_wpe',
      buffers: [grads, dout],
      params: (s) => [s.B, s.T, d.C, d.V, d.wteOff, d.wpeOff, d.maxT, acc(d.accumulateWpe)],
      grid: () => grid1(d.maxT * d.C, 256),
    },
  ];
}

// ---------------------------------------------------------------------------- layernorm

export interface LayernormDims { C: number; wOff: number; bOff: number }

export function layernormForward(out: GPUBuffer, mean: GPUBuffer, rstd: GPUBuffer, inp: GPUBuffer, params: GPUBuffer, d: LayernormDims): DispatchSpec {
  return {
    entry: 'layernorm_forward',
    buffers: [out, mean, rstd, inp, params],
    params: (s) => [rows(s), d.C, d.wOff, d.bOff, 0, 0],
    grid: (s) => grid1(rows(s), 1),
  };
}

/** res (B,T,C) = inp1 + inp2, then out = layernorm(res) with its mean and rstd: one pass per row. */
export function residualLayernormForward(res: GPUBuffer, out: GPUBuffer, mean: GPUBuffer, rstd: GPUBuffer, inp1: GPUBuffer, inp2: GPUBuffer, params: GPUBuffer, d: LayernormDims): DispatchSpec {
  return {
    entry: 'residual_layernorm_forward',
    buffers: [out, mean, rstd, res, params, inp1, inp2],
    params: (s) => [rows(s), d.C, d.wOff, d.bOff, 0, 0],
    grid: (s) => grid1(rows(s), 1),
  };
}

/**
 * dinp (B,T,C); dweight, dbias in `grads` at d.wOff, d.bOff: per-slice column sums into
 * `partials` (partialsScratch elements), then the slices summed in order.
 */
export function layernormBackward(dinp: GPUBuffer, grads: GPUBuffer, dout: GPUBuffer, inp: GPUBuffer, params: GPUBuffer, mean: GPUBuffer, rstd: GPUBuffer, d: LayernormDims & { partials: GPUBuffer; accumulateDinp?: boolean; accumulateParams?: boolean }): DispatchSpec[] {
  const slices = (s: Shape) => rowSlices(rows(s));
  return [
    {
      entry: 'layernorm_backward_dinp',
      buffers: [dinp, dout, inp, params, mean, rstd],
      params: (s) => [rows(s), d.C, d.wOff, d.bOff, acc(d.accumulateDinp), 0],
      grid: (s) => grid1(rows(s), 1),
    },
    {
      entry: 'layernorm_backward_dweight',
      buffers: [d.partials, dout, inp, mean, rstd],
      params: (s) => [rows(s), d.C, d.wOff, d.bOff, 0, slices(s).chunk],
      grid: (s) => [Math.ceil(d.C / 64), slices(s).slices, 1],
    },
    // rows (dweight, dbias) of the slices → grads at wOff and bOff (rows bOff − wOff apart, mod 2³²)
    sumSlices(grads, d.partials, { M: 2, N: d.C, outOff: d.wOff, rowStride: (d.bOff - d.wOff) >>> 0, accumulate: d.accumulateParams }, slices),
  ];
}

// ---------------------------------------------------------------------------- split reductions

/** Row slices for column sums over `rows` rows: enough workgroups to fill a GPU, each slice ≥ 64 rows. */
export const ROW_SLICES_MAX = 32;
export function rowSlices(rows: number): { slices: number; chunk: number } {
  const chunk = Math.ceil(rows / Math.max(1, Math.min(ROW_SLICES_MAX, Math.floor(rows / 64))));
  return { slices: Math.ceil(rows / chunk), chunk };
}

/** Elements of the partials scratch: split-K slices of dW outputs up to maxOut, and row slices of widths up to maxWidth. */
export function partialsScratch(maxOut: number, maxRows: number, maxWidth: number): number {
  return Math.max(splitKScratch(maxOut, maxRows), ROW_SLICES_MAX * maxWidth);
}

/** out (M,N) (+)= Σ_z partials[z] over the slices (matmul_backward_dweight_reduce); out rows rowStride apart. */
function sumSlices(out: GPUBuffer, partials: GPUBuffer, d: { M: number; N: number; outOff: number; rowStride: number; accumulate?: boolean }, slices: (s: Shape) => { slices: number }): DispatchSpec {
  return {
    entry: 'matmul_backward_dweight_reduce',
    buffers: [out, partials],
    params: (s) => [d.M, d.N, slices(s).slices, d.accumulate ? ACCUMULATE : 0, 0, 0, d.outOff, d.rowStride, 0],
    grid: (s) => (slices(s).slices > 0 ? grid1(d.M * d.N, 256) : [0, 0, 0]),
  };
}

// ---------------------------------------------------------------------------- matmul

export interface MatmulDims {
  C: number;
  OC: number;
  wOff: number;
  biasOff: number | null;
  /** false: scalar loads even where vec4 would do (the autotuner's choice); dwVec4 for dW */
  vec4?: boolean;
  dwVec4?: boolean;
  /** element offset of the layer's input in its buffer (default 0) */
  inOff?: number;
  /** forward: also write gelu(out) this many elements after out, in the same buffer (the fused epilogue) */
  geluOff?: number;
  /** the tile (default: DEFAULT_TILE); dwTile for dW */
  tile?: MatmulTile | null;
  dwTile?: MatmulTile | null;
}

/**
 * A matmul tile (matmul.wgsl): bm × bn outputs per workgroup, tm rows × 4 columns per
 * thread, through workgroup memory, or `direct` (no workgroup memory, no barrier; tn
 * columns per thread, 4 or 8).
 */
export interface MatmulTile {
  bm: number;
  bn: number;
  tm: number;
  direct?: boolean;
  tn?: number;
}

export const DEFAULT_TILE: MatmulTile = { bm: TILE, bn: TILE, tm: 4 };

/** Entry point, defines and grid of a matmul pass (out M×N) on a tile (the default where absent). */
function matmulKernel(base: string, vec4: boolean, tile: MatmulTile | null | undefined) {
  const t = tile ?? DEFAULT_TILE;
  const entry = `${base}${t.direct ? '_direct' : ''}${vec4 ? '_vec4' : ''}` as EntryName;
  const grid = (M: number, N: number, z = 1): [number, number, number] => [Math.ceil(N / t.bn), Math.ceil(M / t.bm), z];
  const defines: Defines | undefined = !tile ? undefined : t.direct ? { DX: t.bn / (t.tn ?? 4), DY: t.bm / t.tm, TM: t.tm, CN: (t.tn ?? 4) / 4 } : { BM: t.bm, BN: t.bn, TM: t.tm };
  return { entry, grid, defines };
}

/** Split-K of dW: at most this many K slices, each of at least SPLIT_MIN_ROWS rows. */
export const SPLIT_K_MAX = 8;
const SPLIT_MIN_ROWS = 256;
const SPLIT_TARGET_GROUPS = 128; // enough workgroups to occupy a discrete GPU

/** K slices for dW (M×N output, K = B·T rows): more slices when the output has few tiles. */
export function splitK(M: number, N: number, K: number, force?: number): { slices: number; chunk: number } {
  const want = force ?? Math.min(SPLIT_K_MAX, Math.floor(K / SPLIT_MIN_ROWS), Math.ceil(SPLIT_TARGET_GROUPS / (tiles(M) * tiles(N))));
  const s = Math.max(1, Math.min(want, K));
  const chunk = Math.ceil(Math.ceil(K / s) / 16) * 16; // a multiple of the K tile
  return { slices: Math.ceil(K / chunk), chunk };
}

/** Elements of the split-K scratch buffer for dW outputs up to maxOut elements and B·T up to maxRows. */
export function splitKScratch(maxOut: number, maxRows: number): number {
  return maxSplitK(maxRows) * maxOut;
}

/** Most K slices of dW the scratch holds for B·T up to maxRows (the autotuner tries no more). */
export const maxSplitK = (maxRows: number) => Math.max(1, Math.min(SPLIT_K_MAX, Math.floor(maxRows / SPLIT_MIN_ROWS)));

const HAS_BIAS = 1;
const ACCUMULATE = 2;
const GELU = 4;
const aligned4 = (...xs: number[]) => xs.every((x) => x % 4 === 0);
const tiles = (n: number) => Math.ceil(n / TILE);

/** out (B,T,OC) = inp (B,T,C) · W(OC,C)ᵀ + bias; W and bias in `params`. */
export function matmulForward(out: GPUBuffer, inp: GPUBuffer, params: GPUBuffer, d: MatmulDims): DispatchSpec {
  const vec4 = d.vec4 !== false && aligned4(d.C, d.OC, d.wOff, d.inOff ?? 0, d.geluOff ?? 0);
  const flags = (d.biasOff === null ? 0 : HAS_BIAS) | (d.geluOff === undefined ? 0 : GELU);
  const k = matmulKernel('matmul_forward', vec4, d.tile);
  return {
    entry: k.entry,
    defines: k.defines,
    buffers: [out, inp, params],
    params: (s) => [rows(s), d.OC, d.C, flags, d.inOff ?? 0, d.wOff, 0, d.biasOff ?? 0, 0, d.geluOff ?? 0],
    grid: (s) => k.grid(rows(s), d.OC),
  };
}

/**
 * dinp (B,T,C) = dout·W; dW (in `grads` at wOff) = doutᵀ·inp; dbias = Σ dout.
 * `dinp` null skips the input gradient. `partials` (partialsScratch elements) holds dW's
 * split-K slices when splitting along K helps (`splitK` forces a slice count, for tests;
 * the direct and the split dispatches are both recorded, the shape decides which runs)
 * and dbias's row slices. `splitK` 0 or absent: the heuristic.
 */
export function matmulBackward(dinp: GPUBuffer | null, grads: GPUBuffer, dout: GPUBuffer, inp: GPUBuffer, params: GPUBuffer, d: MatmulDims & { partials: GPUBuffer; accumulateDinp?: boolean; accumulateParams?: boolean; splitK?: number }): DispatchSpec[] {
  const vec4 = d.vec4 !== false && aligned4(d.C, d.OC, d.wOff);
  const accP = d.accumulateParams ? ACCUMULATE : 0;
  const partials = d.partials;
  const specs: DispatchSpec[] = [];
  if (dinp) {
    const k = matmulKernel('matmul_backward_dinp', vec4, d.tile);
    specs.push({
      entry: k.entry,
      defines: k.defines,
      buffers: [dinp, dout, params],
      // M = B·T, N = C, K = OC; A = dout (M,K), B = W (K,N)
      params: (s) => [rows(s), d.C, d.OC, d.accumulateDinp ? ACCUMULATE : 0, 0, d.wOff, 0, 0, 0],
      grid: (s) => k.grid(rows(s), d.C),
    });
  }
  // dW: M = OC, N = C, K = B·T; A = dout read transposed, B = inp (K,N)
  const dw = matmulKernel('matmul_backward_dweight', d.dwVec4 !== false && aligned4(d.C, d.OC, d.wOff, d.inOff ?? 0), d.dwTile);
  const split = (s: Shape) => splitK(d.OC, d.C, rows(s), d.splitK || undefined);
  const splitSlices = (s: Shape) => ({ slices: split(s).slices > 1 ? split(s).slices : 0 });
  specs.push({
    entry: dw.entry,
    defines: dw.defines,
    buffers: [grads, dout, inp],
    params: (s) => [d.OC, d.C, rows(s), accP, 0, d.inOff ?? 0, d.wOff, 0, rows(s)],
    grid: (s) => (split(s).slices > 1 ? [0, 0, 0] : dw.grid(d.OC, d.C)),
  }, {
    entry: dw.entry,
    defines: dw.defines,
    buffers: [partials, dout, inp],
    params: (s) => [d.OC, d.C, rows(s), 0, 0, d.inOff ?? 0, 0, 0, split(s).chunk],
    grid: (s) => { const k = split(s); return k.slices > 1 ? dw.grid(d.OC, d.C, k.slices) : [0, 0, 0]; },
  }, sumSlices(grads, partials, { M: d.OC, N: d.C, outOff: d.wOff, rowStride: d.C, accumulate: d.accumulateParams }, splitSlices));
  if (d.biasOff !== null) {
    const slices = (s: Shape) => rowSlices(rows(s));
    specs.push({
      entry: 'matmul_backward_dbias',
      buffers: [partials, dout],
      params: (s) => [rows(s), d.OC, 0, 0, 0, 0, 0, 0, slices(s).chunk],
      grid: (s) => [Math.ceil(d.OC / 64), slices(s).slices, 1],
    }, sumSlices(grads, partials, { M: 1, N: d.OC, outOff: d.biasOff, rowStride: d.OC, accumulate: d.accumulateParams }, slices));
  }
  return specs;
}

// ---------------------------------------------------------------------------- attention

export interface AttentionDims { C: number; NH: number }

const attParams = (s: Shape, d: AttentionDims, accumulate: number) => [s.B, s.T, d.C, d.NH, accumulate, f32(1 / Math.sqrt(d.C / d.NH))];
const attGrid = (s: Shape, d: AttentionDims): [number, number, number] => [Math.ceil(s.T / ATT_ROWS), s.B * d.NH, 1];
const ATT_ROWS = 32; // attention.wgsl BR

/** Workgroup memory of the attention kernels for head size hs: two BC×hs tiles and BC (lse, D) pairs. */
export const attentionTileBytes = (hs: number) => { const bc = hs <= 32 ? 32 : 16; return 2 * bc * Math.ceil(hs / 4) * 16 + bc * 8; };

/** out (B,T,C) and lse (B,NH,T), the softmax's log-normaliser per row, from inp (B,T,3C). */
export function attentionForward(out: GPUBuffer, lse: GPUBuffer, inp: GPUBuffer, d: AttentionDims): DispatchSpec {
  return { entry: 'attention_forward', defines: { HS: d.C / d.NH }, buffers: [out, lse, inp], params: (s) => attParams(s, d, 0), grid: (s) => attGrid(s, d) };
}

/** dinp (B,T,3C) from dout (B,T,C), the forward's out and lse; dsum (B,NH,T) is scratch. */
export function attentionBackward(dinp: GPUBuffer, dsum: GPUBuffer, dout: GPUBuffer, inp: GPUBuffer, out: GPUBuffer, lse: GPUBuffer, d: AttentionDims & { accumulate?: boolean }): DispatchSpec[] {
  const params = (s: Shape) => attParams(s, d, acc(d.accumulate));
  const defines = { HS: d.C / d.NH };
  return [
    { entry: 'attention_backward_dq', defines, buffers: [dinp, dsum, inp, lse, dout, out], params, grid: (s) => attGrid(s, d) },
    { entry: 'attention_backward_dkv', defines, buffers: [dinp, dsum, inp, lse, dout], params, grid: (s) => attGrid(s, d) },
  ];
}

// ---------------------------------------------------------------------------- elementwise (width = channels per token)

export function geluForward(out: GPUBuffer, inp: GPUBuffer, d: { width: number }): DispatchSpec {
  return { entry: 'gelu_forward', buffers: [out, inp], params: (s) => [rows(s) * d.width, 0], grid: (s) => grid1(rows(s) * d.width, 256) };
}

export function geluBackward(dinp: GPUBuffer, inp: GPUBuffer, dout: GPUBuffer, d: { width: number; accumulate?: boolean }): DispatchSpec {
  return { entry: 'gelu_backward', buffers: [dinp, inp, dout], params: (s) => [rows(s) * d.width, acc(d.accumulate)], grid: (s) => grid1(rows(s) * d.width, 256) };
}

// ---------------------------------------------------------------------------- softmax + cross-entropy

export function softmaxCrossEntropyForward(losses: GPUBuffer, probs: GPUBuffer, logits: GPUBuffer, targets: GPUBuffer, d: { V: number }): DispatchSpec {
  return {
    entry: 'softmax_crossentropy_forward',
    buffers: [losses, probs, logits, targets],
    params: (s) => [rows(s), d.V, 0, f32(0)],
    grid: (s) => grid1(rows(s), 1),
  };
}

/** dlogits (+)= (probs − onehot)·dloss with dloss = 1/(B·T), the mean loss. */
export function softmaxCrossEntropyBackward(dlogits: GPUBuffer, probs: GPUBuffer, targets: GPUBuffer, d: { V: number; accumulate?: boolean }): DispatchSpec {
  return {
    entry: 'softmax_crossentropy_backward',
    buffers: [dlogits, probs, targets],
    params: (s) => [rows(s), d.V, acc(d.accumulate), f32(1 / rows(s))],
    grid: (s) => grid1(rows(s) * d.V, 256),
  };
}

/** ring[step.lossSlot] = mean of the B·T losses. */
export function meanLoss(ring: GPUBuffer, losses: GPUBuffer): DispatchSpec {
  return { entry: 'mean_loss', buffers: [ring, losses], params: (s) => [rows(s), 0, 0, f32(0)], grid: () => [1, 1, 1] };
}

// ---------------------------------------------------------------------------- optimizer

/**
 * Partial sums of g² per workgroup: enough to fill a GPU, few enough for one finalising
 * workgroup; 64 elements per thread, as each workgroup's reduction costs barriers (dear on
 * a CPU adapter: 16 per thread took 10 % of a SwiftShader step).
 */
export function gradNormPartials(N: number): number {
  return Math.min(1024, Math.max(1, Math.ceil(N / (256 * 64))));
}

/** clip = [Σ g², clipScale(Σ g², step.maxNorm)] over grads (N). */
export function gradNorm(clip: GPUBuffer, partials: GPUBuffer, grads: GPUBuffer, d: { N: number }): DispatchSpec[] {
  const P = gradNormPartials(d.N);
  return [
    { entry: 'grad_norm_partial', buffers: [partials, grads], params: () => [d.N, P], grid: () => [P, 1, 1] },
    { entry: 'grad_norm_finalize', buffers: [clip, partials], params: () => [d.N, P], grid: () => [1, 1, 1] },
  ];
}

/** Merged [start, end, decay] ranges of the layout (neighbours with the same decay flag join). */
export function decayRanges(tensors: Array<{ offset: number; size: number; decay: boolean }>): Array<[number, number, boolean]> {
  const out: Array<[number, number, boolean]> = [];
  for (const t of tensors) {
    const last = out[out.length - 1];
    if (last && last[2] === t.decay && last[1] === t.offset) last[1] = t.offset + t.size;
    else out.push([t.offset, t.offset + t.size, t.decay]);
  }
  return out;
}

const ADAMW_PER_THREAD = 4; // adamw.wgsl

/** One AdamW step over all N parameters; weight decay only inside the `decay` ranges. */
export function adamwUpdate(params: GPUBuffer, grads: GPUBuffer, m: GPUBuffer, v: GPUBuffer, clip: GPUBuffer, d: { N: number; ranges: Array<[number, number, boolean]> }): DispatchSpec {
  if (d.ranges.length > 16) throw new Error(`adamw_update takes at most 16 decay ranges, got ${d.ranges.length}`);
  const table: number[] = [];
  for (let i = 0; i < 16; i++) {
    const r = d.ranges[i];
    table.push(r ? r[0] : 0, r ? r[1] : 0, r && r[2] ? 1 : 0, 0);
  }
  return {
    entry: 'adamw_update',
    buffers: [params, grads, m, v, clip],
    params: () => [d.N, d.ranges.length, 0, 0, ...table],
    grid: () => grid1(Math.ceil(d.N / ADAMW_PER_THREAD), 256),
  };
}

/** delta = start − theta over N (residual_forward with alpha = −1). */
export function pseudoGradient(delta: GPUBuffer, start: GPUBuffer, theta: GPUBuffer, d: { N: number }): DispatchSpec {
  return { entry: 'residual_forward', buffers: [delta, start, theta], params: () => [d.N, 0, f32(-1)], grid: () => grid1(d.N, 256) };
}
