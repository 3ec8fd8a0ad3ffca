// The scaling ladder's model shapes (sequence length 32 throughout): `atoll simulate --preset scaling`
// runs them as rungs, and `--model <rung>` runs the compare preset on one of them.

import { type GPTConfig, PRESETS } from '../../core/model/config.ts';
import { type Result, err, ok } from '../../core/result.ts';

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

/** The ladder presets' shared options, from the CLI's raw values (each checked, E_BAD_REQUEST). */
export interface LadderFlags<K extends string, E extends string> {
  json: boolean;
  rungs?: number | string[];
  tokensPerParam?: number;
  ints: Partial<Record<K, number>>;
  engine?: E;
  data?: string;
  out?: string;
}

/**
 * --rungs (a count from the start of RUNGS, or names; checked against `dflt`'s ladder), --tokens-per-param
 * in (0, 1000], the non-negative integers `ints`, --engine one of `engines`, --data and --out.
 */
export function ladderFlags<K extends string, E extends string>(
  raw: Record<string, unknown>,
  ints: readonly K[],
  engines: readonly E[],
  dflt = CPU_RUNGS,
): Result<LadderFlags<K, E>> {
  const o: LadderFlags<K, E> = { json: raw.json === true || raw.json === 'true', ints: {} };
  if (raw.rungs !== undefined) {
    const s = String(raw.rungs);
    o.rungs = /^\d+$/.test(s)
      ? Number(s)
      : s
          .split(',')
          .map((x) => x.trim())
          .filter(Boolean);
    try {
      pickRungs(o.rungs, dflt);
    } catch (e) {
      return err('E_BAD_REQUEST', (e as Error).message);
    }
  }
  if (raw.tokensPerParam !== undefined) {
    const t = Number(raw.tokensPerParam);
    if (!(t > 0 && t <= 1000))
      return err('E_BAD_REQUEST', `--tokens-per-param must be in (0, 1000], got '${String(raw.tokensPerParam)}'`);
    o.tokensPerParam = t;
  }
  for (const k of ints) {
    if (raw[k] === undefined) continue;
    const n = Number(raw[k]);
    const flag = `--${k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
    if (!Number.isInteger(n) || n < 0)
      return err('E_BAD_REQUEST', `${flag} must be a non-negative integer, got '${String(raw[k])}'`);
    o.ints[k] = n;
  }
  if (raw.engine !== undefined) {
    if (!engines.includes(String(raw.engine) as E))
      return err('E_BAD_REQUEST', `--engine must be ${engines.join('|')}`);
    o.engine = raw.engine as E;
  }
  if (raw.data !== undefined) o.data = String(raw.data);
  if (raw.out !== undefined) o.out = String(raw.out);
  return ok(o);
}
