// Coordinator configuration: defaults, validation, and the knobs that may change at runtime.

import type { Static } from '@sinclair/typebox';
import type { CodecOptions, DownlinkEncoding, Encoding } from '../codec/index.ts';
import { ADAMW_DEFAULTS } from '../model/ops.ts';
import { schemaProblems } from '../schema-walk.ts';
import { CoordinatorConfigSchema } from './config-schema.ts';
import { fragmentProblem } from './outer-fragment.ts';
import { ErrorCode } from '../protocol.ts';
import { type Result, err, ok } from '../result.ts';

/** How a delta's weight falls with its staleness τ = v_now − v_base. */
export type StalenessFn = 'inv-sqrt' | 'inv-linear' | 'none';

/** The coordinator's config: its schema's Static type (config-schema.ts: each knob's description and range). */
export type CoordinatorConfig = Static<typeof CoordinatorConfigSchema>;

/**
 * The sparse uplink measured in docs/studies/compare.md: half of each 4096-entry chunk,
 * strided, 1-bit values, error feedback decay 0.35. `--codec sparse` and the simulator's sparse
 * rows use it.
 */
export const SPARSE_UPLINK = {
  encoding: 'sparse',
  blockSize: 4096,
  topkFraction: 0.5,
  strided: true,
  valueBits: 1,
  feedbackDecay: 0.35,
} as const satisfies CodecOptions;

/**
 * The downlink measured with it: int4, one scale per 4096 entries, deflated (error feedback on the
 * server; blocks of 64 cost 12 % more bytes down for the same loss).
 */
export const SPARSE_DOWNLINK = {
  encoding: 'int4',
  blockSize: 4096,
  deflate: true,
} as const satisfies CoordinatorConfig['downlink'];

/**
 * The measured setting (docs/studies/compare.md, the async heterogeneous sparse row): async
 * merge windows, the sparse uplink and its downlink. `atoll serve`'s default run and the
 * simulator's sparse rows both read it from here.
 */
export const MEASURED_SETTING = {
  mode: 'async',
  uplink: SPARSE_UPLINK,
  downlink: SPARSE_DOWNLINK,
} as const satisfies Pick<CoordinatorConfig, 'mode' | 'uplink' | 'downlink'>;

/**
 * `--codec topk`: the largest fifth of Δ + e, error feedback decay 0.35 (as the sparse uplink's). The codec's
 * own default (1 % kept, feedback never decaying) diverged in the settings matrix: the owed residual grew
 * until it was sent whole and stale (tiny, sync 2.52 → 7.30). Kept 20 % with decay 0.35, every topk row
 * ends within 1.03× the best row and never rises (docs/studies/settings.md).
 */
export const TOPK_UPLINK = { encoding: 'topk', topkFraction: 0.2, feedbackDecay: 0.35 } as const satisfies CodecOptions;

/** The downlink of a dense uplink: int8, one scale per 64. */
export const DENSE_DOWNLINK = { encoding: 'int8', blockSize: 64 } as const satisfies CoordinatorConfig['downlink'];

/**
 * The update in the uplink's own sparse code (`serve --downlink sparse`): half of each 4096-entry chunk,
 * strided, 1 bit a value; the server's error feedback keeps the rest whole (decay 1: an update left out is
 * owed, not forgotten). At 124M a frame is 7.96 MB where int4 per 4096 is 34.8 MB (`atoll bench codec`).
 */
export const SPARSE_CODE_DOWNLINK = {
  ...SPARSE_UPLINK,
  feedbackDecay: 1,
} as const satisfies CoordinatorConfig['downlink'];

/**
 * The downlink an encoding name stands for (`--downlink`, the admin API's `downlink`): sparse the uplink's
 * sparse code, int4 the measured int4 per 4096 deflated, int8 one scale per 64, f32 as it is.
 */
export function downlinkSetting(encoding: DownlinkEncoding): CoordinatorConfig['downlink'] {
  if (encoding === 'sparse') return { ...SPARSE_CODE_DOWNLINK };
  if (encoding === 'int4') return { ...SPARSE_DOWNLINK };
  return encoding === 'int8' ? { ...DENSE_DOWNLINK } : { encoding, blockSize: 64 };
}

/**
 * The codecs an encoding name stands for, wherever a user picks one (`--codec`, the admin API's
 * `codec`): sparse is the measured sparse uplink with its int4 downlink; topk is TOPK_UPLINK and any other
 * encoding a dense uplink at the codec's own defaults, both with the int8 downlink.
 */
