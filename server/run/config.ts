// The run config of `atoll serve`: one rule, at start and on resume,
//   start:   embedded defaults < a JSON file (--config) < flags
//   resume:  embedded defaults < the stored config.json < --config < flags
// A knob the schema marks `fixed` (model, data, seed, mode, seqLen, dataSeed) that would change on
// resume is refused by name with its why; every other knob given is applied (totalTokens extends a
// finished run). The schema and the knobs are core/run-config.ts.

import { readFileSync } from 'node:fs';
import {
  type CoordinatorConfig,
  type CoordinatorConfigPatch,
  DEFAULT_COORDINATOR_CONFIG,
  MEASURED_SETTING,
  codecSetting,
  downlinkSetting,
  mergeConfig,
  validateCoordinatorConfig,
} from '../../core/coord/index.ts';
import type { DownlinkEncoding, Encoding } from '../../core/codec/index.ts';
import { type PresetName, PRESETS, getPreset, validateConfig } from '../../core/model/config.ts';
import {
  KNOBS,
  type KnobName,
  type RunConfig,
  type RunConfigPatch,
  RunConfigSchema,
  getAt,
  knobValue,
  setAt,
} from '../../core/run-config.ts';
import { leaves, nodeAt, schemaProblems } from '../../core/schema-walk.ts';
import { Type } from '@sinclair/typebox';
import { DEFAULT_KEEP } from './keep-policy.ts';
import { VOCAB_SIZE, tokenizerOfVocab } from '../../core/data/tokenizer.ts';

export type { RunConfig } from '../../core/run-config.ts';

type TextKnob =
  | 'preset'
  | 'data'
  | 'dataUrl'
  | 'mode'
  | 'codec'
  | 'downlink'
  | 'name'
  | 'title'
  | 'description'
  | 'keepBest';
/** What the flags can set (all optional: only given flags override): the knobs of core/run-config.ts. */
export type RunFlags = { [K in KnobName]?: K extends TextKnob ? string : number };

export class ConfigError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Per-preset island work: sequences are the model's context, rounds sized for the engines that run it. */
const PRESET_DEFAULTS: Record<PresetName, CoordinatorConfigPatch & { evalBatches: number; evalBatchSize: number }> = {
  tiny: {
    batchSize: 8,
    seqLen: 32,
    innerSteps: 20,
    targetRoundMs: 0,
    innerLr: { maxLr: 3e-3, minLr: 3e-4 },
    evalBatches: 8,
    evalBatchSize: 8,
  },
  // volunteers' rounds aim at 90 s (a minute and a half of a person's GPU between updates), down to one
  // step on a slow device, so even the first round, sized from the device's measured speed, stays near it
  small: {
    batchSize: 8,
    seqLen: 128,
    innerSteps: 50,
    targetRoundMs: 90_000,
    minInnerSteps: 1,
    innerLr: { maxLr: 2e-3, minLr: 2e-4 },
    evalBatches: 2,
    evalBatchSize: 4,
  },
  base: {
    batchSize: 8,
    seqLen: 256,
    innerSteps: 100,
    targetRoundMs: 120_000,
    minInnerSteps: 1,
    innerLr: { maxLr: 1e-3, minLr: 1e-4 },
    evalBatches: 1,
    evalBatchSize: 4,
  },
  // GPT-2's 50,257-row head dominates each step: small batches, short rounds
  'gpt2-mini': {
    batchSize: 2,
    seqLen: 256,
    innerSteps: 10,
    targetRoundMs: 90_000,
    minInnerSteps: 1,
    innerLr: { maxLr: 3e-3, minLr: 3e-4 },
    evalBatches: 1,
    evalBatchSize: 2,
  },
  // GPT-2 small (124M): one sequence of 1,024 tokens a step; no served run takes it yet (its vocabulary)
  gpt2: {
    batchSize: 1,
    seqLen: 1024,
    innerSteps: 10,
    targetRoundMs: 120_000,
    minInnerSteps: 1,
    innerLr: { maxLr: 6e-4, minLr: 6e-5 },
    evalBatches: 1,
    evalBatchSize: 1,
  },
};

export const DEFAULT_RUN_NAME = 'default';

/**
 * The embedded default: `small`, Moby-Dick, on the measured setting (MEASURED_SETTING: async merge
 * windows, the sparse uplink, int4 downlink; the setting the simulator's comparison row measures).
 */
