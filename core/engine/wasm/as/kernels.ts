// The training step's kernels in AssemblyScript on 128-bit SIMD (f32x4): the Wasm twins of
// core/model/ops.ts. `npm run build:wasm` compiles this file, the entry (its exports are the
// module's; the kernels are in the files beside it). Not TypeScript for tsc: v128, load<T>.
//
// Conventions: every tensor argument is a byte address in the module's one memory; every kernel
// takes a half-open range [lo, hi) of its partition dimension last, so a thread pool splits the work
// by rows (or columns, or heads) with no two threads writing the same element. Each output element
// is computed by the same sequence of f32 operations whatever the range, so results are the same
// bits for any thread count. Plain SIMD only: mul then add (no relaxed FMA), no reassociation
// that depends on the split.

// The kernels by area; the helpers they share are in simd.ts.
export { gemm, packRows, packColumns, columnSum } from './matmul';
export {
  encoderForward,
  encoderBackward,
  layernormForward,
  layernormBackwardInput,
  layernormBackwardParams,
} from './layers';
export { attentionForward, attentionBackward } from './attention';
export {
  geluForward,
  geluBackward,
  residualForward,
  crossEntropyForward,
  crossEntropyBackward,
  adamw,
  sumSquares,
  subtract,
} from './pointwise';

export function heapBase(): usize {
  return __heap_base;
}
