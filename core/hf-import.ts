// A transformers GPT-2 folder to an atoll checkpoint: what `export --format atoll` and `serve --init` read.
// It takes what exportHf writes (GPT2LMHeadModel's state dict: `transformer.h.0…`) and the hub's own
// files (openai-community/gpt2's model.safetensors holds GPT2Model's names, `h.0…`, without the prefix),
// f32 or f16. The attention's mask buffers (`attn.bias`, `attn.masked_bias`) are skipped; a stored
// lm_head.weight must be wte itself (atoll's head is tied). Anything else the architecture would compute
// differently is refused by name: another activation, layer-norm epsilon, MLP width or attention scaling.

import type { Checkpoint } from './checkpoint.ts';
import { GLOBAL, type HfFolder, LAYER, transpose } from './hf.ts';
import { type GPTConfig, paramLayout, validateConfig } from './model/config.ts';
import { LN_EPS } from './model/ops.ts';
import { type Result, err, ok } from './result.ts';
import { type TensorView, readSafetensors, tensorAsFloat32 } from './safetensors.ts';

const bad = (message: string) => err('E_BAD_CHECKPOINT', message);

/** config.json → the atoll shape, or why the architecture is not atoll's. */
export function hfModelConfig(bytes: Uint8Array): Result<GPTConfig> {
  let h: Record<string, unknown>;
  try {
    const v = JSON.parse(new TextDecoder().decode(bytes)) as unknown;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return bad('config.json: not a JSON object');
    h = v as Record<string, unknown>;
  } catch (e) {
    return bad(`config.json: ${(e as Error).message}`);
  }
  if (h.model_type !== 'gpt2') return bad(`config.json: model_type '${String(h.model_type)}', expected 'gpt2'`);
  const act = h.activation_function ?? 'gelu_new'; // GPT2Config's default
  if (act !== 'gelu_new') return bad(`config.json: activation '${String(act)}': atoll's GELU is gelu_new (tanh)`);
  const eps = h.layer_norm_epsilon ?? 1e-5;
  if (eps !== LN_EPS) return bad(`config.json: layer_norm_epsilon ${String(eps)}: atoll's layer norm uses ${LN_EPS}`);
  if (h.scale_attn_weights === false) return bad('config.json: scale_attn_weights false: atoll scales by 1/√head');
  if (h.scale_attn_by_inverse_layer_idx === true)
    return bad('config.json: scale_attn_by_inverse_layer_idx: atoll does not scale attention by layer');
  if (h.tie_word_embeddings === false)
    return err('E_UNTIED_HEAD', 'config.json: tie_word_embeddings false: atoll ties the head to wte');
  const config: GPTConfig = {
    vocabSize: Number(h.vocab_size),
    blockSize: Number(h.n_positions ?? h.n_ctx),
    nLayer: Number(h.n_layer),
    nHead: Number(h.n_head),
    nEmbd: Number(h.n_embd),
  };
  try {
    validateConfig(config);
  } catch (e) {
    return bad(`config.json: ${(e as Error).message}`);
  }
  if (h.n_inner !== undefined && h.n_inner !== null && h.n_inner !== 4 * config.nEmbd)
    return bad(`config.json: n_inner ${String(h.n_inner)}: atoll's MLP is 4·n_embd = ${4 * config.nEmbd} wide`);
  return ok(config);
}

/** Skipped: the causal mask buffers older transformers saved with each attention. */
const BUFFER = /^(transformer\.)?h\.\d+\.attn\.(bias|masked_bias)$/;

/** A transformers GPT-2 folder (exportHf's, or the hub's) as an atoll checkpoint. Never throws. */
export function importHf(folder: HfFolder): Result<Checkpoint> {
  const cfgBytes = folder['config.json'];
  const model = folder['model.safetensors'];
  if (!cfgBytes || !model) return bad('a transformers folder needs config.json and model.safetensors');
  const cfg = hfModelConfig(cfgBytes);
  if (!cfg.ok) return cfg;
  const config = cfg.value;
  const file = readSafetensors(model);
  if (!file.ok) return file;
  const { tensors, metadata } = file.value;
  const used = new Set<string>();
  // GPT2LMHeadModel's names carry `transformer.`; GPT2Model's (the hub's gpt2 files) do not
  const find = (name: string): [string, TensorView] | undefined => {
    for (const n of [name, name.replace(/^transformer\./, '')]) if (tensors[n]) return [n, tensors[n]];
    return undefined;
  };
  const take = (name: string, shape: number[]): Result<Float32Array> => {
    const found = find(name);
    if (!found) return err('E_MISSING_TENSOR', `model.safetensors lacks '${name}'`);
    const [n, t] = found;
    used.add(n);
    if ((t.dtype !== 'F32' && t.dtype !== 'F16') || t.shape.join(',') !== shape.join(','))
      return err('E_WRONG_SIZE', `'${n}' is ${t.dtype} [${t.shape}], expected F32 or F16 [${shape}]`);
    return ok(tensorAsFloat32(t));
  };
  const layout = paramLayout(config);
  const params = new Float32Array(layout.total);
  for (const [a, h] of GLOBAL) {
    const spec = layout.byName[a];
    const r = take(h, spec.shape);
    if (!r.ok) return r;
    params.set(r.value, spec.offset);
  }
  for (const [a, h, tr] of LAYER) {
    const spec = layout.byName[a];
    const rest = spec.shape.slice(1);
    const size = rest.reduce((x, y) => x * y, 1);
    for (let l = 0; l < config.nLayer; l++) {
      const r = take(`transformer.h.${l}.${h}`, tr ? [rest[1], rest[0]] : rest);
      if (!r.ok) return r;
      params.set(tr ? transpose(r.value, rest[1], rest[0]) : r.value, spec.offset + l * size);
    }
  }
  const head = tensors['lm_head.weight'];
  if (head) {
    used.add('lm_head.weight');
    const wte = layout.byName.wte;
    const w = head.shape.join(',') === wte.shape.join(',') ? tensorAsFloat32(head) : null;
    const same = w?.every((x, i) => x === params[wte.offset + i]);
    if (!same) return err('E_UNTIED_HEAD', "lm_head.weight differs from wte: atoll's head is tied to wte");
  }
  const extra = Object.keys(tensors).filter((n) => !used.has(n) && !BUFFER.test(n));
  if (extra.length)
    return bad(
      `model.safetensors holds tensors GPT-2 has not: ${extra.slice(0, 5).join(', ')}${extra.length > 5 ? ' …' : ''}`,
    );
  const meta: Record<string, string> = {};
  for (const [k, v] of Object.entries(metadata)) if (k.startsWith('atoll.')) meta[k.slice(6)] = v;
  return ok({ config, params, meta, extra: {} });
}
