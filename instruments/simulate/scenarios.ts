// The rows of `atoll simulate` presets.
//
// Hyperparameters (tiny, 8 islands, 200k tokens per row; measured with the simulator, see the
// report of the change that introduced them):
// - Warm start. From random init every data-parallel row (DDP and DiLoCo alike) sits for ~150
//   sequential steps on the byte-unigram plateau (held-out loss ≈ 3.1); 8-island DiLoCo never left
//   it within 240k tokens whatever we tried (H 8–40, outer lr 0.7–1.5, inner lr 3e-3–1e-2, f32 vs
//   int4: all ≈ 3.09–3.19, while DDP reached 2.69): averaging eight small-batch AdamW trajectories
//   cancels the symmetry-breaking directions. DiLoCo's own protocol starts from a pretrained model
//   (24k steps), so every row here starts from one shared 32k-token single-island checkpoint, its
//   tokens doubled while it is still on the plateau (row.ts, warmStartOffPlateau: seed 2 takes 64k).
// - Inner AdamW: peak 3e-3 (1e-2 hurt DDP: 2.92 vs 2.69 from scratch), cosine to 3e-4 over the
//   row's tokens, 8k-token warmup; the same schedule, in tokens, for DDP and the single island.
// - Outer: Nesterov lr 1.0, μ 0.8, for these runs of 15–30 outer steps (DiLoCo's 0.7, 0.9 is for
//   hundreds). Async merges the deltas of one merge window into one Nesterov step, a window that
//   holds part of a nominal fleet round by its share (momentum too); the former per-arrival delayed
//   Nesterov stays behind asyncWindow.fraction = 0.
// - H = 16 for the fastest island (DyLU time rule), batch 4 per island: 14 outer steps per row.
// - Sparse rows: half of each 4096-entry chunk, strided (the stride class of most energy: a u16
//   phase per chunk, no offsets), 1-bit values (sign × the chunk's mean kept magnitude), error
//   feedback decay β 0.35: 2.5159 at 200k tokens, seed 1 (DDP 2.4723), 1055× less upload. The
//   former top 1/64 with 2-bit values and 12-bit offsets (β 0.8: 2.6384) updated too few entries
//   per round, and its residual's stale backlog, amplified by momentum, hurt once the inner lr had
//   decayed: a small β (0.25–0.5) and many cheap entries are what closed the gap. docs/studies/compare.md
//   lists the settings tried.

import {
  type CoordinatorConfigPatch,
  DEFAULT_COORDINATOR_CONFIG,
  type OuterConfig,
  SPARSE_DOWNLINK,
  SPARSE_UPLINK,
} from '../../core/coord/index.ts';
import type { Encoding } from '../../core/codec/index.ts';
import type { TrainingMode } from '../../core/protocol.ts';
import type { Behaviour, IslandSpec, NetworkSpec, SimRow } from './types.ts';

/** Home broadband: 20 Mbit/s up, 100 Mbit/s down, 30 ms one way. */
export const HOME_NETWORK: NetworkSpec = { upBytesPerSec: 2.5e6, downBytesPerSec: 12.5e6, latencyMs: 30 };

export interface RowDefaults {
  islands: number;
  /** Seeds of the rows the goals compare. */
  seeds: number[];
  batchSize: number;
  tokens: number;
  /** H of the nominal (fastest) island. */
  innerSteps: number;
  baseTokensPerSec: number;
  seqLen: number;
  lr: SimRow['lr'];
  /** The DiLoCo rows' outer step (default SERVE_OUTER). */
  outer?: OuterConfig;
}

export function island(name: string, o: Partial<IslandSpec> = {}): IslandSpec {
  return {
    name,
    speed: 1,
    batchSize: 8,
    behaviour: 'honest',
    joinAtMs: 0,
    leaveAtMs: Infinity,
    dropProb: 0,
    offlineMs: 0,
    network: HOME_NETWORK,
    ...o,
  };
}

export function uniform(
  n: number,
  batchSize: number,
  behaviourOf: (i: number) => Behaviour = () => 'honest',
): IslandSpec[] {
  return Array.from({ length: n }, (_, i) => island(`island-${i + 1}`, { batchSize, behaviour: behaviourOf(i) }));
}

