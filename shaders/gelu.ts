// gelu.wgsl's dispatches: GELU over B·T·width values (width = channels per token).

import { geluBackward as geluBackwardCpu, geluForward as geluForwardCpu } from '../core/model/ops.ts';
import { type DispatchSpec, acc, defineKernel, grid1, rows } from './kernel.ts';
import src from './gelu.wgsl?raw';

export const gelu = defineKernel('gelu', src, { gelu_forward: geluForwardCpu, gelu_backward: geluBackwardCpu });

export function geluForward(out: GPUBuffer, inp: GPUBuffer, d: { width: number }): DispatchSpec {
  return gelu.dispatch({
    entry: 'gelu_forward',
    buffers: { out, inp },
    params: (s) => ({ N: rows(s) * d.width }),
    grid: (s) => grid1(rows(s) * d.width, 256),
  });
}

/** dinp (+)= gelu'(inp) · dout (dinp binds to the shader's `out`). */
export function geluBackward(
  dinp: GPUBuffer,
  inp: GPUBuffer,
  dout: GPUBuffer,
  d: { width: number; accumulate?: boolean },
): DispatchSpec {
  return gelu.dispatch({
    entry: 'gelu_backward',
    buffers: { out: dinp, inp, dout },
    params: (s) => ({ N: rows(s) * d.width, accumulate: acc(d.accumulate) }),
    grid: (s) => grid1(rows(s) * d.width, 256),
  });
}
