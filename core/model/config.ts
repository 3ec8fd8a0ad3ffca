// GPT configuration, named presets, and the flat parameter layout.
//
// Every parameter lives in ONE Float32Array. The order below is the format of
// deltas, checkpoints and codec frames, so changing it is a protocol change.

export interface GPTConfig {
  vocabSize: number; // V: the tokenizer's ids (byte 256, gpt2 50,257)
  blockSize: number; // T: max sequence length (size of the position table)
  nLayer: number; // L
  nHead: number; // NH
  nEmbd: number; // C, divisible by nHead
}

export type PresetName = 'tiny' | 'small' | 'base' | 'gpt2-mini' | 'gpt2';

/**
 * Named presets. `small` is the browser default (~1.9M params), `base` ~11M. `gpt2-mini` is GPT-2's
 * vocabulary and layout (the gpt2 tokenizer) at a size these machines train: ~3.4M params, 3.2M of
 * them the 50,257-row embedding that is also the head. `gpt2` is GPT-2 small itself (124M, transformers'
 * `gpt2`): its shapes, so a transformers GPT-2 folder loads into it (core/hf.ts) tensor for tensor.
 */
export const PRESETS: Record<PresetName, GPTConfig> = {
  tiny: { vocabSize: 256, blockSize: 32, nLayer: 2, nHead: 2, nEmbd: 32 },
  small: { vocabSize: 256, blockSize: 128, nLayer: 4, nHead: 6, nEmbd: 192 },
  base: { vocabSize: 256, blockSize: 256, nLayer: 6, nHead: 6, nEmbd: 384 },
  'gpt2-mini': { vocabSize: 50257, blockSize: 256, nLayer: 4, nHead: 4, nEmbd: 64 },
  gpt2: { vocabSize: 50257, blockSize: 1024, nLayer: 12, nHead: 12, nEmbd: 768 },
};

/** Default micro-batch size per preset (sequences per inner step). */
export const DEFAULT_BATCH: Record<PresetName, number> = { tiny: 8, small: 8, base: 8, 'gpt2-mini': 4, gpt2: 1 };

export function getPreset(name: string): GPTConfig {
  const p = (PRESETS as Record<string, GPTConfig | undefined>)[name];
  if (!p) throw new Error(`unknown preset '${name}' (expected one of ${Object.keys(PRESETS).join(', ')})`);
  return { ...p };
}

export function validateConfig(c: GPTConfig): void {
  for (const k of ['vocabSize', 'blockSize', 'nLayer', 'nHead', 'nEmbd'] as const) {
    if (!Number.isInteger(c[k]) || c[k] <= 0) throw new Error(`config.${k} must be a positive integer, got ${c[k]}`);
  }
  if (c.nEmbd % c.nHead !== 0) throw new Error(`nEmbd (${c.nEmbd}) must be divisible by nHead (${c.nHead})`);
}

/** One named tensor inside the flat parameter array. */
export interface TensorSpec {
  name: string;
  shape: number[];
  offset: number; // in elements
  size: number; // in elements
  /** Matrices (2-D weights incl. embeddings) get weight decay; gains and biases do not. */
  decay: boolean;
}

export interface ParamLayout {
  tensors: TensorSpec[];
  byName: Record<string, TensorSpec>;
  total: number;
}

/** The tensors stored once per layer, shape (L, ...), in paramLayout's order; the rest are single. */
export const PER_LAYER_TENSORS: ReadonlySet<string> = new Set([
  'ln1w',
  'ln1b',
  'qkvw',
  'qkvb',
  'attprojw',
  'attprojb',
  'ln2w',
  'ln2b',
  'fcw',
  'fcb',
  'fcprojw',
  'fcprojb',
]);

/**
 * The documented order (llm.c's): each kind of per-layer tensor is stored for all
 * L layers contiguously, shape (L, ...).
 *   wte (V,C) wpe (T,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
 *   attprojw (L,C,C) attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C) fcb (L,4C)
 *   fcprojw (L,C,4C) fcprojb (L,C) lnfw (C) lnfb (C)
 * The LM head is tied to wte.
 */
export function paramLayout(c: GPTConfig): ParamLayout {
  const { vocabSize: V, blockSize: T, nLayer: L, nEmbd: C } = c;
  const specs: Array<[string, number[], boolean]> = [
    ['wte', [V, C], true],
    ['wpe', [T, C], true],
    ['ln1w', [L, C], false],
    ['ln1b', [L, C], false],
    ['qkvw', [L, 3 * C, C], true],
    ['qkvb', [L, 3 * C], false],
    ['attprojw', [L, C, C], true],
    ['attprojb', [L, C], false],
    ['ln2w', [L, C], false],
    ['ln2b', [L, C], false],
    ['fcw', [L, 4 * C, C], true],
    ['fcb', [L, 4 * C], false],
    ['fcprojw', [L, C, 4 * C], true],
    ['fcprojb', [L, C], false],
    ['lnfw', [C], false],
    ['lnfb', [C], false],
  ];
  const tensors: TensorSpec[] = [];
  const byName: Record<string, TensorSpec> = {};
  let offset = 0;
  for (const [name, shape, decay] of specs) {
    const size = shape.reduce((a, b) => a * b, 1);
    const t = { name, shape, offset, size, decay };
    tensors.push(t);
    byName[name] = t;
    offset += size;
  }
  return { tensors, byName, total: offset };
}

export function numParams(c: GPTConfig): number {
  return paramLayout(c).total;
}

/** Named views into a flat parameter (or gradient, or moment) array. */
export type ParamViews<A extends Float32Array | Float64Array = Float32Array> = Record<string, A>;

export function paramViews<A extends Float32Array | Float64Array>(c: GPTConfig, flat: A): ParamViews<A> {
  const layout = paramLayout(c);
  if (flat.length !== layout.total)
    throw new Error(`parameter array has ${flat.length} elements, the config needs ${layout.total}`);
  const views: Record<string, A> = {};
  for (const t of layout.tensors) views[t.name] = flat.subarray(t.offset, t.offset + t.size) as A;
  return views;
}

/**
 * Training FLOPs per token (PaLM appendix B, as nanoGPT's estimate_mfu):
 * 6N for the matmuls of forward+backward plus 12·L·H·Q·T for attention.
 * N excludes the position table (it does no matmul work).
 */
export function flopsPerToken(c: GPTConfig, T = c.blockSize): number {
  const N = numParams(c) - c.blockSize * c.nEmbd;
  const Q = c.nEmbd / c.nHead;
  return 6 * N + 12 * c.nLayer * c.nHead * Q * T;
}

/** Model FLOPs utilisation for a measured token rate against a peak in FLOP/s. */
export function mfu(c: GPTConfig, tokensPerSec: number, peakFlops: number, T = c.blockSize): number {
  return (flopsPerToken(c, T) * tokensPerSec) / peakFlops;
}
