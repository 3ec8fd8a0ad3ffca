// Coordinator configuration: defaults, validation, and the knobs that may change at runtime.

import type { CodecOptions, Encoding } from '../codec/index.ts';
import { DOWNLINK_ENCODINGS, type DownlinkEncoding, ENCODINGS } from '../codec/index.ts';
import { ErrorCode, type TrainingMode } from '../protocol.ts';
import { type Result, err, ok } from '../result.ts';
import type { OuterConfig } from './outer.ts';

/** How a delta's weight falls with its staleness τ = v_now − v_base. */
export type StalenessFn = 'inv-sqrt' | 'inv-linear' | 'none';

export interface CoordinatorConfig {
  mode: TrainingMode;
  outer: OuterConfig;
  /** A round or window whose only delta comes from the only online island applies that Δ as is (lr 1, no momentum). */
  soloPlainStep: boolean;

  // ---- inner loop handed to islands
  /** Default micro-batch; an island's caps.batchSize is honoured within [1, maxBatchSize]. */
  batchSize: number;
  maxBatchSize: number;
  seqLen: number;
  innerLr: { maxLr: number; minLr: number; warmupTokens: number; localWarmupSteps: number };
  gradClip: number;
  /**
   * Dense codes: every round starts from a fresh AdamW (the assignment's freshOptimizer), so a
   * validator can recompute Δ from the job alone. On while the run audits (server/run/audit.ts); off, an
   * island keeps its AdamW across rounds (short rounds of one island otherwise lose ~5 % of loss).
   */
  freshInnerOptimizer: boolean;
  /** Run length in tokens in θ: drives the cosine and ends the run (E_DONE). 0 = open-ended. */
  totalTokens: number;
  dataSeed: number;

  // ---- DyLU: inner steps per island
  /** H: inner steps of the fastest island (or of every island when DyLU is off / speed unknown). */
  innerSteps: number;
  minInnerSteps: number;
  maxInnerSteps: number;
  /** Island records kept; past it the longest-gone ones that hold nothing are dropped (types.ts, makeRoom). */
  maxIslandRecords: number;
  dylu: boolean;
  /**
   * > 0: give each island the steps that take it this long at its measured tokens/s.
   * 0: Async Local-SGD's rule, H_i = H · v_i / v_max over the active islands.
   */
  targetRoundMs: number;

  // ---- sync rounds
  /** Fraction of the round's live members that must have submitted before the grace window may close it. */
  quorum: number;
  /** A round never closes with fewer deltas than this. */
  minContributors: number;
  /** Grace window after the round opened: clamp(factor × median return time so far, floorMs, capMs). */
  grace: { factor: number; floorMs: number; capMs: number };
  /** A round closes with what it has (≥ minContributors) this long after it opened, quorum or not. */
  roundTimeoutMs: number;
  /** A delta for an already closed round: fold it into the open round (staleness-weighted) or reject it (E_STALE). */
  lateDeltas: 'next-round' | 'drop';
  /** Token-weighted trimmed mean (and CenteredClip's start): this fraction of the weight off each end, per coordinate. */
  trimFraction: number;
  /** How a round's (or merge window's) deltas combine: weighted mean, token-weighted trimmed mean, or CenteredClip. */
  aggregation: 'mean' | 'trimmed-mean' | 'centered-clip';
  /** CenteredClip: iterations, and the clip radius as a multiple of the median distance from the start. */
  clip: { iterations: number; factor: number };

  // ---- async merge window: deltas arriving together merge into one outer step
  /**
   * The window closes when no online island is still working, or clamp(fraction × median round
   * duration, floorMs, capMs) after its first delta. fraction 0: no window, every arrival is its own
   * outer step scaled by s(τ) · tokens / expected / N (Async Local-SGD).
   */
  asyncWindow: { fraction: number; floorMs: number; capMs: number };

  // ---- staleness (async, and late deltas in sync)
  maxStaleness: number;
  staleness: StalenessFn;
  /** Async: a delta's token weight tokens / expected is capped at this. */
  maxTokenWeight: number;

  // ---- robustness
  /** Reject Δ when ‖Δ‖/√steps > factor × median of the last `window` accepted values ∪ the open round's (0 = off), once `minHistory` exist. */
  normBound: { factor: number; window: number; minHistory: number };

  // ---- codecs
  uplink: CodecOptions;
  /** The server's own update is sent, and applied, through this codec (with server-side error feedback). */
  downlink: { encoding: DownlinkEncoding; blockSize: number; deflate?: boolean };
  /** Update messages kept for catch-up; an island further behind fetches the snapshot. */
  keepUpdates: number;

