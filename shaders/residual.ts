// residual.wgsl's dispatch: out = inp1 + alpha·inp2; the engine uses it for the pseudo-gradient.

import { pseudoGradient as pseudoGradientCpu, residualForward as residualForwardCpu } from '../core/model/ops.ts';
import { type DispatchSpec, defineKernel, grid1 } from './kernel.ts';
import src from './residual.wgsl?raw';

export const residual = defineKernel('residual', src, { residual_forward: [residualForwardCpu, pseudoGradientCpu] });

/** delta = start − theta over N (residual_forward with alpha = −1). */
export function pseudoGradient(delta: GPUBuffer, start: GPUBuffer, theta: GPUBuffer, d: { N: number }): DispatchSpec {
  return residual.dispatch({
    entry: 'residual_forward',
    buffers: { out: delta, inp1: start, inp2: theta },
    params: () => ({ N: d.N, alpha: -1 }),
    grid: () => grid1(d.N, 256),
  });
}
