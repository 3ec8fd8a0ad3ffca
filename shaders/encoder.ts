// encoder.wgsl's dispatches: token + position embedding, forward and backward.

import { encoderBackward as encoderBackwardCpu, encoderForward as encoderForwardCpu } from '../core/model/ops.ts';
import { encoderForwardF16 as encoderForwardF16Cpu } from '../core/model/ops-f16.ts';
import { type DispatchSpec, acc, defineKernel, grid1, rows } from './kernel.ts';
import src from './encoder.wgsl?raw';

export const encoder = defineKernel('encoder', src, {
  encoder_forward: encoderForwardCpu,
  encoder_forward_f16: encoderForwardF16Cpu,
  encoder_backward_wte: encoderBackwardCpu,
  encoder_backward_wpe: encoderBackwardCpu,
});

const WTE_ROWS = 8; // encoder.wgsl VR: vocab rows per workgroup of encoder_backward_wte

export interface EncoderDims {
  C: number;
  V: number;
  maxT: number;
  wteOff: number;
  wpeOff: number;
}

const params = (d: EncoderDims, accumulate?: boolean) => (s: { B: number; T: number }) => ({
  B: s.B,
  T: s.T,
  C: d.C,
  V: d.V,
  wte_off: d.wteOff,
  wpe_off: d.wpeOff,
  maxT: d.maxT,
  accumulate: acc(accumulate),
});

/** C and the offsets in whole chunks of `n` (4 f32 or 8 halves a thread). */
function chunked(d: EncoderDims, n: number, what: string): void {
  for (const [k, v] of Object.entries({ C: d.C, wteOff: d.wteOff, wpeOff: d.wpeOff }))
    if (v % n !== 0) throw new Error(`${what} needs ${k} a multiple of ${n}, got ${v}`);
}

/** out (B,T,C) = wte[inp] + wpe[t]; wte, wpe in `params` at the given offsets (C and they multiples of 4). */
export function encoderForward(out: GPUBuffer, inp: GPUBuffer, params_: GPUBuffer, d: EncoderDims): DispatchSpec {
  chunked(d, 4, 'encoder_forward');
  return encoder.dispatch({
    entry: 'encoder_forward',
    buffers: { out4: out, inp, params4: params_ },
    params: params(d),
    grid: (s) => grid1((rows(s) * d.C) / 4, 256),
  });
}

/** out (B,T,C) halves = wte[inp] + wpe[t] from the half weight copy `wcopy` (C and the offsets multiples of 8). */
export function encoderForwardF16(out: GPUBuffer, inp: GPUBuffer, wcopy: GPUBuffer, d: EncoderDims): DispatchSpec {
  chunked(d, 8, 'encoder_forward_f16');
  return encoder.dispatch({
    entry: 'encoder_forward_f16',
    buffers: { out_h8: out, inp, wcopy_h8: wcopy },
    params: params(d),
    grid: (s) => grid1((rows(s) * d.C) / 8, 256),
  });
}

/** dwte, dwpe (in `grads` at the offsets) from dout (B,T,C): two gather passes, no atomics. */
export function encoderBackward(
  grads: GPUBuffer,
  dout: GPUBuffer,
  inp: GPUBuffer,
  d: EncoderDims & { accumulateWte?: boolean; accumulateWpe?: boolean },
): DispatchSpec[] {
  return [
    encoder.dispatch({
      entry: 'encoder_backward_wte',
      buffers: { grads, inp, dout },
      params: params(d, d.accumulateWte),
      grid: () => [Math.ceil(d.C / 64), Math.ceil(d.V / WTE_ROWS), 1],
    }),
    encoder.dispatch({
      entry: 'encoder_backward_wpe',
      buffers: { grads, dout },
      params: params(d, d.accumulateWpe),
      grid: () => grid1(d.maxT * d.C, 256),
    }),
  ];
}
