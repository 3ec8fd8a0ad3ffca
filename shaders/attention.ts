// attention.wgsl's dispatches: causal multi-head self-attention, flash style in 4×4 register tiles
// (head size HS = C/NH written in).

import {
  attentionBackward as attentionBackwardCpu,
  attentionForward as attentionForwardCpu,
} from '../core/model/ops.ts';
import { type Defines, type DispatchSpec, type Shape, acc, defineKernel } from './kernel.ts';
import src from './attention.wgsl?raw';

export const attention = defineKernel('attention', src, {
  attention_forward: attentionForwardCpu,
  attention_backward_dq: attentionBackwardCpu,
  attention_backward_dkv: attentionBackwardCpu,
});

/** half: qkv and out stored as halves (--precision f16). The head size is a multiple of 4 (rows go as vec4s). */
export interface AttentionDims {
  C: number;
  NH: number;
  half?: boolean;
}

function defines(d: AttentionDims): Defines {
  const HS = d.C / d.NH;
  if (HS % 4 !== 0)
    throw new Error(`the attention kernels need a head size (nEmbd / nHead) that is a multiple of 4, got ${HS}`);
  return d.half ? { HS, QKV: 'f16', OUT: 'f16' } : { HS };
}

const ROWS = 64; // attention.wgsl BR: 16 threads of 4 rows
const params = (d: AttentionDims, accumulate: boolean | undefined) => (s: Shape) => ({
  B: s.B,
  T: s.T,
  C: d.C,
  NH: d.NH,
  accumulate: acc(accumulate),
  scale: 1 / Math.sqrt(d.C / d.NH),
});
const grid =
  (d: AttentionDims) =>
  (s: Shape): [number, number, number] => [Math.ceil(s.T / ROWS), s.B * d.NH, 1];

/** out (B,T,C) and lse (B,NH,T), the softmax's log-normaliser per row, from inp (B,T,3C). */
export function attentionForward(out: GPUBuffer, lse: GPUBuffer, inp: GPUBuffer, d: AttentionDims): DispatchSpec {
  return attention.dispatch({
    entry: 'attention_forward',
    defines: defines(d),
    buffers: { out, lse, inp },
    params: params(d, false),
    grid: grid(d),
  });
}

/** dinp (B,T,3C) from dout (B,T,C), the forward's out and lse; dsum (B,NH,T) is scratch. */
export function attentionBackward(
  dinp: GPUBuffer,
  dsum: GPUBuffer,
  dout: GPUBuffer,
  inp: GPUBuffer,
  out: GPUBuffer,
  lse: GPUBuffer,
  d: AttentionDims & { accumulate?: boolean },
): DispatchSpec[] {
  return [
    attention.dispatch({
      entry: 'attention_backward_dq',
      defines: defines(d),
      buffers: { dinp, dsum, inp, lse_in: lse, dout, out_in: out },
      params: params(d, d.accumulate),
      grid: grid(d),
    }),
    attention.dispatch({
      entry: 'attention_backward_dkv',
      defines: defines(d),
      buffers: { dinp, dsum, inp, lse_in: lse, dout },
      params: params(d, d.accumulate),
      grid: grid(d),
    }),
  ];
}
