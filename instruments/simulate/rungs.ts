// The scaling ladder's model shapes (sequence length 32 throughout): `atoll simulate --preset scaling`
// runs them as rungs, and `--model <rung>` runs the compare preset on one of them.

import { type GPTConfig, PRESETS } from '../../core/model/config.ts';

/** A rung of the ladder: a model shape (sequence length 32 throughout). */
export interface RungSpec {
  name: string;
  config: GPTConfig;
}

const shape = (nLayer: number, nHead: number, nEmbd: number): GPTConfig => ({
  vocabSize: 256,
  blockSize: 32,
  nLayer,
  nHead,
  nEmbd,
});

/**
 * The ladder: the CPU rungs (`tiny` to 8.7× its parameters) and, for a real GPU (`--engine webgpu`),
 * the shapes of `small` and `base` at the same sequence length.
 */
export const RUNGS: RungSpec[] = [
  { name: 'tiny', config: shape(2, 2, 32) },
  { name: 'L2-C48', config: shape(2, 2, 48) },
  { name: 'L3-C64', config: shape(3, 4, 64) },
  { name: 'L4-C76', config: shape(4, 4, 76) },
  { name: 'small-T32', config: shape(4, 6, 192) },
  { name: 'base-T32', config: shape(6, 6, 384) },
];
/** Rungs of the default (CPU) ladder. */
export const CPU_RUNGS = 4;

/** A model named by `simulate --model`: a preset's shape, else a rung's (undefined: neither). */
export function simModelConfig(name: string): { config: GPTConfig; preset: boolean } | undefined {
  if (name in PRESETS) return { config: PRESETS[name as keyof typeof PRESETS], preset: true };
  const r = RUNGS.find((x) => x.name === name);
  return r && { config: r.config, preset: false };
}

/** Every name `simulate --model` takes. */
/** The simulator's models: byte-level (its corpora and warm start are bytes), so no BPE preset. */
const BYTE_PRESETS = Object.entries(PRESETS)
  .filter(([, c]) => c.vocabSize === 256)
  .map(([n]) => n);
export const SIM_MODEL_NAMES = [...BYTE_PRESETS, ...RUNGS.map((r) => r.name).filter((n) => !(n in PRESETS))];
