// The rows of `atoll simulate` presets.
//
// Hyperparameters (tiny, 8 islands, 200k tokens per row; measured with the simulator, see the
// report of the change that introduced them):
// - Warm start. From random init every data-parallel row (DDP and DiLoCo alike) sits for ~150
//   sequential steps on the byte-unigram plateau (held-out loss ≈ 3.1); 8-island DiLoCo never left
//   it within 240k tokens whatever we tried (H 8–40, outer lr 0.7–1.5, inner lr 3e-3–1e-2, f32 vs
//   int4: all ≈ 3.09–3.19, while DDP reached 2.69): averaging eight small-batch AdamW trajectories
//   cancels the symmetry-breaking directions. DiLoCo's own protocol starts from a pretrained model
//   (24k steps), so every row here starts from one shared 32k-token single-island checkpoint.
// - Inner AdamW: peak 3e-3 (1e-2 hurt DDP: 2.92 vs 2.69 from scratch), cosine to 3e-4 over the
//   row's tokens, 8k-token warmup; the same schedule, in tokens, for DDP and the single island.
// - Outer: DiLoCo's Nesterov lr 0.7, μ 0.9 (sync); lr 1.0 gave the same loss, 1.5 spiked. Async:
//   delayed Nesterov lr 0.7, μ 0.9, period = active islands, staleness weight 1/√(1+τ): lr 1.0
//   (+0.023) and no staleness discount (+0.023) were both worse.
// - H = 16 for the fastest island (DyLU time rule), batch 4 per island: 14 outer steps per row.

import type { CoordinatorConfigPatch } from '../../core/coord/index.ts';
import type { Encoding } from '../../core/codec/index.ts';
import type { TrainingMode } from '../../core/protocol.ts';
import type { Behaviour, IslandSpec, NetworkSpec, SimRow } from './types.ts';

/** Home broadband: 20 Mbit/s up, 100 Mbit/s down, 30 ms one way. */
export const HOME_NETWORK: NetworkSpec = { upBytesPerSec: 2.5e6, downBytesPerSec: 12.5e6, latencyMs: 30 };

export interface RowDefaults {
  islands: number;
  batchSize: number;
  tokens: number;
  /** H of the nominal (fastest) island. */
  innerSteps: number;
  baseTokensPerSec: number;
  seqLen: number;
  lr: SimRow['lr'];
}

export function island(name: string, o: Partial<IslandSpec> = {}): IslandSpec {
  return {
    name, speed: 1, batchSize: 8, behaviour: 'honest', joinAtMs: 0, leaveAtMs: Infinity, dropProb: 0, offlineMs: 0,
    network: HOME_NETWORK, ...o,
  };
}

function uniform(n: number, batchSize: number, behaviourOf: (i: number) => Behaviour = () => 'honest'): IslandSpec[] {
  return Array.from({ length: n }, (_, i) => island(`island-${i + 1}`, { batchSize, behaviour: behaviourOf(i) }));
}

/**
 * Heterogeneous fleet, slow to fast: speeds 1×, 2×, 4× (about a third each) with batch sizes that
 * grow with speed (a phone runs small batches) and sum to n × batchSize, like DDP's batch.
 */
export function heterogeneous(n: number, batchSize: number): IslandSpec[] {
  const speeds = Array.from({ length: n }, (_, i) => (i < Math.round(n / 4) ? 1 : i < Math.round((5 * n) / 8) ? 2 : 4));
  const rel = speeds.map((s) => (s === 1 ? 0.5 : s === 2 ? 1 : 1.5));
  const scale = (n * batchSize) / rel.reduce((a, b) => a + b, 0);
  const bs = rel.map((r) => Math.max(1, Math.round(r * scale)));
  bs[bs.length - 1] += n * batchSize - bs.reduce((a, b) => a + b, 0); // exact total
  return speeds.map((speed, i) => island(`island-${i + 1}`, { speed, batchSize: bs[i] }));
}

/** DiLoCo's outer optimizer in sync mode; in async mode delayed Nesterov (Async Local-SGD). */
export function outerFor(mode: TrainingMode): CoordinatorConfigPatch {
  return mode === 'sync'
    ? { outer: { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 } }
    : { outer: { kind: 'delayed-nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 } };
}

function diloco(name: string, d: RowDefaults, mode: TrainingMode, encoding: Encoding, islands: IslandSpec[], extra: CoordinatorConfigPatch = {}): SimRow {
  return {
    name, kind: 'diloco', mode, islands,
    codec: { encoding, blockSize: encoding === 'int4' ? 256 : 64, deflate: encoding !== 'f32' },
    coordinator: {
      ...outerFor(mode),
      innerSteps: d.innerSteps, minInnerSteps: Math.max(1, Math.floor(d.innerSteps / 8)), maxInnerSteps: d.innerSteps * 4,
      // DyLU's time rule: the fastest island does H steps, every island returns at about the same time
      dylu: true, targetRoundMs: Math.min(...islands.map((s) => (1000 * d.innerSteps * s.batchSize * d.seqLen) / (s.speed * d.baseTokensPerSec))),
      quorum: 1, maxStaleness: 4 * islands.length,
      normBound: { factor: 4, window: 32, minHistory: 3 },
      ...extra,
    },
    lr: d.lr, tokens: d.tokens, baseTokensPerSec: d.baseTokensPerSec,
  };
}

function baseline(name: string, kind: 'ddp' | 'single', d: RowDefaults, islands: IslandSpec[]): SimRow {
  return {
    name, kind, mode: 'sync', islands, codec: { encoding: 'f32', blockSize: 64, deflate: false },
    coordinator: {}, lr: d.lr, tokens: d.tokens, baseTokensPerSec: d.baseTokensPerSec,
  };
}

/** The `compare` preset: the eight rows of the comparison table. */
export function compareRows(d: RowDefaults): SimRow[] {
  const n = d.islands;
  const het = heterogeneous(n, d.batchSize);
  // 30% chance per round of crashing mid-round; back (fresh optimizer, same id) half a round later
  const roundMs = Math.min(...het.map((s) => (1000 * d.innerSteps * s.batchSize * d.seqLen) / (s.speed * d.baseTokensPerSec)));
  const drop = het.map((s) => ({ ...s, dropProb: 0.3, offlineMs: roundMs / 2 }));
  const malicious = (i: number): Behaviour => (i === n - 1 ? 'scaled' : 'honest');
  return [
    baseline('ddp', 'ddp', d, uniform(n, d.batchSize)),
    baseline('single', 'single', d, uniform(1, d.batchSize)),
    diloco('sync-f32', d, 'sync', 'f32', uniform(n, d.batchSize)),
    diloco('sync-int4', d, 'sync', 'int4', uniform(n, d.batchSize)),
    diloco('async-int4-hetero', d, 'async', 'int4', het),
    diloco('async-int4-dropout30', d, 'async', 'int4', drop),
    diloco('sync-int4-malicious-bound', d, 'sync', 'int4', uniform(n, d.batchSize, malicious)),
    diloco('sync-int4-malicious-nobound', d, 'sync', 'int4', uniform(n, d.batchSize, malicious), { normBound: { factor: 0 } }),
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
