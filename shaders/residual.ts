// residual.wgsl's dispatch: out = inp1 + alpha·inp2; the engine uses it for the pseudo-gradient.

import { pseudoGradient as pseudoGradientCpu, residualForward as residualForwardCpu } from '../core/model/ops.ts';
import { type DispatchSpec, defineKernel, grid1, pieceWindow } from './kernel.ts';
import src from './residual.wgsl?raw';

export const residual = defineKernel('residual', src, { residual_forward: [residualForwardCpu, pseudoGradientCpu] });

/** delta = start − theta over N (residual_forward with alpha = −1); with `piece`, its elements [lo, hi) only. */
export function pseudoGradient(
  delta: GPUBuffer,
  start: GPUBuffer,
  theta: GPUBuffer,
  d: { N: number; piece?: [number, number] },
): DispatchSpec {
  const piece = d.piece ?? [0, d.N];
  const N = piece[1] - piece[0];
  const w = pieceWindow(piece, 4);
  return residual.dispatch({
    entry: 'residual_forward',
    buffers: { out: delta, inp1: start, inp2: theta },
    ...(d.piece ? { windows: { out: w, inp1: w, inp2: w } } : {}),
    params: () => ({ N, alpha: -1 }),
    grid: () => grid1(N, 256),
  });
}
