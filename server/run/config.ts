// The run config of `atoll serve`: embedded defaults < a JSON file (--config) < flags. Stored as
// <run-dir>/config.json; on resume the stored config wins, and a flag that contradicts a fixed part
// of it (model, data, mode) is an error rather than a silent change of the run.

import { readFileSync } from 'node:fs';
import type { RunConfig } from '../../core/api.ts';
import {
  type CoordinatorConfig,
  type CoordinatorConfigPatch,
  DEFAULT_COORDINATOR_CONFIG,
  MEASURED_SETTING,
  SPARSE_UPLINK,
  mergeConfig,
  validateCoordinatorConfig,
} from '../../core/coord/index.ts';
import { ENCODINGS, type Encoding } from '../../core/codec/index.ts';
import { type PresetName, PRESETS, getPreset, validateConfig } from '../../core/model/config.ts';

export type { RunConfig } from '../../core/api.ts';

/** What the serve flags can set (all optional: only given flags override). */
export interface RunFlags {
  preset?: string;
  data?: string;
  mode?: string;
  codec?: string;
  outerLr?: number;
  outerMomentum?: number;
  /** Target round time, seconds. */
  roundTime?: number;
  quorum?: number;
  maxStaleness?: number;
  innerSteps?: number;
  name?: string;
  title?: string;
  description?: string;
  seed?: number;
}

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
};

export const DEFAULT_RUN_NAME = 'default';

/** The downlink of a dense uplink (`--codec int8` and the like): int8, one scale per 64. */
const DENSE_DOWNLINK: CoordinatorConfig['downlink'] = { encoding: 'int8', blockSize: 64 };

/**
 * The embedded default: `small`, Moby-Dick, on the measured setting (MEASURED_SETTING: async merge
 * windows, the sparse uplink, int4 downlink; the setting the simulator's comparison row measures).
 */