export function codecSetting(encoding: Encoding): Pick<CoordinatorConfig, 'uplink' | 'downlink'> {
  if (encoding === 'sparse') return { uplink: { ...SPARSE_UPLINK }, downlink: { ...SPARSE_DOWNLINK } };
  return { uplink: encoding === 'topk' ? { ...TOPK_UPLINK } : { encoding }, downlink: { ...DENSE_DOWNLINK } };
}

/**
 * Every island warms up its inner lr over the first steps of a fresh AdamW state (InnerLrPlan.
 * localWarmupSteps): Adam's first steps move every weight by about ±lr whatever its gradient, and on
 * a cold model they overshoot (`small`, no warmup: a 4-step first round took the held-out loss from
 * 5.621 to 7.648). Counted in the island's own steps, it holds for a late joiner and for rounds of any
 * length; 2 / (1 − β2) steps (β2 = 0.95: 40) is the untuned rule for Adam (Ma & Yarats 2021).
 * docs/studies/cold-start.md has the figures.
 */
export const COLD_START_WARMUP_STEPS = 40;

/**
 * The most inner steps one round takes on the sparse uplink. Its one frame (half of each chunk, a sign
 * each) carries a long round's Δ badly, and a Δ applied as it is then makes θ worse: a late joiner's
 * first round on tiny's θ at 3.118 took it to 3.033 at 50 steps, 3.217 at 150 and 3.404 at 354 (f32:
 * 2.838, 2.587, 2.494); on small its gain fell from 25 steps on. docs/studies/cold-start.md.
 */
export const SPARSE_MAX_INNER_STEPS = 50;

/** The most inner steps a round may take: maxInnerSteps, and SPARSE_MAX_INNER_STEPS on the sparse uplink. */
export function roundStepsCap(c: Pick<CoordinatorConfig, 'maxInnerSteps'> & { uplink?: { encoding: string } }): number {
  return c.uplink?.encoding === 'sparse' ? Math.min(c.maxInnerSteps, SPARSE_MAX_INNER_STEPS) : c.maxInnerSteps;
}

/**
 * An async merge window stays open half the median round (from its first Δ). At a quarter, the settings
 * matrix's async rows ended 1.01–1.05× the sync rows (sparse 2.644 against 2.563) on twice the versions, each
 * with fewer Δs; at a half they matched sync (2.515–2.562) in less virtual time, at goodput 1 and half the
 * bytes down; 0.75 and 1 gave the same (docs/studies/settings.md).
 */
export const ASYNC_WINDOW_FRACTION = 0.5;

export const DEFAULT_COORDINATOR_CONFIG: CoordinatorConfig = {
  mode: 'sync',
  outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 },
  soloPlainStep: true,
  freshInnerOptimizer: false,
  batchSize: 8,
  maxBatchSize: 64,
  seqLen: 32,
  innerLr: {
    maxLr: 3e-3,
    minLr: 3e-4,
    warmupTokens: 0,
    localWarmupSteps: COLD_START_WARMUP_STEPS,
    weightDecay: ADAMW_DEFAULTS.weightDecay,
  },
  gradClip: 1,
  totalTokens: 0,
  dataSeed: 1,
  innerSteps: 50,
  minInnerSteps: 4,
  maxInnerSteps: 2000,
  maxIslandRecords: 10_000,
  dylu: true,
  targetRoundMs: 0,
  quorum: 0.75,
  minContributors: 1,
  grace: { factor: 1.5, floorMs: 2_000, capMs: 120_000 },
  roundTimeoutMs: 600_000,
  lateDeltas: 'next-round',
  trimFraction: 0,
  aggregation: 'mean',
  clip: { iterations: 3, factor: 1 },
  asyncWindow: { fraction: ASYNC_WINDOW_FRACTION, floorMs: 0, capMs: 60_000 },
  maxStaleness: 8,
  staleness: 'inv-sqrt',
  maxTokenWeight: 4,
  normBound: { factor: 4, window: 32, minHistory: 3 },
  trustRegion: { factor: 2, window: 8 },
  uplink: { encoding: 'int8', blockSize: 64 },
  downlink: { encoding: 'int8', blockSize: 64 },
  keepUpdates: 64,
  islandTimeoutMs: 60_000,
  historyLimit: 10_000,
};