/**
 * Heterogeneous fleet, slow to fast: speeds 1×, 2×, 4× (about a third each) with batch sizes that
 * grow with speed (a phone runs small batches) and sum to n × batchSize, like DDP's batch. The
 * rounding correction goes to the last island (the 8-island fleets of the documented runs) unless
 * that would take it below 1 (32 islands of 4: −8 on a batch of 6); then it is spread one sequence
 * at a time from the last island back, each kept ≥ 1.
 */
export function heterogeneous(n: number, batchSize: number): IslandSpec[] {
  if (!Number.isInteger(n) || n < 1 || !Number.isInteger(batchSize) || batchSize < 1)
    throw new RangeError(`heterogeneous: n and batchSize must be positive integers, got ${n}, ${batchSize}`);
  const speeds = Array.from({ length: n }, (_, i) => (i < Math.round(n / 4) ? 1 : i < Math.round((5 * n) / 8) ? 2 : 4));
  const rel = speeds.map((s) => (s === 1 ? 0.5 : s === 2 ? 1 : 1.5));
  const scale = (n * batchSize) / rel.reduce((a, b) => a + b, 0);
  const bs = rel.map((r) => Math.max(1, Math.round(r * scale)));
  let diff = n * batchSize - bs.reduce((a, b) => a + b, 0);
  if (bs[n - 1] + diff >= 1) bs[n - 1] += diff;
  else
    for (let i = n - 1; diff !== 0; i = i > 0 ? i - 1 : n - 1)
      if (diff > 0 || bs[i] > 1) {
        const step = Math.sign(diff);
        bs[i] += step;
        diff -= step;
      }
  return speeds.map((speed, i) => island(`island-${i + 1}`, { speed, batchSize: bs[i] }));
}

/**
 * serve's outer step (DEFAULT_COORDINATOR_CONFIG: DiLoCo's Nesterov 0.7, μ 0.9): every row's unless it says otherwise.
 */
export const SERVE_OUTER: OuterConfig = DEFAULT_COORDINATOR_CONFIG.outer;

/**
 * The compare preset's outer step, a deliberate difference from serve's: Nesterov lr 1.0, μ 0.8 for
 * its runs of 15–30 outer steps (0.7, 0.9 is for hundreds). The report's header says so.
 */
export const SHORT_RUN_OUTER: OuterConfig = { kind: 'nesterov', lr: 1, momentum: 0.8, dnPeriod: 0 };

/** Row codecs: dense int4/int8/f32, or sparse: half of each 4096-entry chunk, strided, 1-bit values, EF decay 0.35. */
export function codecFor(encoding: Encoding): SimRow['codec'] {
  if (encoding === 'sparse') return { ...SPARSE_UPLINK, deflate: false };
  return { encoding, blockSize: encoding === 'int4' ? 256 : 64, deflate: encoding !== 'f32' };
}

export function diloco(
  name: string,
  d: RowDefaults,
  mode: TrainingMode,
  encoding: Encoding,
  islands: IslandSpec[],
  extra: CoordinatorConfigPatch = {},
): SimRow {
  const sparse = encoding === 'sparse';
  return {
    name,
    kind: 'diloco',
    mode,
    islands,
    codec: codecFor(encoding),
    coordinator: {
      outer: { ...(d.outer ?? SERVE_OUTER) },
      innerSteps: d.innerSteps,
      minInnerSteps: Math.max(1, Math.floor(d.innerSteps / 8)),
      maxInnerSteps: d.innerSteps * 4,
      // DyLU's time rule: the fastest island does H steps, every island returns at about the same time
      dylu: true,
      targetRoundMs: roundMs(d, islands),
      quorum: 1,
      maxStaleness: 4 * islands.length,
      normBound: { factor: 4, window: 32, minHistory: 3 },
      // the sparse rows' downlink (SPARSE_DOWNLINK, shared with `atoll serve`'s default run): int4, one
      // scale per 4096 entries, + deflate (error feedback on the server: replicas still apply the same decoded bits)
      ...(sparse ? { downlink: { ...SPARSE_DOWNLINK } } : {}),
      ...extra,
    },
    lr: d.lr,
    tokens: d.tokens,
    baseTokensPerSec: d.baseTokensPerSec,
    seeds: d.seeds,
  };
}

export function baseline(name: string, kind: 'ddp' | 'single', d: RowDefaults, islands: IslandSpec[]): SimRow {
  return {
    name,
    kind,
    mode: 'sync',
    islands,
    codec: { encoding: 'f32', blockSize: 64, deflate: false },
    coordinator: {},
    lr: d.lr,
    tokens: d.tokens,
    baseTokensPerSec: d.baseTokensPerSec,
    seeds: d.seeds,
  };
}

