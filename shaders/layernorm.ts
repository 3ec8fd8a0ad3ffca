// layernorm.wgsl's dispatches: LayerNorm (and the residual add fused into it), forward and backward.

import { layernormBackward as layernormBackwardCpu, layernormForward as layernormForwardCpu, residualForward } from '../core/model/ops.ts';
import { type DispatchSpec, type Shape, acc, defineKernel, grid1, rows } from './kernel.ts';
import { rowSlices, sumSlices } from './matmul.ts';
import src from './layernorm.wgsl?raw';

export const layernorm = defineKernel('layernorm', src, {
  layernorm_forward: layernormForwardCpu,
  residual_layernorm_forward: [residualForward, layernormForwardCpu],
  layernorm_backward_dinp: layernormBackwardCpu,
  layernorm_backward_dweight: layernormBackwardCpu,
});

export interface LayernormDims { C: number; wOff: number; bOff: number }

const params = (d: LayernormDims) => (s: Shape) => ({ N: rows(s), C: d.C, w_off: d.wOff, b_off: d.bOff });

export function layernormForward(out: GPUBuffer, mean: GPUBuffer, rstd: GPUBuffer, inp: GPUBuffer, params_: GPUBuffer, d: LayernormDims): DispatchSpec {
  return layernorm.dispatch({ entry: 'layernorm_forward', buffers: { out, mean, rstd, inp, params: params_ }, params: params(d), grid: (s) => grid1(rows(s), 1) });
}

/** res (B,T,C) = inp1 + inp2, then out = layernorm(res) with its mean and rstd: one pass per row. */
export function residualLayernormForward(res: GPUBuffer, out: GPUBuffer, mean: GPUBuffer, rstd: GPUBuffer, inp1: GPUBuffer, inp2: GPUBuffer, params_: GPUBuffer, d: LayernormDims): DispatchSpec {
  return layernorm.dispatch({ entry: 'residual_layernorm_forward', buffers: { out, mean, rstd, res, params: params_, inp1, inp2 }, params: params(d), grid: (s) => grid1(rows(s), 1) });
}

/**
 * dinp (B,T,C); dweight, dbias in `grads` at d.wOff, d.bOff: per-slice column sums into
 * `partials` (partialsScratch elements), then the slices summed in order.
 */
export function layernormBackward(dinp: GPUBuffer, grads: GPUBuffer, dout: GPUBuffer, inp: GPUBuffer, params_: GPUBuffer, mean: GPUBuffer, rstd: GPUBuffer, d: LayernormDims & { partials: GPUBuffer; accumulateDinp?: boolean; accumulateParams?: boolean }): DispatchSpec[] {
  const slices = (s: Shape) => rowSlices(rows(s));
  return [
    layernorm.dispatch({
      entry: 'layernorm_backward_dinp',
      buffers: { dinp, dout, inp, params: params_, mean_in: mean, rstd_in: rstd },
      params: (s) => ({ ...params(d)(s), accumulate: acc(d.accumulateDinp) }),
      grid: (s) => grid1(rows(s), 1),
    }),
    layernorm.dispatch({
      entry: 'layernorm_backward_dweight',
      buffers: { dparams: d.partials, dout, inp, mean_in: mean, rstd_in: rstd },
      params: (s) => ({ ...params(d)(s), chunk: slices(s).chunk }),
      grid: (s) => [Math.ceil(d.C / 64), slices(s).slices, 1],
    }),
    // rows (dweight, dbias) of the slices → grads at wOff and bOff (rows bOff − wOff apart, mod 2³²)
    sumSlices(grads, d.partials, { M: 2, N: d.C, outOff: d.wOff, rowStride: (d.bOff - d.wOff) >>> 0, accumulate: d.accumulateParams }, slices),
  ];
}
