// Model checkpoints as safetensors: one named F32 tensor per parameter tensor
// (in the layout order of core/model/config.ts), the config and run facts as
// string metadata, and optional extra tensors (e.g. outer-optimizer momentum).
// Python: `safetensors.numpy.load_file(path)` gives {"wte": (V,C), ...}.

import { type GPTConfig, paramLayout, validateConfig } from './model/config.ts';
import { type Result, err, ok } from './result.ts';
import { type TensorInput, readSafetensors, tensorAsFloat32, writeSafetensors } from './safetensors.ts';

export interface Checkpoint {
  config: GPTConfig;
  params: Float32Array;
  /** Free-form string facts: version, tokens, hash, preset, ... */
  meta: Record<string, string>;
  /** Extra flat F32 tensors stored under their own names (e.g. "outer.momentum"). */
  extra: Record<string, Float32Array>;
}

export function encodeCheckpoint(ck: Checkpoint): Uint8Array {
  const layout = paramLayout(ck.config);
  if (ck.params.length !== layout.total)
    throw new Error(`E_WRONG_SIZE: params has ${ck.params.length} elements, config needs ${layout.total}`);
  const tensors: Record<string, TensorInput> = {};
  for (const t of layout.tensors)
    tensors[t.name] = { dtype: 'F32', shape: t.shape, data: ck.params.subarray(t.offset, t.offset + t.size) };
  for (const [name, data] of Object.entries(ck.extra)) tensors[name] = { dtype: 'F32', shape: [data.length], data };
  return writeSafetensors(tensors, { ...ck.meta, format: 'atoll-checkpoint-1', config: JSON.stringify(ck.config) });
}

/** Reads a checkpoint; when `expected` is given, the stored config must equal it. Never throws. */
export function decodeCheckpoint(bytes: Uint8Array, expected?: GPTConfig): Result<Checkpoint> {
  const file = readSafetensors(bytes);
  if (!file.ok) return file;
  const { tensors, metadata } = file.value;
  let config: GPTConfig;
  try {
    config = JSON.parse(metadata.config ?? '');
    validateConfig(config);
  } catch (e) {
    return err('E_BAD_CHECKPOINT', `checkpoint has no valid model config in its metadata (${(e as Error).message})`);
  }
  if (expected && JSON.stringify(canonical(expected)) !== JSON.stringify(canonical(config))) {
    return err(
      'E_WRONG_MODEL',
      `checkpoint is for model ${JSON.stringify(config)}, expected ${JSON.stringify(expected)}`,
    );
  }
  const layout = paramLayout(config);
  const params = new Float32Array(layout.total);
  for (const t of layout.tensors) {
    const view = tensors[t.name];
    if (!view) return err('E_MISSING_TENSOR', `checkpoint lacks tensor '${t.name}'`);
    if (view.dtype !== 'F32' || view.shape.join(',') !== t.shape.join(',')) {
      return err('E_WRONG_SIZE', `tensor '${t.name}' is ${view.dtype} [${view.shape}], expected F32 [${t.shape}]`);
    }
    params.set(tensorAsFloat32(view), t.offset);
  }
  const extra: Record<string, Float32Array> = {};
  for (const [name, view] of Object.entries(tensors)) {
    if (layout.byName[name] || view.dtype !== 'F32') continue;
    extra[name] = tensorAsFloat32(view).slice();
  }
  const meta = { ...metadata };
  delete meta.config;
  return ok({ config, params, meta, extra });
}

function canonical(c: GPTConfig): GPTConfig {
  return { vocabSize: c.vocabSize, blockSize: c.blockSize, nLayer: c.nLayer, nHead: c.nHead, nEmbd: c.nEmbd };
}