function defaultRunConfig(preset: PresetName = 'small'): RunConfig {
  const { evalBatches, evalBatchSize, ...coord } = PRESET_DEFAULTS[preset];
  return {
    name: DEFAULT_RUN_NAME,
    title: 'Teach a small GPT to write like Moby-Dick',
    description:
      'A small GPT learning Moby-Dick byte by byte, trained by volunteers’ browsers and GPU servers together.',
    preset,
    model: getPreset(preset),
    data: 'moby-dick',
    seed: 1337,
    coordinator: mergeConfig(DEFAULT_COORDINATOR_CONFIG, {
      ...coord,
      ...structuredClone(MEASURED_SETTING),
      // Nesterov per merge window, as measured; DiLoCo's lr and momentum for an open-ended run
      outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 },
      // The server keeps its own history (with eval losses); the coordinator's copy only feeds snapshots.
      historyLimit: 64,
      keepUpdates: 32,
      islandTimeoutMs: 60_000,
    }),
    eval: { batches: evalBatches, batchSize: evalBatchSize },
    checkpoints: { keep: 5 },
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

function flagPatch(f: RunFlags): CoordinatorConfigPatch {
  const p: CoordinatorConfigPatch = {};
  if (f.mode !== undefined) {
    if (f.mode !== 'sync' && f.mode !== 'async')
      throw new ConfigError('E_BAD_CONFIG', `--mode must be sync or async, got '${f.mode}'`);
    p.mode = f.mode;
  }
  if (f.codec !== undefined) {
    if (!ENCODINGS.includes(f.codec as Encoding))
      throw new ConfigError('E_BAD_CONFIG', `--codec must be one of ${ENCODINGS.join('|')}, got '${f.codec}'`);
    // the uplink, and the downlink measured with it: sparse's int4 per 4096, else int8 per 64
    p.uplink = f.codec === 'sparse' ? { ...SPARSE_UPLINK } : { encoding: f.codec as Encoding };
    p.downlink = f.codec === 'sparse' ? { ...MEASURED_SETTING.downlink } : { ...DENSE_DOWNLINK };
  }
  const outer: Partial<CoordinatorConfig['outer']> = {};
  if (f.outerLr !== undefined) outer.lr = f.outerLr;
  if (f.outerMomentum !== undefined) outer.momentum = f.outerMomentum;
  if (Object.keys(outer).length) p.outer = outer;
  if (f.roundTime !== undefined) p.targetRoundMs = Math.round(f.roundTime * 1000);
  if (f.quorum !== undefined) p.quorum = f.quorum;
  if (f.maxStaleness !== undefined) p.maxStaleness = f.maxStaleness;
  if (f.innerSteps !== undefined) p.innerSteps = f.innerSteps;
  return p;
}

/** A JSON run file: any subset of RunConfig; `coordinator` may be partial. */
export type RunConfigFile = Omit<Partial<RunConfig>, 'coordinator' | 'limits'> & {
  coordinator?: CoordinatorConfigPatch;
  limits?: Partial<RunConfig['limits']>;
};

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

/** Keys a run file may hold besides the default config's (optional ones the defaults leave out). */
const OPTIONAL_KEYS: Record<string, Record<string, unknown>> = {
  'coordinator.uplink': {
    topkFraction: 0,
    strided: false,
    valueBits: 0,
    feedbackDecay: 0,
    deflate: false,
    blockSize: 0,
  },
  'coordinator.downlink': { deflate: false },
};

/**
 * A run file's keys and types against the default config (one shape: the embedded default):
 * an unknown key, or a value of another type than the default's (a string where a number or a
 * list belongs, a non-finite number), is named. Ranges are the config validation's.
 */
export function configFileProblems(file: Record<string, unknown>): string[] {
  const problems: string[] = [];
  const shape = defaultRunConfig('tiny') as unknown as Record<string, unknown>;
  const walk = (v: Record<string, unknown>, like: Record<string, unknown>, at: string) => {
    for (const [k, x] of Object.entries(v)) {
      const path = at ? `${at}.${k}` : k;
      const want = k in like ? like[k] : OPTIONAL_KEYS[at]?.[k];
      if (want === undefined) {
        problems.push(`unknown key ${path}`);
        continue;
      }
      const kind = (y: unknown) => (Array.isArray(y) ? 'array' : y === null ? 'null' : typeof y);
      if (kind(x) !== kind(want)) {
        problems.push(
          `${path} must be ${({ object: 'an object', array: 'a list' } as Record<string, string>)[kind(want)] ?? `a ${kind(want)}`}, got ${JSON.stringify(x)?.slice(0, 40)}`,
        );
        continue;
      }
      if (typeof x === 'number' && !Number.isFinite(x)) problems.push(`${path} must be finite`);
      else if (Array.isArray(x) && Array.isArray(want) && x.some((e) => typeof e !== 'string'))
        problems.push(`${path} must be a list of strings`);
      else if (kind(x) === 'object' && k !== 'model')
        walk(x as Record<string, unknown>, want as Record<string, unknown>, path);
      else if (k === 'model') walk(x as Record<string, unknown>, shape.model as Record<string, unknown>, path);
    }
  };
  walk(file, { ...shape, preset: 'custom' }, '');
  return problems;
}

/** Builds a fresh run's config from an optional file and the flags. */
export function buildRunConfig(file: RunConfigFile | null, flags: RunFlags): RunConfig {
  const presetName = flags.preset ?? (file?.preset && file.preset !== 'custom' ? file.preset : undefined) ?? 'small';
  if (!(presetName in PRESETS))
    throw new ConfigError(
      'E_BAD_CONFIG',
      `unknown preset '${presetName}' (expected ${Object.keys(PRESETS).join(', ')})`,
    );
  const base = defaultRunConfig(presetName as PresetName);
  const { coordinator: _c, ...fileRest } = file ?? {};
  const cfg: RunConfig = {
    ...base,
    ...fileRest,
    preset: file?.model && !flags.preset ? 'custom' : (presetName as PresetName),
    model: flags.preset ? getPreset(presetName) : (file?.model ?? base.model),
    coordinator: mergeConfig(base.coordinator, file?.coordinator ?? {}),
    eval: { ...base.eval, ...(file?.eval ?? {}) },
    checkpoints: { ...base.checkpoints, ...(file?.checkpoints ?? {}) },
    limits: { ...base.limits, ...(file?.limits ?? {}) },
    allowOrigins: file?.allowOrigins ?? base.allowOrigins,
  };
  if (file?.model && cfg.preset === 'custom') {
    // a custom model keeps its own context length unless the file says otherwise
    if (file.coordinator?.seqLen === undefined)
      cfg.coordinator.seqLen = Math.min(cfg.coordinator.seqLen, cfg.model.blockSize);
  }
  if (flags.data !== undefined) cfg.data = flags.data;
  if (flags.name !== undefined) cfg.name = flags.name;
  if (flags.title !== undefined) cfg.title = flags.title;
  if (flags.description !== undefined) cfg.description = flags.description;
  if (flags.seed !== undefined) cfg.seed = flags.seed;
  // the default title describes the default run only: another run reads as its name until given one
  if (
    flags.title === undefined &&
    file?.title === undefined &&
    (cfg.name !== DEFAULT_RUN_NAME || cfg.data !== 'moby-dick')
  )
    cfg.title = cfg.name;
  cfg.coordinator = mergeConfig(cfg.coordinator, flagPatch(flags));
  // Async without merge windows applies each Δ on arrival: the delayed Nesterov of Async Local-SGD,
  // unless set explicitly (a merge window takes one Nesterov step, as the simulator measured).
  const outerGiven = file?.coordinator?.outer?.kind !== undefined;
  if (cfg.coordinator.mode === 'async' && cfg.coordinator.asyncWindow.fraction === 0 && !outerGiven)
    cfg.coordinator.outer.kind = 'delayed-nesterov';
  validateRunConfig(cfg);
  return cfg;
}

/**
 * Resuming: the stored config, with the flags' runtime knobs applied on top. Flags that would change
 * what the run is (model, data, mode) must agree with it.
 */
export function resumeRunConfig(
  stored: RunConfig,
  flags: RunFlags,
): { config: RunConfig; patch: CoordinatorConfigPatch } {
  const problems: string[] = [];
  if (flags.preset !== undefined && flags.preset !== stored.preset)
    problems.push(`--preset ${flags.preset} (run uses ${stored.preset})`);
  if (flags.data !== undefined && flags.data !== stored.data)
    problems.push(`--data ${flags.data} (run uses ${stored.data})`);
  if (flags.mode !== undefined && flags.mode !== stored.coordinator.mode)
    problems.push(`--mode ${flags.mode} (run uses ${stored.coordinator.mode})`);
  if (flags.seed !== undefined && flags.seed !== stored.seed)
    problems.push(`--seed ${flags.seed} (run uses ${stored.seed})`);
  if (problems.length) {
    throw new ConfigError(
      'E_CONFIG_MISMATCH',
      `the run folder holds a different run: ${problems.join(', ')}. Use another --run-dir or --name to start a new run.`,
    );
  }
  const { mode: _m, ...patch } = flagPatch(flags);
  // runs stored before titles existed read their name as the title
  const config: RunConfig = {
    ...stored,
    title: stored.title ?? stored.name,
    coordinator: mergeConfig(stored.coordinator, patch),
  };
  if (flags.name !== undefined) config.name = flags.name;
  if (flags.title !== undefined) config.title = flags.title;
  if (flags.description !== undefined) config.description = flags.description;
  validateRunConfig(config);
  return { config, patch };
}

function validateRunConfig(c: RunConfig): void {
  try {
    validateConfig(c.model);
  } catch (e) {
    throw new ConfigError('E_BAD_CONFIG', (e as Error).message);
  }
  const problems = validateCoordinatorConfig(c.coordinator);
  if (c.coordinator.seqLen > c.model.blockSize)
    problems.push(`seqLen ${c.coordinator.seqLen} exceeds the model's blockSize ${c.model.blockSize}`);
  if (typeof c.name !== 'string' || !/^[\w.-]{1,64}$/.test(c.name))
    problems.push(`name must be 1-64 of [A-Za-z0-9_.-], got '${c.name}'`);
  if (typeof c.title !== 'string' || c.title.trim().length === 0 || c.title.length > 120)
    problems.push('title must be 1-120 characters');
  const posInt = (k: string, v: unknown) => {
    if (!Number.isInteger(v) || (v as number) < 1) problems.push(`${k} must be a positive integer`);
  };
  posInt('eval.batches', c.eval.batches);
  posInt('eval.batchSize', c.eval.batchSize);
  posInt('checkpoints.keep', c.checkpoints.keep);
  posInt('limits.helloPerMinute', c.limits.helloPerMinute);
  posInt('limits.restPerMinute', c.limits.restPerMinute);
  posInt('limits.maxIslands', c.limits.maxIslands);
  posInt('limits.maxLogBytes', c.limits.maxLogBytes);
  if (
    c.limits.powBits !== undefined &&
    !(Number.isInteger(c.limits.powBits) && c.limits.powBits >= 0 && c.limits.powBits <= 32)
  )
    problems.push('limits.powBits must be an integer in [0, 32]');
  if (c.limits.newIslandsPerHour !== undefined) posInt('limits.newIslandsPerHour', c.limits.newIslandsPerHour);
  if (problems.length) throw new ConfigError('E_BAD_CONFIG', problems.join('; '));
}
