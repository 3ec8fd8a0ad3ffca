// The scaling study's protocol, after Charles et al. 2025 (docs/studies/scaling.md; the anchor
// text: shared/anchors/algorithms.md, "The protocol, from the full text"), sized to the CPU ladder:
// what each rung trains (tokens, global batch, H, the inner schedule) and how each row is built
// from a RowSpec (an arm and its knobs). The search over the knobs is scaling-plan.ts.
//
//   const p = rungPlan(RUNGS[0], PROTOCOL);      // tokens, batch, H = 30, rounds of M = 8
//   const row = buildRow(p, { rung: 'tiny', arm: 'm8', lrK: 5, batch: 8, outerLr: 0.7, seed: 1 }, 0);

import { numParams } from '../../core/model/config.ts';
import type { OuterConfig } from '../../core/coord/outer.ts';
import { SPARSE_DOWNLINK } from '../../core/coord/index.ts';
import { RUNGS, type RungSpec } from './rungs.ts';
import { type RowDefaults, baseline, diloco, heterogeneous, uniform } from './scenarios.ts';
import type { SimRow } from './types.ts';

/** Inner steps per round of every row with islands, at every rung (the paper's H). */
export const PROTOCOL_H = 30;
export const SEQ_LEN = 32;
/** The rows with islands, each one change from the row before (m1 and m8 are the first two). */
export const ARMS = [
  'ddp',
  'm1',
  'm8',
  'm8-sparse',
  'm8-sparse-async',
  'production',
  'sparseloco',
  'm32',
  'm32-production',
] as const;
export type Arm = (typeof ARMS)[number];

/** One run of the study: an arm at a rung with its knobs and seed. */
export interface RowSpec {
  rung: string;
  arm: Arm;
  /** Inner peak lr as an index on the √2 grid: lrOf(k) = LR_BASE · 2^(k/2). */
  lrK: number;
  /** Global batch, sequences (the islands share it: batch / M each). */
  batch: number;
  /** Nesterov outer lr (ignored by ddp and sparseloco). */
  outerLr: number;
  seed: number;
}

export interface Protocol {
  /** Tokens per parameter, D = tpp · N (the paper's 20), raised where M = 8 would get fewer than minRounds rounds. */
  tokensPerParam: number;
  /** Least outer rounds of M = 8 at H = 30 (the done-when's 100). */
  minRounds: number;
  /** Global batch at the first rung (sequences): B(N) = 2^round(log2(batchBase · (N / N0)^0.45)). */
  batchBase: number;
  /** DDP's lr grid to start from (indices on the √2 grid), widened at most maxWiden points each way. */
  lrStart: number[];
  maxWiden: number;
  outerLrs: number[];
  /** Seeds of ddp, m1 and m8 at the first seedRungs rungs. */
  seeds: number;
  seedRungs: number;
}

export const PROTOCOL: Protocol = {
  tokensPerParam: 20,
  minRounds: 100,
  batchBase: 8,
  lrStart: [3, 4, 5, 6],
  maxWiden: 4,
  outerLrs: [0.4, 0.7, 1.0],
  seeds: 3,
  seedRungs: 2,
};

/**
 * `--quick`: the same stages on two rungs at 1/64 of the tokens (2 rounds of M = 8 at least), grids
 * of two points widened at most once, 2 seeds: a CI-sized smoke of the protocol, not a measurement.
 */
export const QUICK_PROTOCOL: Protocol = {
  ...PROTOCOL,
  tokensPerParam: 20 / 64,
  minRounds: 2,
  lrStart: [5, 6],
  maxWiden: 1,
  seeds: 2,
};

export const LR_BASE = 1e-3;
export const lrOf = (k: number): number => +(LR_BASE * 2 ** (k / 2)).toPrecision(4);
/** The paper's inner schedule, scaled: linear warmup over D / 16, cosine to 5 % of the peak. */
export const WARMUP_FRACTION = 1 / 16;
export const MIN_LR_FRACTION = 0.05;
/** AdamW β = (0.9, 0.99), global-norm clip 1 (every engine of every row). */
export const ADAM = { beta1: 0.9, beta2: 0.99 } as const;
export const OUTER_MOMENTUM = 0.9;
/** SparseLoCo's codec: top-64 of each 4,096-value chunk, 2-bit values, error feedback β 0.95, outer SGD lr 1. */
export const SPARSELOCO_UPLINK = {
  encoding: 'sparse',
  blockSize: 4096,
  deflate: false,
  topkFraction: 64 / 4096,
  strided: false,
  valueBits: 2,
  feedbackDecay: 0.95,
} as const;
export const SPARSELOCO_OUTER: OuterConfig = { kind: 'sgd', lr: 1, momentum: 0, dnPeriod: 0 };
const DENSE_F32 = { encoding: 'f32', blockSize: 64, deflate: false } as const;

