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
  // one rung above the CPU ladder (817,024 parameters, 23.6× tiny): by name (`--rungs ...,L6-C104`)
  { name: 'L6-C104', config: shape(6, 4, 104) },
  { name: 'small-T32', config: shape(4, 6, 192) },
  { name: 'base-T32', config: shape(6, 6, 384) },
];
/** Rungs of the default (CPU) ladder. */
export const CPU_RUNGS = 4;

const badRungs = (m: string) => Object.assign(new Error(m), { code: 'E_BAD_REQUEST' });

/** Picks the rungs: a count from the start of RUNGS, or names (at least 2); undefined: the first `dflt`. */
export function pickRungs(r: number | string[] | undefined, dflt = CPU_RUNGS): RungSpec[] {
  if (r === undefined) return RUNGS.slice(0, dflt);
  const names = RUNGS.map((x) => x.name).join(', ');
  if (typeof r === 'number') {
    if (!Number.isInteger(r) || r < 2 || r > RUNGS.length)
      throw badRungs(`--rungs must be 2..${RUNGS.length} or rung names (${names}), got ${r}`);
    return RUNGS.slice(0, r);
  }
  const out = r.map((n) => RUNGS.find((x) => x.name === n));
  const bad = r.filter((_, i) => !out[i]);
  if (bad.length || out.length < 2)
    throw badRungs(
      `--rungs: ${bad.length ? `unknown rung ${bad.join(', ')}` : 'at least 2 rungs'}; the ladder has ${names}`,
    );
  return out as RungSpec[];
}

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