  // ---- liveness
  /** An island unseen for this long is marked offline (and stops counting for quorum). */
  islandTimeoutMs: number;
  /** Per-version stats kept for the dashboard. */
  historyLimit: number;
}

/**
 * The sparse uplink measured in docs/research.md (section 5): half of each 4096-entry chunk,
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
 * The measured setting (docs/research.md, the comparison's async heterogeneous sparse row): async
 * merge windows, the sparse uplink and its downlink. `atoll serve`'s default run and the
 * simulator's sparse rows both read it from here.
 */
export const MEASURED_SETTING = {
  mode: 'async',
  uplink: SPARSE_UPLINK,
  downlink: SPARSE_DOWNLINK,
} as const satisfies Pick<CoordinatorConfig, 'mode' | 'uplink' | 'downlink'>;

/** The downlink of a dense uplink: int8, one scale per 64. */
export const DENSE_DOWNLINK = { encoding: 'int8', blockSize: 64 } as const satisfies CoordinatorConfig['downlink'];

/**
 * The codecs an encoding name stands for, wherever a user picks one (`--codec`, the admin API's
 * `codec`): sparse is the measured sparse uplink with its int4 downlink; any other encoding is a dense
 * uplink at the codec's own defaults with the int8 downlink.
 */
export function codecSetting(encoding: Encoding): Pick<CoordinatorConfig, 'uplink' | 'downlink'> {
  return encoding === 'sparse'
    ? { uplink: { ...SPARSE_UPLINK }, downlink: { ...SPARSE_DOWNLINK } }
    : { uplink: { encoding }, downlink: { ...DENSE_DOWNLINK } };
}

/**
 * Every island warms up its inner lr over the first steps of a fresh AdamW state (InnerLrPlan.
 * localWarmupSteps): Adam's first steps move every weight by about ±lr whatever its gradient, and on
 * a cold model they overshoot (`small`, no warmup: a 4-step first round took the held-out loss from
 * 5.621 to 7.648). Counted in the island's own steps, it holds for a late joiner and for rounds of any
 * length; 2 / (1 − β2) steps (β2 = 0.95: 40) is the untuned rule for Adam (Ma & Yarats 2021).
 * docs/research.md, "Cold start", has the figures.
 */
export const COLD_START_WARMUP_STEPS = 40;

export const DEFAULT_COORDINATOR_CONFIG: CoordinatorConfig = {
  mode: 'sync',
  outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 },
  soloPlainStep: true,
  freshInnerOptimizer: false,
  batchSize: 8,
  maxBatchSize: 64,
  seqLen: 32,
  innerLr: { maxLr: 3e-3, minLr: 3e-4, warmupTokens: 0, localWarmupSteps: COLD_START_WARMUP_STEPS },
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
  asyncWindow: { fraction: 0.25, floorMs: 0, capMs: 60_000 },
  maxStaleness: 8,
  staleness: 'inv-sqrt',
  maxTokenWeight: 4,
  normBound: { factor: 4, window: 32, minHistory: 3 },
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

