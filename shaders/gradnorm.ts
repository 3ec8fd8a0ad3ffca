// gradnorm.wgsl's dispatches: the global gradient norm and the clip scale, two deterministic passes.

import { clipScale, gradNormSquared } from '../core/model/ops.ts';
import { type DispatchSpec, defineKernel } from './kernel.ts';
import src from './gradnorm.wgsl?raw';

export const gradnorm = defineKernel('gradnorm', src, {
  grad_norm_partial: gradNormSquared,
  grad_norm_finalize: [gradNormSquared, clipScale],
});

/**
 * Partial sums of g² per workgroup: enough to fill a GPU, few enough for one finalising
 * workgroup; 64 elements (16 vec4s) per thread, as each workgroup's reduction costs barriers (dear on
 * a CPU adapter: 16 per thread took 10 % of a SwiftShader step).
 */
export function gradNormPartials(N: number): number {
  return Math.min(1024, Math.max(1, Math.ceil(N / (256 * 64))));
}

/** clip = [Σ g², clipScale(Σ g², step.maxNorm)] over grads (N). */
export function gradNorm(clip: GPUBuffer, partials: GPUBuffer, grads: GPUBuffer, d: { N: number }): DispatchSpec[] {
  const P = gradNormPartials(d.N);
  const params = () => ({ N: d.N, num_partials: P });
  return [
    gradnorm.dispatch({ entry: 'grad_norm_partial', buffers: { partials, grads }, params, grid: () => [P, 1, 1] }),
    gradnorm.dispatch({
      entry: 'grad_norm_finalize',
      buffers: { clip, partials_in: partials },
      params,
      grid: () => [1, 1, 1],
    }),
  ];
}
