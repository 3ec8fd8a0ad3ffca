// crossentropy.wgsl's dispatches: fused softmax + cross-entropy, and the mean loss into the loss ring.

import {
  meanLoss as meanLossCpu,
  softmaxCrossEntropyBackward as ceBackwardCpu,
  softmaxCrossEntropyForward as ceForwardCpu,
} from '../core/model/ops.ts';
import { type DispatchSpec, acc, defineKernel, grid1, rows } from './kernel.ts';
import src from './crossentropy.wgsl?raw';

export const crossentropy = defineKernel('crossentropy', src, {
  softmax_crossentropy_forward: ceForwardCpu,
  softmax_crossentropy_backward: ceBackwardCpu,
  mean_loss: meanLossCpu,
});

export function softmaxCrossEntropyForward(
  losses: GPUBuffer,
  probs: GPUBuffer,
  logits: GPUBuffer,
  targets: GPUBuffer,
  d: { V: number },
): DispatchSpec {
  return crossentropy.dispatch({
    entry: 'softmax_crossentropy_forward',
    buffers: { losses, probs, logits, targets },
    params: (s) => ({ N: rows(s), V: d.V }),
    grid: (s) => grid1(rows(s), 1),
  });
}

/** dlogits (+)= (probs − onehot)·dloss with dloss = 1/(B·T), the mean loss. */
export function softmaxCrossEntropyBackward(
  dlogits: GPUBuffer,
  probs: GPUBuffer,
  targets: GPUBuffer,
  d: { V: number; accumulate?: boolean },
): DispatchSpec {
  return crossentropy.dispatch({
    entry: 'softmax_crossentropy_backward',
    buffers: { dlogits, probs_in: probs, targets },
    params: (s) => ({ N: rows(s), V: d.V, accumulate: acc(d.accumulate), dloss: 1 / rows(s) }),
    grid: (s) => grid1(rows(s) * d.V, 256),
  });
}

/** ring[step.lossSlot] = mean of the B·T losses. */
export function meanLoss(ring: GPUBuffer, losses: GPUBuffer): DispatchSpec {
  return crossentropy.dispatch({
    entry: 'mean_loss',
    buffers: { ring, losses_in: losses },
    params: (s) => ({ N: rows(s) }),
    grid: () => [1, 1, 1],
  });
}
