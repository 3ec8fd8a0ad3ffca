// matmul.wgsl's dispatches: the linear layers' forward, dinp, dW (split along K where that
// helps) and dbias, on a tile the autotuner may choose; and the ordered sum of slices that
// dW's split-K and the LayerNorm's dweight/dbias share.

import { matmulBackward as matmulBackwardCpu, matmulForward as matmulForwardCpu } from '../core/model/ops.ts';
import {
  type CpuTwin,
  type Defines,
  type DispatchSpec,
  type Shape,
  type Window,
  defineKernel,
  grid1,
  rows,
  span,
} from './kernel.ts';
import src from './matmul.wgsl?raw';

type Variant = '' | '_vec4' | '_direct' | '_direct_vec4';
type Pass = 'matmul_forward' | 'matmul_backward_dinp' | 'matmul_backward_dweight';
const VARIANTS: Variant[] = ['', '_vec4', '_direct', '_direct_vec4'];
const variants = (base: Pass, twin: CpuTwin) =>
  Object.fromEntries(VARIANTS.map((v) => [`${base}${v}`, twin])) as Record<`${Pass}${Variant}`, CpuTwin>;

export const matmul = defineKernel('matmul', src, {
  ...variants('matmul_forward', matmulForwardCpu),
  ...variants('matmul_backward_dinp', matmulBackwardCpu),
  ...variants('matmul_backward_dweight', matmulBackwardCpu),
  matmul_backward_dweight_reduce: matmulBackwardCpu,
  matmul_backward_dbias: matmulBackwardCpu,
});

const TILE = 64; // the default matmul output tile (matmul.wgsl BM = BN)

// ---------------------------------------------------------------------------- split reductions

/** Row slices for column sums over `rows` rows: enough workgroups to fill a GPU, each slice ≥ 64 rows. */
export const ROW_SLICES_MAX = 32;
export function rowSlices(rows: number): { slices: number; chunk: number } {
  const chunk = Math.ceil(rows / Math.max(1, Math.min(ROW_SLICES_MAX, Math.floor(rows / 64))));
  return { slices: Math.ceil(rows / chunk), chunk };
}

/**
 * Elements of the partials scratch: split-K slices of dW outputs up to maxOut, and row slices of widths up to maxWidth.
 */
export function partialsScratch(maxOut: number, maxRows: number, maxWidth: number): number {
  return Math.max(splitKScratch(maxOut, maxRows), ROW_SLICES_MAX * maxWidth);
}

/** out (M,N) (+)= Σ_z partials[z] over the slices (matmul_backward_dweight_reduce); out rows rowStride apart. */
export function sumSlices(
  out: GPUBuffer,
  partials: GPUBuffer,
  d: { M: number; N: number; outOff: number; rowStride: number; accumulate?: boolean },
  slices: (s: Shape) => { slices: number },
): DispatchSpec {
  return matmul.dispatch({
    entry: 'matmul_backward_dweight_reduce',
    buffers: { c: out, a: partials },
    // out's window: the M rows at outOff + i·rowStride (a stride past 2³¹ is negative, mod 2³²)
    windows: { c: span(sliceRows(d), 4, ['c_off']) },
    // bias_off: the reduce's row stride of out
    params: (s) => ({
      M: d.M,
      N: d.N,
      K: slices(s).slices,
      flags: d.accumulate ? ACCUMULATE : 0,
      c_off: d.outOff,
      bias_off: d.rowStride,
    }),
    grid: (s) => (slices(s).slices > 0 ? grid1(d.M * d.N, 256) : [0, 0, 0]),
  });
}

/** The bias binding of the entries that have no bias (they reach it, never read it): its first 16 bytes. */
const UNREAD: Window = { lo: 0, hi: 4, elem: 4 };

