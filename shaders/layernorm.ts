// layernorm.wgsl's dispatches: LayerNorm (and the residual add fused into it), forward and backward,
// on f32 or (--precision f16) on the residual stream and out as halves.

import {
  layernormBackward as layernormBackwardCpu,
  layernormForward as layernormForwardCpu,
  residualForward,
} from '../core/model/ops.ts';
import {
  layernormForwardF16 as layernormForwardF16Cpu,
  residualLayernormForwardF16 as residualLayernormForwardF16Cpu,
} from '../core/model/ops-f16.ts';
import type { HalfForm } from './half.ts';
import {
  type Defines,
  type DispatchSpec,
  type Shape,
  type Window,
  acc,
  defineKernel,
  grid1,
  rows,
  span,
} from './kernel.ts';
import { rowSlices, sumSlices } from './matmul.ts';
import src from './layernorm.wgsl?raw';

export const layernorm = defineKernel('layernorm', src, {
  layernorm_forward: layernormForwardCpu,
  layernorm_forward_f16: layernormForwardF16Cpu,
  residual_layernorm_forward: [residualForward, layernormForwardCpu],
  residual_layernorm_forward_f16: residualLayernormForwardF16Cpu,
  layernorm_backward_dinp: layernormBackwardCpu,
  layernorm_backward_dweight: layernormBackwardCpu,
});

export interface LayernormDims {
  C: number;
  wOff: number;
  bOff: number;
}

/** The halves' storage form of layernorm.wgsl (its defaults are the packed form). */
export const HALF_LN_DEFINES: Record<HalfForm, Defines> = {
  packed: {},
  native: { H8: 'mat2x4h', H8_LOAD: 'mat2x4f', H8_STORE: 'mat2x4h', H2: 'vec2h', H2_LOAD: 'vec2f', ENABLE: 'f16' },
};

const WG = 64; // layernorm.wgsl

/** Forward threads per row: the power of two ≥ the row's 16-byte chunks, at most the workgroup. */
export const lnThreadsPerRow = (chunks: number) => Math.min(WG, 2 ** Math.floor(Math.log2(Math.max(1, chunks))));

/** The window of `params` a LayerNorm reads: its weight and bias (C each). */
const lnWindow = (d: LayernormDims): Record<string, Window> => ({
  params: span(
    [
      [d.wOff, d.wOff + d.C],
      [d.bOff, d.bOff + d.C],
    ],
    4,
    ['w_off', 'b_off'],
  ),
});

const params = (d: LayernormDims) => (s: Shape) => ({ N: rows(s), C: d.C, w_off: d.wOff, b_off: d.bOff });

/** The forward's Params and grid for C channels in chunks of `perChunk` (4 f32 or 8 halves). */
function forward(d: LayernormDims, perChunk: 4 | 8) {
  if (d.C % perChunk !== 0)
    throw new Error(
      `layernorm ${perChunk === 8 ? 'on halves' : 'forward'} needs C a multiple of ${perChunk}, got C = ${d.C}`,
    );
  const tpr = lnThreadsPerRow(d.C / perChunk);
  return {
    windows: lnWindow(d),
    params: (s: Shape) => ({ ...params(d)(s), tpr }),
    grid: (s: Shape) => grid1(rows(s), WG / tpr),
  };
}

export function layernormForward(
  out: GPUBuffer,
  mean: GPUBuffer,
  rstd: GPUBuffer,
  inp: GPUBuffer,
  params_: GPUBuffer,
  d: LayernormDims,
): DispatchSpec {
  return layernorm.dispatch({
    entry: 'layernorm_forward',
    buffers: { out_4: out, mean, rstd, inp_4: inp, params: params_ },
    ...forward(d, 4),
  });
}

/** res (B,T,C) = inp1 + inp2, then out = layernorm(res) with its mean and rstd: one pass per row. */
export function residualLayernormForward(
  res: GPUBuffer,
  out: GPUBuffer,
  mean: GPUBuffer,
  rstd: GPUBuffer,
  inp1: GPUBuffer,
  inp2: GPUBuffer,
  params_: GPUBuffer,
  d: LayernormDims,
): DispatchSpec {
  return layernorm.dispatch({
    entry: 'residual_layernorm_forward',
    buffers: { out_4: out, mean, rstd, res_4: res, params: params_, inp1_4: inp1, inp2_4: inp2 },
    ...forward(d, 4),
  });
}

