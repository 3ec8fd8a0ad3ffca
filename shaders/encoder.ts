// encoder.wgsl's dispatches: token + position embedding, forward and backward.

import { encoderBackward as encoderBackwardCpu, encoderForward as encoderForwardCpu } from '../core/model/ops.ts';
import { encoderForwardF16 as encoderForwardF16Cpu } from '../core/model/ops-f16.ts';
import {
  type DispatchSpec,
  STORAGE_ALIGN,
  type Window,
  acc,
  defineKernel,
  grid1,
  rows,
  windowRange,
} from './kernel.ts';
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
  /** the vocabulary window [lo, hi) of this dispatch (default: all of V) */
  window?: [number, number];
}

/**
 * wte's rows in windows whose bindings fit `maxBytes` (f32 rows of C, a window's start aligned down to
 * STORAGE_ALIGN): one window where all of wte fits; each dispatch of the encoder binds one.
 */
export function vocabWindows(V: number, C: number, wteOff: number, maxBytes = Infinity): Array<[number, number]> {
  const whole = windowRange({ lo: wteOff, hi: wteOff + V * C, elem: 4 }).size;
  if (whole <= maxBytes) return [[0, V]];
  const per = Math.max(1, Math.floor((maxBytes - STORAGE_ALIGN) / (4 * C)));
  return Array.from({ length: Math.ceil(V / per) }, (_, i): [number, number] => [i * per, Math.min(V, (i + 1) * per)]);
}

/** The window's wte rows, wte_off its first row's offset (elements of `elem` bytes). */
const wteWindow = (d: EncoderDims, elem: number): Window => {
  const [lo, hi] = d.window ?? [0, d.V];
  return { lo: d.wteOff + lo * d.C, hi: d.wteOff + hi * d.C, elem, fields: ['wte_off'] };
};
const wpeWindow = (d: EncoderDims, elem: number): Window => ({
  lo: d.wpeOff,
  hi: d.wpeOff + d.maxT * d.C,
  elem,
  fields: ['wpe_off'],
});

const params = (d: EncoderDims, accumulate?: boolean) => (s: { B: number; T: number }) => ({
  B: s.B,
  T: s.T,
  C: d.C,
  V: d.V,
  wte_off: d.wteOff + (d.window?.[0] ?? 0) * d.C,
  wpe_off: d.wpeOff,
  maxT: d.maxT,
  accumulate: acc(accumulate),
  v_lo: d.window?.[0] ?? 0,
  v_hi: d.window?.[1] ?? d.V,
});

/** C and the offsets in whole chunks of `n` (4 f32 or 8 halves a thread). */
function chunked(d: EncoderDims, n: number, what: string): void {
  for (const [k, v] of Object.entries({ C: d.C, wteOff: d.wteOff, wpeOff: d.wpeOff }))
    if (v % n !== 0) throw new Error(`${what} needs ${k} a multiple of ${n}, got ${v}`);
}

/**
 * out (B,T,C) = wte[inp] + wpe[t]; wte, wpe in `params` at the given offsets (C and they multiples of 4). With a
 * window, only the tokens whose ids lie in it (one dispatch per window writes every row).
 */
export function encoderForward(out: GPUBuffer, inp: GPUBuffer, params_: GPUBuffer, d: EncoderDims): DispatchSpec {
  chunked(d, 4, 'encoder_forward');
  return encoder.dispatch({
    entry: 'encoder_forward',
    buffers: { out4: out, inp, params4: params_, wpe4: params_ },
    windows: { params4: wteWindow(d, 4), wpe4: wpeWindow(d, 4) },
    params: params(d),
    grid: (s) => grid1((rows(s) * d.C) / 4, 256),
  });
}

/** out (B,T,C) halves = wte[inp] + wpe[t] from the half weight copy `wcopy` (C and the offsets multiples of 8). */
export function encoderForwardF16(out: GPUBuffer, inp: GPUBuffer, wcopy: GPUBuffer, d: EncoderDims): DispatchSpec {
  chunked(d, 8, 'encoder_forward_f16');
  return encoder.dispatch({
    entry: 'encoder_forward_f16',
    buffers: { out_h8: out, inp, wcopy_h8: wcopy, wpe_h8: wcopy },
    windows: { wcopy_h8: wteWindow(d, 2), wpe_h8: wpeWindow(d, 2) },
    params: params(d),
    grid: (s) => grid1((rows(s) * d.C) / 8, 256),
  });
}

/**
 * dwte, dwpe (in `grads` at the offsets) from dout (B,T,C): gather passes, no atomics; dwte one pass per vocabulary
 * window (default: one, all of V), each binding its rows of grads.
 */
export function encoderBackward(
  grads: GPUBuffer,
  dout: GPUBuffer,
  inp: GPUBuffer,
  d: EncoderDims & { accumulateWte?: boolean; accumulateWpe?: boolean; windows?: Array<[number, number]> },
): DispatchSpec[] {
  const wins = d.windows ?? [[0, d.V]];
  return [
    ...wins.map((w) => {
      const dw = { ...d, window: w };
      return encoder.dispatch({
        entry: 'encoder_backward_wte',
        buffers: { grads, inp, dout },
        windows: { grads: wteWindow(dw, 4) },
        params: params(dw, d.accumulateWte),
        grid: () => [Math.ceil(d.C / 64), Math.ceil((w[1] - w[0]) / WTE_ROWS), 1],
      });
    }),
    encoder.dispatch({
      entry: 'encoder_backward_wpe',
      buffers: { grads, dout },
      windows: { grads: wpeWindow(d, 4) },
      params: params(d, d.accumulateWpe),
      grid: () => grid1(d.maxT * d.C, 256),
    }),
  ];
}
