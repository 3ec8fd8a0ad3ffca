// Hugging Face transformers' GPT-2 layout, both ways. Atoll's model is exactly GPT-2 (learned
// positions, pre-LN, tanh GELU, tied head, biases everywhere), so the export only renames and
// reshapes:
//
//   atoll (stacked per layer, weights (out, in))    transformers GPT2LMHeadModel (Conv1D: (in, out))
//   wte (V,C)  wpe (T,C)                            transformer.wte.weight  transformer.wpe.weight
//   ln1w/ln1b (L,C)                                 transformer.h.{l}.ln_1.weight / .bias
//   qkvw (L,3C,C)  qkvb (L,3C)                      transformer.h.{l}.attn.c_attn.weight (C,3C) / .bias
//   attprojw (L,C,C)  attprojb (L,C)                transformer.h.{l}.attn.c_proj.weight (C,C) / .bias
//   ln2w/ln2b (L,C)                                 transformer.h.{l}.ln_2.weight / .bias
//   fcw (L,4C,C)  fcb (L,4C)                        transformer.h.{l}.mlp.c_fc.weight (C,4C) / .bias
//   fcprojw (L,C,4C)  fcprojb (L,C)                 transformer.h.{l}.mlp.c_proj.weight (4C,C) / .bias
//   lnfw/lnfb (C)                                   transformer.ln_f.weight / .bias
//   (tied to wte)                                   lm_head.weight: not stored (tie_word_embeddings)
//
// A byte-level model's tokenizer: token id = UTF-8 byte, as in core/data/tokenizer.ts; a tokenizers
// BPE with the 256 byte symbols of GPT-2's byte-to-unicode map and no merges. A gpt2 model's:
// GPT-2's vocab.json and merges.txt, which the caller passes in (core/hf-tokenizer.ts).

import type { Checkpoint } from './checkpoint.ts';
import { checkpointTokenizer } from './data/tokenizer.ts';
import { type GPTConfig, paramLayout } from './model/config.ts';
import { LN_EPS } from './model/ops.ts';
import { type TensorInput, writeSafetensors } from './safetensors.ts';

/** Per-layer tensors: atoll name, transformers name inside transformer.h.{l}, stored transposed. */
export const LAYER: ReadonlyArray<[string, string, boolean]> = [
  ['ln1w', 'ln_1.weight', false],
  ['ln1b', 'ln_1.bias', false],
  ['qkvw', 'attn.c_attn.weight', true],
  ['qkvb', 'attn.c_attn.bias', false],
  ['attprojw', 'attn.c_proj.weight', true],
  ['attprojb', 'attn.c_proj.bias', false],
  ['ln2w', 'ln_2.weight', false],
  ['ln2b', 'ln_2.bias', false],
  ['fcw', 'mlp.c_fc.weight', true],
  ['fcb', 'mlp.c_fc.bias', false],
  ['fcprojw', 'mlp.c_proj.weight', true],
  ['fcprojb', 'mlp.c_proj.bias', false],
];
export const GLOBAL: ReadonlyArray<[string, string]> = [
  ['wte', 'transformer.wte.weight'],
  ['wpe', 'transformer.wpe.weight'],
  ['lnfw', 'transformer.ln_f.weight'],
  ['lnfb', 'transformer.ln_f.bias'],
];

/** The files of a transformers model folder, by name. */
export type HfFolder = Record<string, Uint8Array>;

export const HF_FILES = [
  'model.safetensors',
  'config.json',
  'tokenizer.json',
  'vocab.json',
  'merges.txt',
  'tokenizer_config.json',
  'special_tokens_map.json',
] as const;