export interface HalfLayernormDims extends LayernormDims {
  form: HalfForm;
}

/** out (B,T,C) halves = layernorm(inp), inp halves (the residual stream of --precision f16); mean, rstd f32. */
export function layernormForwardF16(
  out: GPUBuffer,
  mean: GPUBuffer,
  rstd: GPUBuffer,
  inp: GPUBuffer,
  params_: GPUBuffer,
  d: HalfLayernormDims,
): DispatchSpec {
  return layernorm.dispatch({
    entry: 'layernorm_forward_f16',
    defines: HALF_LN_DEFINES[d.form],
    buffers: { out_h8: out, mean, rstd, inp_h8: inp, params: params_ },
    ...forward(d, 8),
  });
}

/** res (halves) = inp1 + inp2 (halves), rounded once; then out (halves) = layernorm(res). */
export function residualLayernormForwardF16(
  res: GPUBuffer,
  out: GPUBuffer,
  mean: GPUBuffer,
  rstd: GPUBuffer,
  inp1: GPUBuffer,
  inp2: GPUBuffer,
  params_: GPUBuffer,
  d: HalfLayernormDims,
): DispatchSpec {
  return layernorm.dispatch({
    entry: 'residual_layernorm_forward_f16',
    defines: HALF_LN_DEFINES[d.form],
    buffers: { out_h8: out, mean, rstd, res_h8: res, params: params_, inp1_h8: inp1, inp2_h8: inp2 },
    ...forward(d, 8),
  });
}

/**
 * dinp (B,T,C); dweight, dbias in `grads` at d.wOff, d.bOff: per-slice column sums into
 * `partials` (partialsScratch elements), then the slices summed in order. With `half`, the
 * forward's input (the residual stream) is read as halves of that form; C even.
 */
export function layernormBackward(
  dinp: GPUBuffer,
  grads: GPUBuffer,
  dout: GPUBuffer,
  inp: GPUBuffer,
  params_: GPUBuffer,
  mean: GPUBuffer,
  rstd: GPUBuffer,
  d: LayernormDims & { partials: GPUBuffer; accumulateDinp?: boolean; accumulateParams?: boolean; half?: HalfForm },
): DispatchSpec[] {
  const slices = (s: Shape) => rowSlices(rows(s));
  if (d.half && d.C % 2 !== 0) throw new Error(`layernorm backward on halves needs an even C, got C = ${d.C}`);
  const defines = d.half ? { ...HALF_LN_DEFINES[d.half], INP: 'inp_f16' } : undefined;
  const inpVar: Record<string, GPUBuffer> = d.half ? { inp_h2: inp } : { inp };
  return [
    layernorm.dispatch({
      entry: 'layernorm_backward_dinp',
      defines,
      buffers: { dinp, dout, ...inpVar, params: params_, mean_in: mean, rstd_in: rstd },
      windows: lnWindow(d),
      params: (s) => ({ ...params(d)(s), accumulate: acc(d.accumulateDinp) }),
      grid: (s) => grid1(rows(s), 1),
    }),
    layernorm.dispatch({
      entry: 'layernorm_backward_dweight',
      defines,
      buffers: { dparams: d.partials, dout, ...inpVar, mean_in: mean, rstd_in: rstd },
      params: (s) => ({ ...params(d)(s), chunk: slices(s).chunk }),
      grid: (s) => [Math.ceil(d.C / 64), slices(s).slices, 1],
    }),
    // rows (dweight, dbias) of the slices → grads at wOff and bOff (rows bOff − wOff apart, mod 2³²)
    sumSlices(
      grads,
      d.partials,
      { M: 2, N: d.C, outOff: d.wOff, rowStride: (d.bOff - d.wOff) >>> 0, accumulate: d.accumulateParams },
      slices,
    ),
  ];
}
