// `serve --init FOLDER`: θ0 of a new run from a transformers GPT-2 folder (config.json + model.safetensors,
// as `export --format hf` writes it and GPT2LMHeadModel.from_pretrained reads it; hf-folder.ts reads it).
// The run's model is the folder's shape: a preset of that shape names it (its round defaults apply), any
// other shape is a custom model (`small`'s round defaults, seqLen at most the folder's n_positions). A
// --preset, or a --config model or preset, must be that shape (E_INIT_MISMATCH); the run's other rules
// hold as for any run (the tokenizer is the one the vocabulary fits: 256 byte, 50,257 gpt2, whose runs
// train on token shards; another vocabulary: E_VOCAB_MISMATCH). A run
// folder that already holds a run resumes from its own checkpoints, so --init there is refused.

import { type GPTConfig, PRESETS, getPreset } from '../../core/model/config.ts';
import { ConfigError, type RunConfigFile, type RunFlags } from '../../server/run/config.ts';
import type { OpenRunOptions } from '../../server/run/run.ts';
import { readHfFolder } from './hf-folder.ts';

const KEYS = ['vocabSize', 'blockSize', 'nLayer', 'nHead', 'nEmbd'] as const;
const same = (a: GPTConfig, b: GPTConfig) => KEYS.every((k) => a[k] === b[k]);
const show = (c: GPTConfig) => `V${c.vocabSize} T${c.blockSize} L${c.nLayer} H${c.nHead} C${c.nEmbd}`;

export interface InitRun {
  file: RunConfigFile | null;
  flags: RunFlags;
  init: NonNullable<OpenRunOptions['init']>;
}

/** Reads the folder and fits the run's model to it; every refusal is coded, before anything starts. */
export function initFromFolder(path: string, file: RunConfigFile | null, flags: RunFlags): InitRun {
  const ck = readHfFolder(path, '--init', 'E_INIT_MISSING');
  const m = ck.config;
  const mismatch = (what: string, c: GPTConfig) =>
    new ConfigError('E_INIT_MISMATCH', `${what} is ${show(c)}, the --init folder ${path} is ${show(m)}`);
  const presetOf = (name: string) => (name in PRESETS ? getPreset(name) : null);
  const flagPreset = flags.preset === undefined ? null : presetOf(flags.preset);
  if (flagPreset && !same(flagPreset, m)) throw mismatch(`--preset ${flags.preset}`, flagPreset);
  const fileModel = file?.model as GPTConfig | undefined;
  if (fileModel && !same({ ...m, ...fileModel }, m)) throw mismatch('--config model', { ...m, ...fileModel });
  const filePreset = file?.preset && file.preset !== 'custom' ? presetOf(file.preset) : null;
  if (filePreset && !same(filePreset, m)) throw mismatch(`--config preset ${file?.preset}`, filePreset);
  const init = { params: ck.params, from: path };
  if (flagPreset) return { file, flags, init };
  // a preset of the folder's shape names the run; else the model is the folder's own
  const named = Object.entries(PRESETS).find(([, c]) => same(c, m))?.[0];
  if (named) return { file: file && { ...file, model: undefined }, flags: { ...flags, preset: named }, init };
  return { file: { ...file, preset: 'custom', model: m }, flags, init };
}
