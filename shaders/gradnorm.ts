// gradnorm.wgsl's dispatches: the global gradient norm and the clip scale, two deterministic passes.

import { clipScale, gradNormSquared } from '../core/model/ops.ts';
import { type DispatchSpec, defineKernel, pieceWindow } from './kernel.ts';
import src from './gradnorm.wgsl?raw';

export const gradnorm = defineKernel('gradnorm', src, {
  grad_norm_partial: gradNormSquared,
  grad_norm_partial_piece: gradNormSquared,
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

/** The carry buffer's elements of grad_norm_partial_piece: a running sum per thread. */
export const gradNormCarry = (N: number) => gradNormPartials(N) * 256;

/**
 * clip = [Σ g², clipScale(Σ g², step.maxNorm)] over grads (N). With `pieces` (element ranges, each start a multiple
 * of PIECE_QUANTUM) and a `carry` buffer (gradNormCarry elements), the partial sums one dispatch per piece, each
 * binding its piece of grads: the same sums, bit for bit.
 */
export function gradNorm(
  clip: GPUBuffer,
  partials: GPUBuffer,
  grads: GPUBuffer,
  d: { N: number; pieces?: Array<[number, number]>; carry?: GPUBuffer },
): DispatchSpec[] {
  const P = gradNormPartials(d.N);
  const params = () => ({ N: d.N, num_partials: P });
  const pieces = d.pieces ?? [[0, d.N]];
  if (pieces.length > 1 && !d.carry) throw new Error('gradNorm in pieces needs a carry buffer');
  const partial =
    pieces.length > 1
      ? pieces.map((pc, j) =>
          gradnorm.dispatch({
            entry: 'grad_norm_partial_piece',
            buffers: { partials, grads, carry: d.carry! },
            windows: { grads: pieceWindow(pc, 4) },
            params: () => ({
              ...params(),
              lo: pc[0] / 4,
              hi: Math.ceil(pc[1] / 4),
              flags: (j === 0 ? 1 : 0) | (j === pieces.length - 1 ? 2 : 0),
            }),
            grid: () => [P, 1, 1],
          }),
        )
      : [
          gradnorm.dispatch({
            entry: 'grad_norm_partial',
            buffers: { partials, grads },
            params,
            grid: () => [P, 1, 1],
          }),
        ];
  return [
    ...partial,
    gradnorm.dispatch({
      entry: 'grad_norm_finalize',
      buffers: { clip, partials_in: partials },
      params,
      grid: () => [1, 1, 1],
    }),
  ];
}