/** Islands of each arm. */
export const islandsOf = (arm: Arm): number => (arm === 'ddp' || arm === 'm1' ? 1 : arm.startsWith('m32') ? 32 : 8);

export interface RungPlan {
  spec: RungSpec;
  params: number;
  /** D, tokens in θ per row (the warm start's inside it: the rows train D − warm start). */
  tokens: number;
  /** The rule's global batch (sequences) of every row with islands; DDP's batch grid starts here. */
  batch: number;
  /** Outer rounds of the M = 8 rows: D / (batch · T · H). */
  rounds: number;
}

/** The global batch rule: B grows as N^0.45 from batchBase at the first rung, in powers of 2. */
export function globalBatch(params: number, p: Protocol): number {
  const n0 = numParams(RUNGS[0].config);
  return 2 ** Math.max(0, Math.round(Math.log2(p.batchBase * (params / n0) ** 0.45)));
}

export function rungPlan(spec: RungSpec, p: Protocol): RungPlan {
  const params = numParams(spec.config);
  const batch = globalBatch(params, p);
  const round = batch * SEQ_LEN * PROTOCOL_H;
  const tokens = Math.max(Math.round(p.tokensPerParam * params), p.minRounds * round);
  return { spec, params, tokens, batch, rounds: tokens / round };
}

/** The row's name in tables: its arm and knobs (seed apart). */
export function rowName(s: RowSpec): string {
  const lr = `lr${lrOf(s.lrK)}`;
  if (s.arm === 'ddp') return `ddp-${lr}-b${s.batch}`;
  return s.arm === 'sparseloco' ? `${s.arm}-${lr}` : `${s.arm}-${lr}-olr${s.outerLr}`;
}

/** The key of a run in rows.jsonl: every knob that changes what it computes. */
export const rowKey = (s: RowSpec): string => `${s.rung}/${rowName(s)}/b${s.batch}/s${s.seed}`;

/** Whether an arm runs at a rung: the 32-island arms need a global batch of at least one sequence each. */
export const armRuns = (arm: Arm, batch: number): boolean => batch >= islandsOf(arm);

/** The SimRow of a RowSpec at its rung; `warmTokens` of the D are the shared warm start's. */
export function buildRow(plan: RungPlan, s: RowSpec, warmTokens: number): SimRow {
  const tokens = plan.tokens - warmTokens;
  const maxLr = lrOf(s.lrK);
  const n = islandsOf(s.arm);
  if (s.batch % n !== 0) throw new RangeError(`${rowName(s)}: batch ${s.batch} does not split over ${n} islands`);
  const d: RowDefaults = {
    islands: n,
    seeds: [s.seed],
    batchSize: s.batch / n,
    tokens,
    innerSteps: PROTOCOL_H,
    baseTokensPerSec: 2000,
    seqLen: SEQ_LEN,
    lr: { maxLr, minLr: maxLr * MIN_LR_FRACTION, warmupTokens: Math.round(tokens * WARMUP_FRACTION) },
    outer: { kind: 'nesterov', lr: s.outerLr, momentum: OUTER_MOMENTUM, dnPeriod: 0 },
  };
  const name = rowName(s);
  if (s.arm === 'ddp') {
    // one model on the whole batch, its gradient all-reduced over up to 8 workers
    const w = Math.min(8, s.batch);
    return baseline(name, 'ddp', d, uniform(w, s.batch / w));
  }
  const dense = { codec: { ...DENSE_F32 } };
  const denseDown = { downlink: { ...DENSE_F32 } };
  const row = (mode: 'sync' | 'async', enc: 'f32' | 'sparse', hetero: boolean, extra = {}): SimRow => {
    const islands = hetero ? heterogeneous(n, s.batch / n) : uniform(n, s.batch / n);
    const r = diloco(name, d, mode, enc, islands, { ...(enc === 'f32' ? denseDown : {}), ...extra });
    return enc === 'f32' ? { ...r, ...dense } : r;
  };
  switch (s.arm) {
    case 'm1':
      // a one-island round takes the outer step (Nesterov μ 0.9), not the plain step serve gives a lone island
      return row('sync', 'f32', false, { soloPlainStep: false });
    case 'm8':
    case 'm32':
      return row('sync', 'f32', false);
    case 'm8-sparse':
      return row('sync', 'sparse', false);
    case 'm8-sparse-async':
      return row('async', 'sparse', false);
    case 'production':
    case 'm32-production':
      return row('async', 'sparse', true);
    case 'sparseloco': {
      const r = row('sync', 'sparse', false, { outer: { ...SPARSELOCO_OUTER }, downlink: { ...SPARSE_DOWNLINK } });
      return { ...r, codec: { ...SPARSELOCO_UPLINK } };
    }
  }
}