/** (rows, cols) row-major → (cols, rows) row-major. */
export function transpose(src: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(src.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = src[r * cols + c];
  return out;
}

/** A tokenizer's files for the folder (they replace the byte-level ones) and its end-of-text id. */
export interface HfTokenizer {
  files: HfFolder;
  eos: number;
}

/** transformers' GPT2Config for an atoll model. */
export function hfConfig(c: GPTConfig, eos = 0): Record<string, unknown> {
  return {
    architectures: ['GPT2LMHeadModel'],
    model_type: 'gpt2',
    vocab_size: c.vocabSize,
    n_positions: c.blockSize,
    n_ctx: c.blockSize,
    n_embd: c.nEmbd,
    n_layer: c.nLayer,
    n_head: c.nHead,
    n_inner: null,
    activation_function: 'gelu_new',
    layer_norm_epsilon: LN_EPS,
    resid_pdrop: 0,
    embd_pdrop: 0,
    attn_pdrop: 0,
    initializer_range: 0.02,
    scale_attn_weights: true,
    tie_word_embeddings: true,
    // gpt2: <|endoftext|>; byte-level: no special token of its own, so NUL, which the corpus never holds
    bos_token_id: eos,
    eos_token_id: eos,
    torch_dtype: 'float32',
    use_cache: true,
  };
}

/** GPT-2's byte → printable unicode map (so every byte is one symbol of the BPE vocabulary). */
export function byteSymbols(): string[] {
  const bs: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const sym: string[] = new Array(256);
  for (const b of bs) sym[b] = String.fromCodePoint(b);
  let n = 0;
  for (let b = 0; b < 256; b++) if (sym[b] === undefined) sym[b] = String.fromCodePoint(256 + n++);
  return sym;
}

function tokenizerJson(): Record<string, unknown> {
  const vocab: Record<string, number> = {};
  byteSymbols().forEach((s, b) => {
    vocab[s] = b;
  });
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: null,
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges: [],
    },
  };
}

const json = (o: unknown) => new TextEncoder().encode(JSON.stringify(o, null, 2) + '\n');

/**
 * An atoll checkpoint as a folder that GPT2LMHeadModel.from_pretrained and AutoTokenizer load; a
 * gpt2-tokenizer checkpoint needs `tokenizer` (E_NEEDS_TOKENIZER without it).
 */
export function exportHf(ck: Checkpoint, tokenizer?: HfTokenizer): HfFolder {
  const c = ck.config;
  if (!tokenizer && checkpointTokenizer(ck.meta, c) !== 'byte')
    throw Object.assign(new Error('E_NEEDS_TOKENIZER: a gpt2-tokenizer model is exported with its vocab and merges'), {
      code: 'E_NEEDS_TOKENIZER',
    });
  const layout = paramLayout(c);
  const tensors: Record<string, TensorInput> = {};
  const view = (name: string) => {
    const t = layout.byName[name];
    return ck.params.subarray(t.offset, t.offset + t.size);
  };
  for (const [a, h] of GLOBAL) tensors[h] = { dtype: 'F32', shape: layout.byName[a].shape, data: view(a) };
  for (const [a, h, tr] of LAYER) {
    const rest = layout.byName[a].shape.slice(1);
    const size = rest.reduce((x, y) => x * y, 1);
    const all = view(a);
    for (let l = 0; l < c.nLayer; l++) {
      const one = all.subarray(l * size, (l + 1) * size);
      tensors[`transformer.h.${l}.${h}`] = tr
        ? { dtype: 'F32', shape: [rest[1], rest[0]], data: transpose(one, rest[0], rest[1]) }
        : { dtype: 'F32', shape: rest, data: one };
    }
  }
  const meta: Record<string, string> = {};
  for (const [k, v] of Object.entries(ck.meta)) if (k !== 'format' && k !== 'coordinator') meta[`atoll.${k}`] = v;
  const model = writeSafetensors(tensors, { ...meta, format: 'pt' });
  if (tokenizer)
    return { 'model.safetensors': model, 'config.json': json(hfConfig(c, tokenizer.eos)), ...tokenizer.files };
  return {
    'model.safetensors': model,
    'config.json': json(hfConfig(c)),
    'tokenizer.json': json(tokenizerJson()),
    'tokenizer_config.json': json({
      tokenizer_class: 'PreTrainedTokenizerFast',
      model_max_length: c.blockSize,
      clean_up_tokenization_spaces: false,
      add_prefix_space: false,
      added_tokens_decoder: {},
    }),
    'special_tokens_map.json': json({}),
  };
}
