// crossentropy.wgsl's dispatch: the mean loss into the loss ring (the per-row losses come from the
// chunked head, head.wgsl).

import { meanLoss as meanLossCpu } from '../core/model/ops.ts';
import { type DispatchSpec, acc, defineKernel, lossRows, rows } from './kernel.ts';
import src from './crossentropy.wgsl?raw';

export const crossentropy = defineKernel('crossentropy', src, { mean_loss: meanLossCpu });

/**
 * ring[step.lossSlot] (+)= Σ of the B·T losses / lossRows: their mean, or (a micro-batch's, `accumulate`) its
 * share of the whole batch's mean.
 */
export function meanLoss(ring: GPUBuffer, losses: GPUBuffer, d: { accumulate?: boolean } = {}): DispatchSpec {
  return crossentropy.dispatch({
    entry: 'mean_loss',
    buffers: { ring, losses_in: losses },
    params: (s) => ({ N: rows(s), accumulate: acc(d.accumulate), scale: 1 / lossRows(s) }),
    grid: () => [1, 1, 1],
  });
}
