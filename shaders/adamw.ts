// adamw.wgsl's dispatch: one AdamW step over the flat parameters, weight decay per tensor range.

import { adamwUpdate as adamwUpdateCpu } from '../core/model/ops.ts';
import { adamwUpdateF16 } from '../core/model/ops-f16.ts';
import { type DispatchSpec, defineKernel, flatPiece, grid1 } from './kernel.ts';
import src from './adamw.wgsl?raw';

export const adamw = defineKernel('adamw', src, { adamw_update: adamwUpdateCpu, adamw_update_f16: adamwUpdateF16 });

/** Merged [start, end, decay] ranges of the layout (neighbours with the same decay flag join). */
export function decayRanges(
  tensors: Array<{ offset: number; size: number; decay: boolean }>,
): Array<[number, number, boolean]> {
  const out: Array<[number, number, boolean]> = [];
  for (const t of tensors) {
    const last = out[out.length - 1];
    if (last && last[2] === t.decay && last[1] === t.offset) last[1] = t.offset + t.size;
    else out.push([t.offset, t.offset + t.size, t.decay]);
  }
  return out;
}

const PER_THREAD = 4; // adamw.wgsl
const MAX_RANGES = adamw.params.fields.get('ranges')!.offsets.length / 4; // array<vec4<u32>, 16>

/** The decay ranges inside [lo, hi), relative to lo. */
function rangesIn(ranges: Array<[number, number, boolean]>, lo: number, hi: number): Array<[number, number, boolean]> {
  return ranges
    .filter(([a, b]) => b > lo && a < hi)
    .map(([a, b, decay]): [number, number, boolean] => [Math.max(a, lo) - lo, Math.min(b, hi) - lo, decay]);
}

/**
 * One AdamW step over all N parameters; weight decay only inside the `decay` ranges. With `copy`
 * (--precision f16) the new weights also go into the matmuls' weight copy as halves. With `piece`, only the
 * elements [lo, hi) (lo a multiple of PIECE_QUANTUM): each buffer bound as that window, the step elementwise the
 * same.
 */
export function adamwUpdate(
  params: GPUBuffer,
  grads: GPUBuffer,
  m: GPUBuffer,
  v: GPUBuffer,
  clip: GPUBuffer,
  d: { N: number; ranges: Array<[number, number, boolean]>; copy?: GPUBuffer; piece?: [number, number] },
): DispatchSpec {
  const { n, windows } = flatPiece(d.N, d.piece);
  const ranges = d.piece ? rangesIn(d.ranges, ...d.piece) : d.ranges;
  if (ranges.length > MAX_RANGES)
    throw new Error(`adamw_update takes at most ${MAX_RANGES} decay ranges, got ${ranges.length}`);
  const table: number[] = [];
  for (let i = 0; i < MAX_RANGES; i++) {
    const r = ranges[i];
    table.push(r ? r[0] : 0, r ? r[1] : 0, r?.[2] ? 1 : 0, 0);
  }
  return adamw.dispatch({
    entry: d.copy ? 'adamw_update_f16' : 'adamw_update',
    buffers: { params, grads, m, v, clip, ...(d.copy ? { copy_h: d.copy } : {}) },
    ...windows({ params: 4, grads: 4, m: 4, v: 4, ...(d.copy ? { copy_h: 2 as const } : {}) }),
    params: () => ({ N: n, num_ranges: ranges.length, ranges: table }),
    grid: () => grid1(Math.ceil(n / PER_THREAD), 256),
  });
}