/** The element ranges of sumSlices' M output rows. */
function sliceRows(d: { M: number; N: number; outOff: number; rowStride: number }): Array<[number, number]> {
  const stride = d.rowStride >= 2 ** 31 ? d.rowStride - 2 ** 32 : d.rowStride;
  return Array.from({ length: d.M }, (_, i): [number, number] => [d.outOff + i * stride, d.outOff + i * stride + d.N]);
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
  /**
   * f16 storage (--precision f16; vec4 variants only): `inp` the layer's input as halves, `w` the
   * weight (and bias) from the half copy, `out` the forward's output (and its GELU) as halves.
   * Gradients stay f32.
   */
  half?: { inp?: boolean; w?: boolean; out?: boolean };
}

/** The matmul defines of one pass's operand storage: A4, B4, C4 'f16' where halves. */
function halfDefines(
  pass: string,
  a: boolean | undefined,
  b: boolean | undefined,
  c: boolean | undefined,
  vec4: boolean,
): Defines {
  if (!(a || b || c)) return {};
  if (!vec4) throw new Error(`${pass}: f16 operands need the vec4 variant (dims and offsets multiples of 4)`);
  return { ...(a ? { A4: 'f16' } : {}), ...(b ? { B4: 'f16' } : {}), ...(c ? { C4: 'f16' } : {}) };
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
function matmulKernel(base: Pass, vec4: boolean, tile: MatmulTile | null | undefined) {
  const t = tile ?? DEFAULT_TILE;
  const entry = `${base}${t.direct ? '_direct' : ''}${vec4 ? '_vec4' : ''}` as const;
  const grid = (M: number, N: number, z = 1): [number, number, number] => [Math.ceil(N / t.bn), Math.ceil(M / t.bm), z];
  const defines: Defines | undefined = !tile
    ? undefined
    : t.direct
      ? { DX: t.bn / (t.tn ?? 4), DY: t.bm / t.tm, TM: t.tm, CN: (t.tn ?? 4) / 4 }
      : { BM: t.bm, BN: t.bn, TM: t.tm };
  return { entry, grid, defines };
}

/** Split-K of dW: at most this many K slices, each of at least SPLIT_MIN_ROWS rows. */
export const SPLIT_K_MAX = 8;
const SPLIT_MIN_ROWS = 256;
const SPLIT_TARGET_GROUPS = 128; // enough workgroups to occupy a discrete GPU

/** K slices for dW (M×N output, K = B·T rows): more slices when the output has few tiles. */
export function splitK(M: number, N: number, K: number, force?: number): { slices: number; chunk: number } {
  const want =
    force ??
    Math.min(SPLIT_K_MAX, Math.floor(K / SPLIT_MIN_ROWS), Math.ceil(SPLIT_TARGET_GROUPS / (tiles(M) * tiles(N))));
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
  const elemW = d.half?.w ? 2 : 4;
  return matmul.dispatch({
    entry: k.entry,
    defines: { ...k.defines, ...halfDefines(k.entry, d.half?.inp, d.half?.w, d.half?.out, vec4) },
    buffers: { c: out, a: inp, b: params, bias_v: params },
    // W's window: the weight (OC, C); the bias (OC) its own binding and window
    windows: {
      b: span([[d.wOff, d.wOff + d.C * d.OC]], elemW, ['b_off']),
      bias_v: d.biasOff === null ? UNREAD : span([[d.biasOff, d.biasOff + d.OC]], elemW, ['bias_off']),
    },
    params: (s) => ({
      M: rows(s),
      N: d.OC,
      K: d.C,
      flags,
      a_off: d.inOff ?? 0,
      b_off: d.wOff,
      bias_off: d.biasOff ?? 0,
      act_off: d.geluOff ?? 0,
    }),
    grid: (s) => k.grid(rows(s), d.OC),
  });
}

/**
 * dinp (B,T,C) = dout·W; dW (in `grads` at wOff) = doutᵀ·inp; dbias = Σ dout.
 * `dinp` null skips the input gradient. `partials` (partialsScratch elements) holds dW's
 * split-K slices when splitting along K helps (`splitK` forces a slice count, for tests;
 * the direct and the split dispatches are both recorded, the shape decides which runs)
 * and dbias's row slices. `splitK` 0 or absent: the heuristic.
 */
export function matmulBackward(
  dinp: GPUBuffer | null,
  grads: GPUBuffer,
  dout: GPUBuffer,
  inp: GPUBuffer,
  params: GPUBuffer,
  d: MatmulDims & { partials: GPUBuffer; accumulateDinp?: boolean; accumulateParams?: boolean; splitK?: number },
): DispatchSpec[] {
  const vec4 = d.vec4 !== false && aligned4(d.C, d.OC, d.wOff);
  const accP = d.accumulateParams ? ACCUMULATE : 0;
  const partials = d.partials;
  const specs: DispatchSpec[] = [];
  if (dinp) {
    const k = matmulKernel('matmul_backward_dinp', vec4, d.tile);
    specs.push(
      matmul.dispatch({
        entry: k.entry,
        defines: { ...k.defines, ...halfDefines(k.entry, false, d.half?.w, false, vec4) },
        buffers: { c: dinp, a: dout, b: params, bias_v: params },
        windows: { b: span([[d.wOff, d.wOff + d.C * d.OC]], d.half?.w ? 2 : 4, ['b_off']), bias_v: UNREAD },
        // M = B·T, N = C, K = OC; A = dout (M,K), B = W (K,N)
        params: (s) => ({ M: rows(s), N: d.C, K: d.OC, flags: d.accumulateDinp ? ACCUMULATE : 0, b_off: d.wOff }),
        grid: (s) => k.grid(rows(s), d.C),
      }),
    );
  }
  // dW: M = OC, N = C, K = B·T; A = dout read transposed, B = inp (K,N)
  const dwVec4 = d.dwVec4 !== false && aligned4(d.C, d.OC, d.wOff, d.inOff ?? 0);
  const dw0 = matmulKernel('matmul_backward_dweight', dwVec4, d.dwTile);
  const dw = { ...dw0, defines: { ...dw0.defines, ...halfDefines(dw0.entry, false, d.half?.inp, false, dwVec4) } };
  const split = (s: Shape) => splitK(d.OC, d.C, rows(s), d.splitK || undefined);
  const splitSlices = (s: Shape) => ({ slices: split(s).slices > 1 ? split(s).slices : 0 });
  specs.push(
    matmul.dispatch({
      entry: dw.entry,
      defines: dw.defines,
      buffers: { c: grads, a: dout, b: inp, bias_v: inp },
      windows: { c: span([[d.wOff, d.wOff + d.C * d.OC]], 4, ['c_off']), bias_v: UNREAD },
      params: (s) => ({
        M: d.OC,
        N: d.C,
        K: rows(s),
        flags: accP,
        b_off: d.inOff ?? 0,
        c_off: d.wOff,
        k_chunk: rows(s),
      }),
      grid: (s) => (split(s).slices > 1 ? [0, 0, 0] : dw.grid(d.OC, d.C)),
    }),
    matmul.dispatch({
      entry: dw.entry,
      defines: dw.defines,
      buffers: { c: partials, a: dout, b: inp, bias_v: inp },
      windows: { bias_v: UNREAD },
      params: (s) => ({ M: d.OC, N: d.C, K: rows(s), b_off: d.inOff ?? 0, k_chunk: split(s).chunk }),
      grid: (s) => {
        const k = split(s);
        return k.slices > 1 ? dw.grid(d.OC, d.C, k.slices) : [0, 0, 0];
      },
    }),
    sumSlices(
      grads,
      partials,
      { M: d.OC, N: d.C, outOff: d.wOff, rowStride: d.C, accumulate: d.accumulateParams },
      splitSlices,
    ),
  );
  if (d.biasOff !== null) {
    const slices = (s: Shape) => rowSlices(rows(s));
    specs.push(
      matmul.dispatch({
        entry: 'matmul_backward_dbias',
        buffers: { c: partials, a: dout },
        params: (s) => ({ M: rows(s), N: d.OC, k_chunk: slices(s).chunk }),
        grid: (s) => [Math.ceil(d.OC / 64), slices(s).slices, 1],
      }),
      sumSlices(
        grads,
        partials,
        { M: 1, N: d.OC, outOff: d.biasOff, rowStride: d.OC, accumulate: d.accumulateParams },
        slices,
      ),
    );
  }
  return specs;
}
