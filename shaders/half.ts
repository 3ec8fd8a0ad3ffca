// half.wgsl's dispatches: the f16-storage kernels of --precision f16 that have no f32 file to be a
// form of (the GELU backward from halves, Δ and the weight copy as halves).
// Two storage forms of one source: 'packed' (pack2x16float, core WGSL, every adapter) and 'native'
// (`shader-f16`: vec2<f16>, the same bytes).

import * as f16 from '../core/model/ops-f16.ts';
import { type Defines, type DispatchSpec, defineKernel, flatPiece, grid1, rows } from './kernel.ts';
import src from './half.wgsl?raw';

export const half = defineKernel('half', src, {
  gelu_backward_f16: f16.geluBackwardF16,
  pseudo_gradient_f16: f16.pseudoGradientF16,
  pack_f16: f16.packF16,
});

export const HALF_FORMS = ['packed', 'native'] as const;
export type HalfForm = (typeof HALF_FORMS)[number];

/** The defines of each form: the word type and its two conversions (native also enables f16). */
export const HALF_DEFINES: Record<HalfForm, Defines> = {
  packed: { H2: 'u32', H2_LOAD: 'unpack2x16float', H2_STORE: 'pack2x16float' },
  native: { H2: 'vec2h', H2_LOAD: 'vec2f', H2_STORE: 'vec2h', ENABLE: 'f16' },
};

/** The form a device uses: native where it has `shader-f16`, packed elsewhere. */
export const halfForm = (features: { has(f: string): boolean }): HalfForm =>
  features.has('shader-f16') ? 'native' : 'packed';

const evenC = (C: number) => {
  if (C % 2 !== 0) throw new Error(`f16 storage needs an even channel count, got C = ${C}`);
};

/** In place: grad (f32) = gelu'(inp)·grad, inp the fc pre-activation as halves; width even. */
export function geluBackwardF16(grad: GPUBuffer, inp: GPUBuffer, d: { width: number; form: HalfForm }): DispatchSpec {
  evenC(d.width);
  return half.dispatch({
    entry: 'gelu_backward_f16',
    defines: HALF_DEFINES[d.form],
    buffers: { d: grad, inp_h: inp },
    params: (s) => ({ N: rows(s) * d.width }),
    grid: (s) => grid1((rows(s) * d.width) / 2, 256),
  });
}

/** delta (N halves) = start − theta, from the f32 masters. */
export function pseudoGradientF16(
  delta: GPUBuffer,
  start: GPUBuffer,
  theta: GPUBuffer,
  d: { N: number; form: HalfForm; piece?: [number, number] },
): DispatchSpec {
  const { n, windows } = flatPiece(d.N, d.piece);
  return half.dispatch({
    entry: 'pseudo_gradient_f16',
    defines: HALF_DEFINES[d.form],
    buffers: { out_h: delta, in1_f: start, in2_f: theta },
    ...windows({ out_h: 2, in1_f: 4, in2_f: 4 }),
    params: () => ({ N: n }),
    grid: () => grid1(Math.ceil(n / 2), 256),
  });
}

/** out (N halves) = inp (f32): the matmuls' weight copy after setParams; with `piece`, its elements [lo, hi). */
export function packF16(
  out: GPUBuffer,
  inp: GPUBuffer,
  d: { N: number; form: HalfForm; piece?: [number, number] },
): DispatchSpec {
  const { n, windows } = flatPiece(d.N, d.piece);
  return half.dispatch({
    entry: 'pack_f16',
    defines: HALF_DEFINES[d.form],
    buffers: { out_h: out, in1_f: inp },
    ...windows({ out_h: 2, in1_f: 4 }),
    params: () => ({ N: n }),
    grid: () => grid1(Math.ceil(n / 2), 256),
  });
}
