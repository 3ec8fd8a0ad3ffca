// The coordinator's part of the run config as a TypeBox schema: each knob's name, description and
// range in one place. CoordinatorConfig is its Static type (config.ts); validateCoordinatorConfig,
// the `--config` file check, the serve and simulate flags and the Admin PATCH all read it.
// `fixed` says why a knob cannot change once the run has begun (absent: it may, on resume or live).

import { type TSchema, Type } from '@sinclair/typebox';
import type { CodecOptions } from '../codec/index.ts';
import { DOWNLINK_ENCODINGS, ENCODINGS } from '../codec/index.ts';
import type { OuterConfig } from './outer.ts';

type Opts = { description: string; fixed?: string };
const oneOf = <T extends string | number>(values: readonly T[], o: Opts) =>
  Type.Union(
    values.map((v) => Type.Literal(v)),
    o,
  );
/** A number in [lo, hi]. */
export const num = (lo: number, hi: number, o: Opts) => Type.Number({ minimum: lo, maximum: hi, ...o });
/** An integer in [lo, hi]. */
export const int = (lo: number, hi: number, o: Opts) => Type.Integer({ minimum: lo, maximum: hi, ...o });
const bool = (o: Opts) => Type.Boolean(o);
const group = <P extends Record<string, TSchema>>(props: P, description: string) => Type.Object(props, { description });

const MS = 1e10;

export const OuterSchema = Type.Unsafe<OuterConfig>(
  group(
    {
      kind: oneOf(['nesterov', 'sgd', 'delayed-nesterov'] as const, { description: 'the outer optimizer' }),
      lr: num(0, 10, { description: 'outer learning rate' }),
      momentum: num(0, 0.999, { description: 'outer Nesterov momentum' }),
      dnPeriod: int(0, 1e6, { description: 'delayed-nesterov: arrivals per momentum step (0: the active islands)' }),
    },
    'the outer step on the merged pseudo-gradient',
  ),
);

export const UplinkSchema = Type.Unsafe<CodecOptions>(
  Type.Object(
    {
      encoding: oneOf(ENCODINGS, { description: 'delta encoding' }),
      blockSize: Type.Optional(int(8, 65536, { description: 'elements per scale block (even)' })),
      topkFraction: Type.Optional(num(1e-9, 1, { description: 'topk/sparse: fraction of entries kept' })),
      feedbackDecay: Type.Optional(num(0, 1, { description: 'error feedback decay β per round' })),
      strided: Type.Optional(bool({ description: 'sparse: keep entries at a stride (no offsets sent)' })),
      valueBits: Type.Optional(oneOf([1, 2] as const, { description: 'sparse: bits per kept value' })),
      deflate: Type.Optional(bool({ description: 'deflate the payload' })),
    },
    { description: 'how islands encode Δ (core/codec)' },
  ),
);

export const DownlinkSchema = Type.Object(
  {
    encoding: oneOf(DOWNLINK_ENCODINGS, { description: "encoding of the server's update" }),
    blockSize: int(8, 65536, { description: 'elements per scale block (even)' }),
    deflate: Type.Optional(bool({ description: 'deflate the update frame' })),
    topkFraction: Type.Optional(num(1e-9, 1, { description: 'sparse: fraction of each chunk kept' })),
    strided: Type.Optional(bool({ description: 'sparse: keep entries at a stride (no offsets sent)' })),
    valueBits: Type.Optional(oneOf([1, 2] as const, { description: 'sparse: bits per kept value' })),
    feedbackDecay: Type.Optional(num(0, 1, { description: "the server's error feedback decay per step" })),
  },
  { description: "the server's update, sent and applied through this codec (server-side error feedback)" },
);

export const InnerLrSchema = group(
  {
    maxLr: num(0, 10, { description: 'peak inner AdamW learning rate' }),
    minLr: num(0, 10, { description: 'inner lr at the end of the cosine (over totalTokens)' }),
    warmupTokens: num(0, 1e15, { description: 'linear warmup over the first tokens of the run' }),
    localWarmupSteps: int(0, 1e9, { description: "warmup of a fresh AdamW state, in the island's own steps" }),
    weightDecay: num(0, 10, { description: "inner AdamW's decoupled weight decay (scaled by the lr)" }),
  },
  "the inner optimizer's plan handed to islands (core/protocol.ts InnerLrPlan)",
);

const FIXED_SHAPE = "islands' batches are cut at this length from the run's first step";

