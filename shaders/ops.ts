// Every kernel module, for the engine (`import * as op from 'shaders/ops.ts'`) and the checks
// that walk all kernels. A kernel is <op>.wgsl, <op>.ts beside it (its dispatches, Params and
// bindings read from the WGSL, its CPU twins named) and its line here.

import { adamw } from './adamw.ts';
import { attention } from './attention.ts';
import { crossentropy } from './crossentropy.ts';
import { encoder } from './encoder.ts';
import { gelu } from './gelu.ts';
import { gradnorm } from './gradnorm.ts';
import { half } from './half.ts';
import { head } from './head.ts';
import type { Kernel } from './kernel.ts';
import { layernorm } from './layernorm.ts';
import { matmul } from './matmul.ts';
import { residual } from './residual.ts';

export * from './adamw.ts';
export * from './attention.ts';
export * from './crossentropy.ts';
export * from './encoder.ts';
export * from './gelu.ts';
export * from './gradnorm.ts';
export * from './half.ts';
export * from './head.ts';
export * from './layernorm.ts';
export * from './matmul.ts';
export * from './residual.ts';

export const KERNELS: readonly Kernel[] = [
  adamw,
  attention,
  crossentropy,
  encoder,
  gelu,
  gradnorm,
  half,
  head,
  layernorm,
  matmul,
  residual,
];

/** Most storage buffers any entry point binds (browsers guarantee 8). */
export const MAX_STORAGE_BINDINGS = Math.max(
  ...KERNELS.flatMap((k) => [...k.entries.values()].map((e) => e.bindings.length)),
);