/** Virtual time of one round of the fastest island at H steps. */
function roundMs(d: RowDefaults, islands: IslandSpec[]): number {
  return Math.min(
    ...islands.map((s) => (1000 * d.innerSteps * s.batchSize * d.seqLen) / (s.speed * d.baseTokensPerSec)),
  );
}

/** The spot-check rate of the mixing rows: one fragment in ten is also uploaded by a second member. */
export const MIX_SPOT_RATE = 0.1;

/**
 * The headline row's islands mixing in groups of k: a ready island waits up to a quarter of a round
 * for its group, and a group falls back to direct uploads when its exchange is not done two rounds after it formed
 * (tiny rounds are short: 0.2-0.4 s of virtual time, where an int8 frame takes 47 ms a hop).
 */
export function mixed(
  name: string,
  d: RowDefaults,
  islands: IslandSpec[],
  k: number,
  rm: number,
  encoding: Encoding = 'sparse',
): SimRow {
  return {
    ...diloco(name, d, 'async', encoding, islands),
    mix: { k, formWaitMs: rm / 4, exchangeTimeoutMs: 2 * rm, spotRate: MIX_SPOT_RATE },
  };
}

/** The robust-aggregation setting of the attacker rows. */
export const ROBUST: CoordinatorConfigPatch = {
  aggregation: 'centered-clip',
  trimFraction: 0.125,
  normBound: { factor: 3, window: 32, minHistory: 3 },
};

/**
 * Verified work: 4 islands (sync, int8), the last sending plausible fake work; a validator audits
 * half of the accepted deltas and bans at 2 failures (its rounds start from a fresh AdamW, as the
 * server's are while it audits). 60k tokens: about 7 rounds.
 */
function audited(name: string, d: RowDefaults, fake: Behaviour): SimRow {
  const islands = uniform(4, d.batchSize, (i) => (i === 3 ? fake : 'honest'));
  return {
    ...diloco(name, { ...d, tokens: Math.min(d.tokens, 60_000) }, 'sync', 'int8', islands, {
      freshInnerOptimizer: true,
    }),
    audit: { rate: 0.5, banAfter: 2 },
  };
}

/**
 * The `compare` preset. The rows the goals compare (DDP, single, the async heterogeneous sparse row)
 * run on every seed in d.seeds; the others on the first. quick: DDP, single, one island, the
 * headline row and one attacker.
 */