export function defaultRunConfig(preset: PresetName = 'small'): RunConfig {
  const { evalBatches, evalBatchSize, ...coord } = PRESET_DEFAULTS[preset];
  return {
    name: DEFAULT_RUN_NAME,
    title: 'Teach a small GPT to write like Moby-Dick',
    description:
      'A small GPT learning Moby-Dick byte by byte, trained by volunteers’ browsers and GPU servers together.',
    preset,
    model: getPreset(preset),
    tokenizer: tokenizerOfVocab(getPreset(preset).vocabSize) ?? 'byte',
    data: 'moby-dick',
    seed: 1337,
    coordinator: mergeConfig(DEFAULT_COORDINATOR_CONFIG, {
      ...coord,
      ...structuredClone(MEASURED_SETTING),
      // the outer step is DEFAULT_COORDINATOR_CONFIG's: Nesterov per merge window, DiLoCo's lr 0.7 and μ 0.9
      // The server keeps its own history (with eval losses); the coordinator's copy only feeds snapshots.
      historyLimit: 64,
      keepUpdates: 32,
      islandTimeoutMs: 60_000,
    }),
    eval: { batches: evalBatches, batchSize: evalBatchSize },
    checkpoints: { ...DEFAULT_KEEP },
    mix: { k: 0, spotRate: 0.1 },
    audit: { rate: 0.1, banAfter: 2 },
    outerWorkers: 2,
    cluster: { leaseMs: 5000 },
    limits: {
      helloPerMinute: 120,
      restPerMinute: 600,
      maxIslands: 5000,
      maxLogBytes: 64 * 1024 * 1024,
      powBits: 16,
      newIslandsPerHour: 60,
    },
    allowOrigins: [],
  };
}

/**
 * The flags as one patch of the run config (each knob at its path; --codec picks its downlink too, and
 * --downlink, whatever the order, replaces that).
 */
export function flagPatch(f: RunFlags): RunConfigPatch {
  const p: Record<string, unknown> = {};
  for (const [name, v] of Object.entries(f) as Array<[KnobName, unknown]>) {
    if (v === undefined || !(name in KNOBS) || name === 'preset' || name === 'downlink') continue;
    if (name === 'codec') {
      // the uplink, and the downlink measured with it: sparse's int4 per 4096, else int8 per 64
      const set = codecSetting(v as Encoding); // the admin API's codec gives the same
      setAt(p, 'coordinator.uplink', set.uplink);
      setAt(p, 'coordinator.downlink', set.downlink);
    } else setAt(p, KNOBS[name].path, knobValue(name, v));
  }
  if (f.downlink !== undefined) setAt(p, 'coordinator.downlink', downlinkSetting(f.downlink as DownlinkEncoding));
  return p as RunConfigPatch;
}

/** `base` with `patch` on top: groups merge key by key, the model is replaced whole, the coordinator by mergeConfig. */
export function mergeRunConfig(base: RunConfig, patch: RunConfigPatch): RunConfig {
  const out = structuredClone(base) as unknown as Record<string, unknown>;
  for (const [key, v] of Object.entries(patch)) {
    if (v === undefined) continue;
    const cur = out[key];
    if (key === 'coordinator') out[key] = mergeConfig(cur as CoordinatorConfig, v as CoordinatorConfigPatch);
    else if (key !== 'model' && kindOf(cur) === 'object' && kindOf(v) === 'object')
      out[key] = { ...(cur as object), ...structuredClone(v as object) };
    else out[key] = structuredClone(v);
  }
  return out as unknown as RunConfig;
}

const kindOf = (y: unknown) => (Array.isArray(y) ? 'array' : y === null ? 'null' : typeof y);

/** A JSON run file: any part of RunConfig. */
export type RunConfigFile = RunConfigPatch;

export function readConfigFile(path: string): RunConfigFile {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError('E_CONFIG_MISSING', `cannot read --config '${path}': ${(e as Error).message}`);
  }
  try {
    const v = JSON.parse(text) as unknown;
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('not a JSON object');
    const problems = configFileProblems(v as Record<string, unknown>);
    if (problems.length) throw new Error(problems.join('; '));
    return v as RunConfigFile;
  } catch (e) {
    throw new ConfigError('E_BAD_CONFIG', `--config '${path}': ${(e as Error).message}`);
  }
}

/** A run file's keys, types and ranges against the schema: an unknown key or a bad value is named. */
export function configFileProblems(file: Record<string, unknown>): string[] {
  return schemaProblems(RunConfigSchema, file, { partial: true, strict: true });
}

/** Builds a fresh run's config: defaults < the file < the flags. */
export function buildRunConfig(file: RunConfigFile | null, flags: RunFlags): RunConfig {
  const presetName = flags.preset ?? (file?.preset && file.preset !== 'custom' ? file.preset : undefined) ?? 'small';
  if (!(presetName in PRESETS))
    throw new ConfigError(
      'E_BAD_CONFIG',
      `unknown preset '${presetName}' (expected ${Object.keys(PRESETS).join(', ')})`,
    );
  const base = defaultRunConfig(presetName as PresetName);
  const cfg = mergeRunConfig(base, file ?? {});
  cfg.preset = file?.model && !flags.preset ? 'custom' : (presetName as PresetName);
  cfg.model = flags.preset ? getPreset(presetName) : ((file?.model as RunConfig['model']) ?? base.model);
  // a custom model keeps its own context length unless the file says otherwise
  if (file?.model && cfg.preset === 'custom' && file.coordinator?.seqLen === undefined)
    cfg.coordinator.seqLen = Math.min(cfg.coordinator.seqLen, cfg.model.blockSize);
  // a model given without a tokenizer reads its ids as the tokenizer its vocabulary fits
  if (file?.tokenizer === undefined) cfg.tokenizer = tokenizerOfVocab(cfg.model.vocabSize) ?? cfg.tokenizer;
  const out = mergeRunConfig(cfg, flagPatch(flags));
  // the default title describes the default run only: another run reads as its name until given one
  // and the default description the default run only: another run says what it trains on
  if (out.name !== DEFAULT_RUN_NAME || out.data !== 'moby-dick') {
    if (flags.title === undefined && file?.title === undefined) out.title = out.name;
    if (flags.description === undefined && file?.description === undefined)
      out.description = `A ${out.preset} GPT trained on ${out.data}, by volunteers’ browsers and GPU servers.`;
  }
  // Async without merge windows applies each Δ on arrival: the delayed Nesterov of Async Local-SGD,
  // unless set explicitly (a merge window takes one Nesterov step, as the simulator measured).
  const outerGiven = file?.coordinator?.outer?.kind !== undefined;
  if (out.coordinator.mode === 'async' && out.coordinator.asyncWindow.fraction === 0 && !outerGiven)
    out.coordinator.outer.kind = 'delayed-nesterov';
  validateRunConfig(out);
  return out;
}

