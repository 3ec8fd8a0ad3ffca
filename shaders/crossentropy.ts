// crossentropy.wgsl's dispatch: the mean loss into the loss ring (the per-row losses come from the
// chunked head, head.wgsl).

import { meanLoss as meanLossCpu } from '../core/model/ops.ts';
import { type DispatchSpec, defineKernel, rows } from './kernel.ts';
import src from './crossentropy.wgsl?raw';

export const crossentropy = defineKernel('crossentropy', src, { mean_loss: meanLossCpu });

/** ring[step.lossSlot] = mean of the B·T losses. */
export function meanLoss(ring: GPUBuffer, losses: GPUBuffer): DispatchSpec {
  return crossentropy.dispatch({
    entry: 'mean_loss',
    buffers: { ring, losses_in: losses },
    params: (s) => ({ N: rows(s) }),
    grid: () => [1, 1, 1],
  });
}