export function compareRows(d: RowDefaults, quick = false): SimRow[] {
  const n = d.islands;
  const het = heterogeneous(n, d.batchSize);
  const one = { ...d, seeds: d.seeds.slice(0, 1) };
  const rm = roundMs(d, het);
  const attack = (bs: Behaviour[]) => het.map((s, i) => ({ ...s, behaviour: bs[n - 1 - i] ?? 'honest' }));
  // one island alone as the embedded default runs it (sync, int8), short rounds (H/4), against `single`
  const alone = diloco(
    'one-island',
    { ...one, innerSteps: Math.max(2, d.innerSteps >> 2) },
    'sync',
    'int8',
    uniform(1, d.batchSize),
  );
  const rows = [
    baseline('ddp', 'ddp', d, uniform(n, d.batchSize)),
    baseline('single', 'single', d, uniform(1, d.batchSize)),
    diloco('async-sparse-hetero', d, 'async', 'sparse', het),
    alone,
    diloco('async-sparse-signflip-robust', one, 'async', 'sparse', attack(['sign-flip']), ROBUST),
  ];
  if (quick) return rows;
  // churn: two islands join at a third of the run, two leave at two thirds (rounds ≈ tokens / fleet round)
  const runMs = (d.tokens / (n * d.innerSteps * d.batchSize * d.seqLen)) * rm;
  const churn = het.map((s, i) =>
    i < 2 ? { ...s, joinAtMs: runMs / 3 } : i >= n - 2 ? { ...s, leaveAtMs: (2 * runMs) / 3 } : s,
  );
  const drop30 = het.map((s) => ({ ...s, mixDropProb: 0.3, offlineMs: rm / 2 }));
  const phone: NetworkSpec = { upBytesPerSec: 250e3, downBytesPerSec: 1.25e6, latencyMs: 80 };
  return [
    ...rows,
    diloco('sync-int4', one, 'sync', 'int4', uniform(n, d.batchSize)),
    diloco('async-int4-hetero', one, 'async', 'int4', het),
    diloco(
      'async-sparse-dropout30',
      one,
      'async',
      'sparse',
      het.map((s) => ({ ...s, dropProb: 0.3, offlineMs: rm / 2 })),
    ),
    diloco('async-sparse-churn', one, 'async', 'sparse', churn),
    diloco(
      'async-sparse-mixed-numerics',
      one,
      'async',
      'sparse',
      het.map((s, i) => ({ ...s, numerics: i % 3 === 0 ? 'bf16' : i % 3 === 1 ? 'f16' : 'f32' })),
    ),
    diloco(
      'async-sparse-uneven-net',
      one,
      'async',
      'sparse',
      het.map((s, i) => (i === 0 ? { ...s, network: phone } : s)),
    ),
    diloco('async-sparse-dylu-off', one, 'async', 'sparse', het, { dylu: false }),
    diloco(
      'async-sparse-noniid',
      one,
      'async',
      'sparse',
      het.map((s, i) => ({ ...s, shard: [i / n, (i + 1) / n] as [number, number] })),
    ),
    diloco('async-sparse-scale4-robust', one, 'async', 'sparse', attack(['scale4']), ROBUST),
    diloco('async-sparse-noise-robust', one, 'async', 'sparse', attack(['noise']), ROBUST),
    diloco('async-sparse-collude-robust', one, 'async', 'sparse', attack(['collude', 'collude']), ROBUST),
    diloco('async-sparse-scale100-nobound', one, 'async', 'sparse', attack(['scaled']), { normBound: { factor: 0 } }),
    // butterfly mixing of the headline row in groups of k (mix-sim.ts); 30 % of members dropping
    // mid-exchange; one member of each group of 4 lying about its fragment
    ...[2, 4, 8].map((k) => mixed(`async-sparse-hetero-mix${k}`, one, het, k, rm)),
    mixed('async-int4-hetero-mix4', one, het, 4, rm, 'int4'),
    // the drop row's twin without groups: the same crashes, as each island uploads its Δ
    diloco('async-sparse-hetero-drop30', one, 'async', 'sparse', drop30),
    mixed('async-sparse-hetero-mix4-drop30', one, drop30, 4, rm),
    mixed(
      'async-sparse-hetero-mix4-liar',
      one,
      het.map((s, i) => (i % 4 === 3 ? { ...s, behaviour: 'lie-fragment' as const } : s)),
      4,
      rm,
    ),
    ...(['other-stream', 'fewer-steps'] as const).map((fake) => audited(`sync-int8-audit-${fake}`, one, fake)),
    ...mixedComputeRows(one),
  ];
}

/**
 * Compute islands with different numerics and parallelism in one run (issue 24): of n islands of
 * the heterogeneous fleet, a third keep f32, a third run f16 storage, and the fastest is a 2-device
 * island (its batch and speed the two devices' totals); and the same fleet all in f32.
 */
export function mixedComputeRows(d: RowDefaults): SimRow[] {
  const het = heterogeneous(d.islands, d.batchSize);
  const mixed = het.map((s, i) =>
    i === het.length - 1 ? { ...s, devices: 2 } : i % 2 === 1 ? { ...s, precision: 'f16' as const } : s,
  );
  return [
    diloco('sync-int8-mixed-compute', d, 'sync', 'int8', mixed),
    diloco(
      'sync-int8-mixed-compute-all-f32',
      d,
      'sync',
      'int8',
      mixed.map((s) => ({ ...s, precision: 'f32' as const })),
    ),
  ];
}

/** The `diloco` preset: one DiLoCo row of the chosen mode/codec, plus baselines. */
export function dilocoRows(d: RowDefaults, mode: TrainingMode, encoding: Encoding, baselines: string[]): SimRow[] {
  const rows: SimRow[] = [];
  if (baselines.includes('ddp')) rows.push(baseline('ddp', 'ddp', d, uniform(d.islands, d.batchSize)));
  if (baselines.includes('single')) rows.push(baseline('single', 'single', d, uniform(1, d.batchSize)));
  const islands = mode === 'async' ? heterogeneous(d.islands, d.batchSize) : uniform(d.islands, d.batchSize);
  rows.push(diloco(`${mode}-${encoding}`, d, mode, encoding, islands));
  return rows;
}