export const CoordinatorConfigSchema = Type.Object(
  {
    mode: oneOf(['sync', 'async'] as const, {
      description: 'DiLoCo mode',
      fixed: 'sync rounds and async merge windows keep different state in every checkpoint',
    }),
    outer: OuterSchema,
    soloPlainStep: bool({ description: "a round whose only Δ is the only online island's applies it as is" }),
    batchSize: int(1, 1e6, { description: "default micro-batch (an island's caps honoured up to maxBatchSize)" }),
    maxBatchSize: int(1, 1e6, { description: 'largest micro-batch an island is given' }),
    seqLen: int(1, 1e6, { description: 'sequence length of the inner steps', fixed: FIXED_SHAPE }),
    innerLr: InnerLrSchema,
    gradClip: num(0, 1e9, { description: 'inner global gradient-norm clip (0: off)' }),
    freshInnerOptimizer: bool({ description: 'every round starts from a fresh AdamW (dense codes while auditing)' }),
    totalTokens: num(0, 1e15, {
      description: 'run length in tokens in θ: drives the cosine and ends the run (0: open-ended)',
    }),
    dataSeed: int(0, 2 ** 32 - 1, {
      description: "seed of the islands' batch streams",
      fixed: 'every island has drawn its batches from it since the run began',
    }),
    innerSteps: int(1, 1e7, { description: 'inner steps per round (of the fastest island)' }),
    minInnerSteps: int(1, 1e7, { description: 'fewest inner steps DyLU gives an island' }),
    maxInnerSteps: int(1, 1e7, { description: 'most inner steps DyLU gives an island' }),
    maxIslandRecords: int(1, 1e7, {
      description: 'island records kept (the longest-gone ones that hold nothing are dropped)',
      fixed: 'the island book is sized when the coordinator is made',
    }),
    dylu: bool({ description: "size each island's round to its speed (DyLU)" }),
    targetRoundMs: num(0, 1e9, { description: 'target round time, ms (0: fixed inner steps)' }),
    quorum: num(0, 1, {
      description: 'sync: fraction of the round that must report before the grace window may close it',
    }),
    minContributors: int(1, 1e6, { description: 'a round never closes with fewer deltas' }),
    grace: group(
      {
        factor: num(0, 1e3, { description: 'grace window: this × the median return time so far' }),
        floorMs: num(0, 1e9, { description: 'shortest grace window, ms' }),
        capMs: num(0, 1e9, { description: 'longest grace window, ms' }),
      },
      'sync: the grace window after the round opened',
    ),
    roundTimeoutMs: num(1, MS, { description: 'a round closes with what it has this long after it opened, ms' }),
    lateDeltas: oneOf(['next-round', 'drop'] as const, {
      description: 'a Δ for a closed round: fold it in or drop it',
    }),
    trimFraction: num(0, 0.49, { description: 'trimmed mean: fraction of the weight off each end' }),
    aggregation: oneOf(['mean', 'trimmed-mean', 'centered-clip'] as const, { description: 'how deltas combine' }),
    clip: group(
      {
        iterations: int(1, 100, { description: 'CenteredClip iterations' }),
        factor: num(0, 1e6, { description: 'clip radius × the median distance from the start' }),
      },
      'CenteredClip',
    ),
    asyncWindow: group(
      {
        fraction: num(0, 100, { description: 'window: this × the median round duration (0: per arrival)' }),
        floorMs: num(0, 1e9, { description: 'shortest merge window, ms' }),
        capMs: num(0, 1e9, { description: 'longest merge window, ms' }),
      },
      'async: deltas arriving together merge into one outer step',
    ),
    maxStaleness: int(0, 1e6, { description: 'reject deltas more than this many versions behind' }),
    staleness: oneOf(['inv-sqrt', 'inv-linear', 'none'] as const, { description: 'weight of a stale Δ' }),
    maxTokenWeight: num(0.001, 1e6, { description: "async: cap of a Δ's token weight" }),
    normBound: group(
      {
        factor: num(0, 1e9, { description: 'reject ‖Δ‖/√steps above this × the median (0: off)' }),
        window: int(1, 1e6, { description: 'accepted values the median is taken over' }),
        minHistory: int(1, 1e6, { description: 'values needed before the bound applies' }),
      },
      'the norm bound on deltas',
    ),
    trustRegion: group(
      {
        factor: num(0, 1e6, { description: 'cap ‖u‖ at this × the median of the recent ones (0: off)' }),
        window: int(1, 1e6, { description: 'recent versions the median is taken over (none capped before)' }),
      },
      "the outer step's trust region (core/coord/trust.ts)",
    ),
    uplink: UplinkSchema,
    downlink: DownlinkSchema,
    keepUpdates: int(0, 1e6, { description: 'update messages kept for catch-up' }),
    islandTimeoutMs: num(1, MS, { description: 'an island unseen this long is marked offline, ms' }),
    historyLimit: int(1, 1e7, { description: "per-version stats kept in the coordinator's snapshot" }),
  },
  { description: 'the coordinator (core/coord)' },
);