/** A partial config; nested groups may be partial too. */
export type CoordinatorConfigPatch = {
  [K in keyof CoordinatorConfig]?: CoordinatorConfig[K] extends object
    ? Partial<CoordinatorConfig[K]>
    : CoordinatorConfig[K];
};

/**
 * `base` with `patch` on top; nested groups merge key by key, except a codec (uplink, downlink) whose
 * encoding changes: it is replaced whole (sparse's blockSize 4096 and topkFraction are no int8 setting).
 */
export function mergeConfig(base: CoordinatorConfig, patch: CoordinatorConfigPatch): CoordinatorConfig {
  const out = structuredClone(base) as unknown as Record<string, unknown>;
  for (const [k, v] of Object.entries(patch)) {
    if (v === undefined) continue;
    const cur = out[k] as Record<string, unknown> | undefined;
    const newCodec =
      (k === 'uplink' || k === 'downlink') &&
      (v as { encoding?: string }).encoding !== undefined &&
      (v as { encoding?: string }).encoding !== cur?.encoding;
    out[k] =
      cur && typeof cur === 'object' && v && typeof v === 'object' && !newCodec
        ? { ...cur, ...(v as object) }
        : structuredClone(v);
  }
  return out as unknown as CoordinatorConfig;
}

/**
 * Returns a list of problems (empty when valid): each knob against its schema's type and range, then
 * what one knob's range cannot say (a floor above its cap, an odd block size).
 */
export function validateCoordinatorConfig(c: CoordinatorConfig): string[] {
  const p = schemaProblems(CoordinatorConfigSchema, c);
  if (p.length) return p;
  if (c.minInnerSteps > c.maxInnerSteps) p.push('minInnerSteps must be ≤ maxInnerSteps');
  if (c.grace.floorMs > c.grace.capMs) p.push('grace.floorMs must be ≤ grace.capMs');
  if (c.downlink.blockSize % 2 !== 0) p.push('downlink.blockSize must be even');
  if (c.uplink.blockSize !== undefined && c.uplink.blockSize % 2 !== 0) p.push('uplink.blockSize must be even');
  // the outer step's worker fragments cut a sparse update frame on whole bytes of its sections
  const cut = c.downlink.encoding === 'sparse' ? fragmentProblem(c.downlink) : null;
  if (cut) p.push(`downlink: ${cut}`);
  return p;
}

/** Weight multiplier for a delta of staleness τ ≥ 0. */
export function stalenessWeight(fn: StalenessFn, tau: number): number {
  if (tau <= 0) return 1;
  switch (fn) {
    case 'inv-sqrt':
      return 1 / Math.sqrt(1 + tau);
    case 'inv-linear':
      return 1 / (1 + tau);
    default:
      return 1;
  }
}

/** Keys that may change while a run is live (mode, shapes and the data seed may not). */
export const RUNTIME_KEYS: ReadonlyArray<keyof CoordinatorConfig> = [
  'outer',
  'soloPlainStep',
  'freshInnerOptimizer',
  'innerLr',
  'gradClip',
  'totalTokens',
  'innerSteps',
  'minInnerSteps',
  'maxInnerSteps',
  'dylu',
  'targetRoundMs',
  'quorum',
  'minContributors',
  'grace',
  'roundTimeoutMs',
  'lateDeltas',
  'trimFraction',
  'aggregation',
  'clip',
  'asyncWindow',
  'maxStaleness',
  'staleness',
  'maxTokenWeight',
  'normBound',
  'trustRegion',
  'uplink',
  'downlink',
  'keepUpdates',
  'islandTimeoutMs',
  'batchSize',
  'maxBatchSize',
  'historyLimit',
];

/** `cfg` with `patch` applied: E_BAD_CONFIG for a key fixed for the run (RUNTIME_KEYS) or a value out of range. */
export function patchConfig(cfg: CoordinatorConfig, patch: CoordinatorConfigPatch): Result<CoordinatorConfig> {
  for (const k of Object.keys(patch)) {
    if (!RUNTIME_KEYS.includes(k as keyof CoordinatorConfig))
      return err(ErrorCode.BAD_CONFIG, `${k} cannot change during a run`);
  }
  const next = mergeConfig(cfg, patch);
  const problems = validateCoordinatorConfig(next);
  return problems.length ? err(ErrorCode.BAD_CONFIG, problems.join('; ')) : ok(next);
}
