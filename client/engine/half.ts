// The f16-storage kernels of shaders/half.wgsl in their two storage forms (see that file):
// 'packed' (core WGSL, every adapter) and 'native' (`shader-f16`). Both use the same bytes, so a
// buffer written by one reads the same in the other. No node: imports.

import halfSrc from '../../shaders/half.wgsl?raw';
import { withPrelude } from './webgpu-kernels.ts';

export const HALF_FORMS = ['packed', 'native'] as const;
export type HalfForm = (typeof HALF_FORMS)[number];

/** Defines of each form: the word type and its two conversions. */
const FORM_DEFINES: Record<HalfForm, Record<string, string>> = {
  packed: { H2: 'u32', H2_LOAD: 'unpack2x16float', H2_STORE: 'pack2x16float' },
  native: { H2: 'vec2h', H2_LOAD: 'vec2f', H2_STORE: 'vec2h' },
};

/** The form this device uses: native where it has `shader-f16`, packed elsewhere. */
export const halfForm = (device: GPUDevice): HalfForm => (device.features.has('shader-f16') ? 'native' : 'packed');

/** half.wgsl as the device sees it in `form` (with `enable f16;` first for native). */
export function halfSource(form: HalfForm, subgroups = false): string {
  const src = withPrelude(halfSrc, FORM_DEFINES[form], subgroups);
  return form === 'native' ? `enable f16;\n${src}` : src;
}
