// residual.wgsl's dispatch: out = inp1 + alpha·inp2; the engine uses it for the pseudo-gradient.

import { pseudoGradient as pseudoGradientCpu, residualForward as residualForwardCpu } from '../core/model/ops.ts';
import { type DispatchSpec, defineKernel, flatPiece, grid1 } from './kernel.ts';
import src from './residual.wgsl?raw';

export const residual = defineKernel('residual', src, { residual_forward: [residualForwardCpu, pseudoGradientCpu] });

/** delta = start − theta over N (residual_forward with alpha = −1); with `piece`, its elements [lo, hi) only. */
export function pseudoGradient(
  delta: GPUBuffer,
  start: GPUBuffer,
  theta: GPUBuffer,
  d: { N: number; piece?: [number, number] },
): DispatchSpec {
  const { n, windows } = flatPiece(d.N, d.piece);
  return residual.dispatch({
    entry: 'residual_forward',
    buffers: { out: delta, inp1: start, inp2: theta },
    ...windows({ out: 4, inp1: 4, inp2: 4 }),
    params: () => ({ N: n, alpha: -1 }),
    grid: () => grid1(n, 256),
  });
}