/** Returns a list of problems (empty when valid). */
export function validateCoordinatorConfig(c: CoordinatorConfig): string[] {
  const p: string[] = [];
  const num = (name: string, v: unknown, lo: number, hi: number, int = false) => {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi || (int && !Number.isInteger(v))) {
      p.push(`${name} must be ${int ? 'an integer' : 'a number'} in [${lo}, ${hi}], got ${String(v)}`);
    }
  };
  if (c.mode !== 'sync' && c.mode !== 'async') p.push(`mode must be 'sync' or 'async', got ${String(c.mode)}`);
  if (!['nesterov', 'sgd', 'delayed-nesterov'].includes(c.outer?.kind))
    p.push(`outer.kind must be nesterov|sgd|delayed-nesterov`);
  num('outer.lr', c.outer?.lr, 0, 10);
  if (typeof c.soloPlainStep !== 'boolean') p.push('soloPlainStep must be a boolean');
  if (typeof c.freshInnerOptimizer !== 'boolean') p.push('freshInnerOptimizer must be a boolean');
  num('outer.momentum', c.outer?.momentum, 0, 0.999);
  num('outer.dnPeriod', c.outer?.dnPeriod, 0, 1e6, true);
  num('batchSize', c.batchSize, 1, 1e6, true);
  num('maxBatchSize', c.maxBatchSize, 1, 1e6, true);
  num('seqLen', c.seqLen, 1, 1e6, true);
  num('innerLr.maxLr', c.innerLr?.maxLr, 0, 10);
  num('innerLr.minLr', c.innerLr?.minLr, 0, 10);
  num('innerLr.warmupTokens', c.innerLr?.warmupTokens, 0, 1e15);
  num('innerLr.localWarmupSteps', c.innerLr?.localWarmupSteps, 0, 1e9, true);
  num('gradClip', c.gradClip, 0, 1e9);
  num('totalTokens', c.totalTokens, 0, 1e15);
  num('dataSeed', c.dataSeed, 0, 2 ** 32 - 1, true);
  num('innerSteps', c.innerSteps, 1, 1e7, true);
  num('minInnerSteps', c.minInnerSteps, 1, 1e7, true);
  num('maxInnerSteps', c.maxInnerSteps, 1, 1e7, true);
  num('maxIslandRecords', c.maxIslandRecords, 1, 1e7, true);
  if (c.minInnerSteps > c.maxInnerSteps) p.push('minInnerSteps must be ≤ maxInnerSteps');
  num('targetRoundMs', c.targetRoundMs, 0, 1e9);
  num('quorum', c.quorum, 0, 1);
  num('minContributors', c.minContributors, 1, 1e6, true);
  num('grace.factor', c.grace?.factor, 0, 1e3);
  num('grace.floorMs', c.grace?.floorMs, 0, 1e9);
  num('grace.capMs', c.grace?.capMs, 0, 1e9);
  if (c.grace && c.grace.floorMs > c.grace.capMs) p.push('grace.floorMs must be ≤ grace.capMs');
  num('roundTimeoutMs', c.roundTimeoutMs, 1, 1e10);
  if (c.lateDeltas !== 'next-round' && c.lateDeltas !== 'drop') p.push(`lateDeltas must be 'next-round' or 'drop'`);
  num('trimFraction', c.trimFraction, 0, 0.49);
  if (!['mean', 'trimmed-mean', 'centered-clip'].includes(c.aggregation))
    p.push('aggregation must be mean|trimmed-mean|centered-clip');
  num('clip.iterations', c.clip?.iterations, 1, 100, true);
  num('clip.factor', c.clip?.factor, 0, 1e6);
  num('asyncWindow.fraction', c.asyncWindow?.fraction, 0, 100);
  num('asyncWindow.floorMs', c.asyncWindow?.floorMs, 0, 1e9);
  num('asyncWindow.capMs', c.asyncWindow?.capMs, 0, 1e9);
  num('maxStaleness', c.maxStaleness, 0, 1e6, true);
  if (!['inv-sqrt', 'inv-linear', 'none'].includes(c.staleness)) p.push('staleness must be inv-sqrt|inv-linear|none');
  num('maxTokenWeight', c.maxTokenWeight, 0.001, 1e6);
  num('normBound.factor', c.normBound?.factor, 0, 1e9);
  num('normBound.window', c.normBound?.window, 1, 1e6, true);
  num('normBound.minHistory', c.normBound?.minHistory, 1, 1e6, true);
  if (!c.uplink || !ENCODINGS.includes(c.uplink.encoding))
    p.push(`uplink.encoding must be one of ${ENCODINGS.join('|')}`);
  if (c.uplink?.blockSize !== undefined) num('uplink.blockSize', c.uplink.blockSize, 8, 65536, true);
  if (c.uplink?.topkFraction !== undefined) num('uplink.topkFraction', c.uplink.topkFraction, 1e-9, 1);
  if (c.uplink?.feedbackDecay !== undefined) num('uplink.feedbackDecay', c.uplink.feedbackDecay, 0, 1);
  if (c.uplink?.strided !== undefined && typeof c.uplink.strided !== 'boolean')
    p.push('uplink.strided must be a boolean');
  if (c.uplink?.valueBits !== undefined && c.uplink.valueBits !== 1 && c.uplink.valueBits !== 2)
    p.push('uplink.valueBits must be 1 or 2');
  if (!DOWNLINK_ENCODINGS.includes(c.downlink?.encoding))
    p.push(`downlink.encoding must be one of ${DOWNLINK_ENCODINGS.join('|')}`);
  num('downlink.blockSize', c.downlink?.blockSize, 8, 65536, true);
  if (c.downlink && c.downlink.blockSize % 2 !== 0) p.push('downlink.blockSize must be even');
  if (c.uplink?.blockSize !== undefined && c.uplink.blockSize % 2 !== 0) p.push('uplink.blockSize must be even');
  num('keepUpdates', c.keepUpdates, 0, 1e6, true);
  num('islandTimeoutMs', c.islandTimeoutMs, 1, 1e10);
  num('historyLimit', c.historyLimit, 1, 1e7, true);
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