/** Each leaf the schema marks fixed (on itself or a group above it), with its why. */
const FIXED: Array<[string, string]> = leaves(RunConfigSchema).flatMap(([path]) => {
  const keys = path.split('.');
  for (let i = keys.length; i > 0; i--) {
    const why = (nodeAt(RunConfigSchema, keys.slice(0, i).join('.')) as { fixed?: string } | undefined)?.fixed;
    if (why) return [[path, why] as [string, string]];
  }
  return [];
});

/**
 * Resuming: the stored config (over the defaults, for keys it predates) < the file < the flags.
 * A fixed knob that would change is refused by name with its why (E_CONFIG_MISMATCH); the
 * coordinator's changed knobs come back as the patch the restored coordinator takes.
 */
export function resumeRunConfig(
  stored: RunConfig,
  file: RunConfigFile | null,
  flags: RunFlags,
): { config: RunConfig; patch: CoordinatorConfigPatch } {
  const preset = stored.preset in PRESETS ? (stored.preset as PresetName) : 'small';
  const before = mergeRunConfig(defaultRunConfig(preset), { ...stored, title: stored.title ?? stored.name });
  const { model: _m, preset: _p, ...fileRest } = file ?? {};
  let next = mergeRunConfig(before, fileRest);
  // a preset or model given again must be the run's: compare what they would make
  if (file?.model) next.model = file.model as RunConfig['model'];
  const presetAsked = flags.preset ?? (file?.preset !== undefined && !file.model ? file.preset : undefined);
  if (presetAsked !== undefined) {
    next.preset = presetAsked as PresetName;
    if (presetAsked in PRESETS) next.model = getPreset(presetAsked);
  }
  next = mergeRunConfig(next, flagPatch(flags));
  const problems: string[] = [];
  const show = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));
  for (const [path, why] of FIXED) {
    const was = getAt(before, path);
    const now = getAt(next, path);
    if (JSON.stringify(was) === JSON.stringify(now)) continue;
    const flag = (Object.keys(KNOBS) as KnobName[]).find((n) => KNOBS[n].path === path && flags[n] !== undefined);
    const label = flag ? `--${flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}` : path;
    problems.push(`${label} ${show(now)} (run uses ${show(was)}: ${why})`);
  }
  if (problems.length) {
    throw new ConfigError(
      'E_CONFIG_MISMATCH',
      `the run folder holds a different run: ${problems.join(', ')}. ` +
        'Use another --run-dir or --name to start a new run.',
    );
  }
  const patch: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(next.coordinator))
    if (JSON.stringify(v) !== JSON.stringify((before.coordinator as Record<string, unknown>)[key])) patch[key] = v;
  validateRunConfig(next);
  return { config: next, patch: patch as CoordinatorConfigPatch };
}

function validateRunConfig(c: RunConfig): void {
  try {
    validateConfig(c.model);
  } catch (e) {
    throw new ConfigError('E_BAD_CONFIG', (e as Error).message);
  }
  const problems = [
    ...validateCoordinatorConfig(c.coordinator),
    ...schemaProblems(Type.Omit(RunConfigSchema, ['coordinator']), c),
  ];
  if (c.coordinator.seqLen > c.model.blockSize)
    problems.push(`seqLen ${c.coordinator.seqLen} exceeds the model's blockSize ${c.model.blockSize}`);
  if (c.mix.k === 1 || (c.mix.k & (c.mix.k - 1)) !== 0)
    problems.push(`mix.k must be 0 (off) or a power of two from 2 to 16, got ${c.mix.k}`);
  if (problems.length) throw new ConfigError('E_BAD_CONFIG', problems.join('; '));
  if (c.model.vocabSize !== VOCAB_SIZE[c.tokenizer])
    throw new ConfigError(
      'E_VOCAB_MISMATCH',
      `model.vocabSize ${c.model.vocabSize} does not fit the run's ${c.tokenizer} tokenizer ` +
        `(${VOCAB_SIZE[c.tokenizer]} ids)`,
    );
}
