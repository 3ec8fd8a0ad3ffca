// Types of the simulator: what a run is made of (rows, islands) and what it reports.

import type { DownlinkEncoding, Encoding } from '../../core/codec/index.ts';
import type { CoordinatorConfigPatch } from '../../core/coord/index.ts';
import type { GPTConfig, PresetName } from '../../core/model/config.ts';
import type { SimEngineKind } from './engines.ts';
import type { TrainingMode } from '../../core/protocol.ts';
import type { Numerics } from './sim-engine.ts';
import type { MixConfig } from '../../core/mix/broker.ts';
import type { Scalars } from '../../server/run/scalars.ts';

/**
 * How a simulated island behaves when it sends its delta: honest, or an attack on it — scaled ×100
 * or ×4, sign-flipped, replaced by Gaussian noise of the same norm, NaNs, or a colluding pair that
 * both send one shared random direction (per base version) at their own Δ's norm.
 */
export type Behaviour =
  | 'honest'
  | 'scaled'
  | 'scale4'
  | 'sign-flip'
  | 'noise'
  | 'nan'
  | 'collude'
  | 'other-stream'
  | 'fewer-steps'
  | 'lie-fragment';

export interface NetworkSpec {
  /** Uplink and downlink bandwidth, bytes/s. */
  upBytesPerSec: number;
  downBytesPerSec: number;
  /** One-way latency, ms. */
  latencyMs: number;
}

export interface IslandSpec {
  name: string;
  /** Relative speed: 1 = `SimRow.baseTokensPerSec`. */
  speed: number;
  batchSize: number;
  behaviour: Behaviour;
  /** Joins at this virtual time (ms). */
  joinAtMs: number;
  /** Leaves for good at this virtual time (ms); Infinity = stays. */
  leaveAtMs: number;
  /** Probability, per round, of dropping out mid-round (crash: the round's work is lost). */
  dropProb: number;
  /** After a drop, back (rejoining under the same id, fresh optimizer) after this long, ms. */
  offlineMs: number;
  network: NetworkSpec;
  /** Weights kept in f16/bf16 on this island (rounded after each step); default f32. */
  numerics?: Numerics;
  /**
   * The engine's storage precision: 'f16' is --precision f16 (on the CPU engine, its kernels' CPU
   * twins; on --engine webgpu, the f16 kernels); default f32.
   */
  precision?: 'f32' | 'f16';
  /**
   * Devices behind this island (reported in its hello): batchSize and speed are their totals, one
   * Δ. It trains as one device at the whole batch, which the multi-device engine equals
   * (test/multi-device.test.ts). Default 1.
   */
  devices?: number;
  /** Non-i.i.d. data: this island trains on only this slice [from, to) of the train split (fractions). */
  shard?: [number, number];
  /**
   * Probability, per Δ, of crashing as the island hands it on: mixing, in its first group's exchange; else as it
   * uploads it (then back after offlineMs).
   */
  mixDropProb?: number;
}

/** One row of a comparison: a baseline or a DiLoCo configuration, on the same data and token budget. */
export interface SimRow {
  name: string;
  kind: 'ddp' | 'single' | 'diloco';
  mode: TrainingMode;
  islands: IslandSpec[];
  /** Uplink codec for the deltas (diloco). */
  codec: {
    encoding: Encoding;
    blockSize: number;
    deflate: boolean;
    topkFraction?: number;
    feedbackDecay?: number;
    strided?: boolean;
    valueBits?: 1 | 2;
  };
  /** Coordinator knobs (diloco); the simulator fills budget, batch and data fields. */
  coordinator: CoordinatorConfigPatch;
  /** Inner AdamW learning rate (peak, floor) and warmup in tokens; DDP/single use the same schedule. */
  lr: { maxLr: number; minLr: number; warmupTokens: number };
  /** Tokens in θ at which the row stops. */
  tokens: number;
  /** Seeds to run the row with (init, warm start and data); mean ± sd over them. Default [common seed]. */
  seeds?: number[];
  /** Virtual throughput of a speed-1 island, tokens/s. */
  baseTokensPerSec: number;
  /** Butterfly mixing in groups of k (mix-sim.ts); absent: every island uploads directly. */
  mix?: MixConfig;
  /**
   * Verified work: a validator audits this fraction of accepted deltas and bans at banAfter failures (audit-sim.ts).
   */
  audit?: { rate: number; banAfter: number };
}

/** Everything a row run needs besides the row. */
export interface SimCommon {
  model: PresetName;
  /** The model's shape when it is not a named preset (the scaling ladder's rungs); default getPreset(model). */
  config?: GPTConfig;
  /** Engine of every island, baseline and evaluation (default cpu): engines.ts. */
  engine?: SimEngineKind;
  seqLen: number;
  seed: number;
  /** Evaluate θ about this many times over the run. */
  evals: number;
  evalBatches: number;
  evalBatchSize: number;
  /** Corpus path (undefined: the bundled Moby-Dick). */
  data?: string;
  /** Shared starting point of every row (a warm start); undefined: initParams(model, seed). */
  init?: Float32Array;
  /** AdamW's hyperparameters of every engine the row makes (the scaling protocol's β2 0.99); default the engine's. */
  adam?: { beta1?: number; beta2?: number };
  /** Keep the rows of the run's metrics folder in the result (`scalars`; metrics.ts); default off. */
  scalars?: boolean;
}

/** What butterfly mixing did over a row (mix-sim.ts). */
export interface MixTotals {
  groups: number;
  mixedGroups: number;
  fallbacks: number;
  checks: number;
  audits: number;
  implicated: number;
  /** Bytes members sent each other (not the server's). */
  peerBytes: number;
  /** Members of groups that mixed, and the fragment bytes they uploaded (spot checks and replays apart). */
  mixedMembers: number;
  fragmentBytes: number;
  /** Update pieces exchanged and checked, and updates fetched whole after a missing or wrong piece. */
  piecesOk: number;
  piecesRefetched: number;
  /** Islands that waited formWaitMs and uploaded directly. */
  expired: number;
}

export interface CurvePoint {
  /** Tokens in θ, tokens computed by all islands (including lost work), virtual time. */
  tokens: number;
  tokensComputed: number;
  timeMs: number;
  evalLoss: number;
  /** The version (DiLoCo) or step (DDP, single) evaluated: the metrics folder's step (metrics.ts). */
  version?: number;
}

/** A row of a metrics folder (metrics.ts): its step (version or step), virtual ms since the run began, its scalars. */
export interface ScalarRow {
  step: number;
  timeMs: number;
  scalars: Scalars;
}

/** One point of a report row's eval curve: tokens in θ and the held-out loss there. */
export interface EvalPoint {
  tokens: number;
  evalLoss: number;
}

/**
 * A report's row: the run's figures, its eval curve (the plot's points, without the time axes) and
 * the most its eval loss ever stood above its running best (a fraction: 0.02 is 2 %).
 */
export type ReportRow = Omit<SimRunResult, 'curve'> & { evalCurve: EvalPoint[]; maxRise: number };

export interface IslandReport {
  name: string;
  speed: number;
  batchSize: number;
  behaviour: Behaviour;
  bytesUp: number;
  bytesDown: number;
  tokensComputed: number;
  rounds: number;
  accepted: number;
  /** Tokens of its deltas acknowledged as applied (what θ holds of its work). */
  acceptedTokens: number;
  rejected: Record<string, number>;
  drops: number;
  /** Updates applied with θ's hash checked against the server's, and those that did not match. */
  hashChecks?: number;
  hashMismatches?: number;
}

export interface SimRunResult {
  name: string;
  kind: SimRow['kind'];
  mode: TrainingMode | 'ddp' | 'single';
  codec: string;
  islands: number;
  /** Final held-out loss (mean over seeds) and its sample standard deviation (0 for one seed). */
  evalLoss: number;
  evalLossSd: number;
  /** The final held-out loss of each seed. */
  seedLosses: number[];
  /** Tokens in θ at the end. */
  tokens: number;
  tokensComputed: number;
  /** Mean bytes each island uploaded (deltas; DDP: its share of the ring all-reduce). */
  bytesUpPerIsland: number;
  bytesDownPerIsland: number;
  /** DDP's bytes up per island / this row's (filled by the comparison). */
  commReductionVsDdp: number;
  /** Tokens in θ / tokens computed. */
  goodput: number;
  accepted: number;
  rejected: Record<string, number>;
  versions: number;
  virtualTimeMs: number;
  realTimeMs: number;
  curve: CurvePoint[];
  /**
   * The outer steps (DiLoCo rows): each version's tokens in θ, ‖u‖, and the trust region's gain where
   * it acted (core/coord/trust.ts); `trustClips` and `shortRounds` count what the dashboard shows.
   */
  outerSteps?: Array<{ version: number; totalTokens: number; updateNorm: number; trustGain?: number }>;
  trustClips?: number;
  shortRounds?: number;
  perIsland: IslandReport[];
  /** Anything unusual (e.g. a diverged row). */
  notes: string[];
  /** Rows with `audit`: what the validator found. */
  audits?: AuditReport;
  /**
   * What the server received and sent (every message on the islands' server links), per token
   * accepted into θ. Egress excludes snapshots (θ whole, to a joining island), counted apart.
   */
  server: {
    bytesIn: number;
    bytesOut: number;
    snapshotBytes: number;
    inPerToken: number;
    outPerToken: number;
    /** The same bytes by message (socket.io event; 'model' the snapshot download). */
    byMessage?: Record<string, { in: number; out: number }>;
  };
  /** Rows with `mix`: groups, fallbacks, spot checks, audits. */
  mix?: MixTotals;
  /** With SimCommon.scalars: the metrics folder's rows (metrics.ts); the reports leave them out. */
  scalars?: ScalarRow[];
}

/** A validator's findings over one row: verdicts on honest and fake islands, and how soon fakes were banned. */
export interface AuditReport {
  audits: number;
  honestPassed: number;
  honestFailed: number;
  fakePassed: number;
  fakeFailed: number;
  /** Islands sending fake work that were audited at least once, and those banned. */
  fakeIslands: number;
  fakeBanned: number;
  /** Per banned fake island: its validations up to the ban. */
  validationsToBan: number[];
  minHonestCosine: number | null;
  maxFakeCosine: number | null;
}

/**
 * Options of `atoll simulate` (instruments/cli.ts parses flags with simulateOptionsFromCli and calls
 * runSimulate). Every field is optional; the defaults make `--preset compare`.
 */
export interface SimulateOptions {
  /**
   * 'compare' (default): the comparison table (scenarios.ts compareRows) — DDP, single island and
   * the async heterogeneous sparse row over 3 seeds; one island alone; sync int4, async int4; the
   * sparse row with 30% dropout, churn, mixed numerics, an uneven network, DyLU off, non-i.i.d.
   * shards; attackers (sign flip, ×4, same-norm noise, a colluding pair) with robust aggregation,
   * ×100 without the norm bound; butterfly mixing of the async sparse row in groups of 2, 4 and 8
   * (async-sparse-hetero-mixK), of 4 with 30 % of members dropping mid-exchange and with one lying
   * member per group, and the async int4 row in groups of 4. 'diloco': one DiLoCo row built from mode/codec/islands
   * plus the DDP and single baselines. 'smoke': a seconds-long sanity run (tests).
   */
  preset?: 'compare' | 'diloco' | 'smoke' | 'settings';
  /** Model preset, or a scaling rung's shape by name (`L3-C64`, …; default 'tiny'). */
  model?: string;
  /** Islands per DiLoCo row (default 8). */
  islands?: number;
  /** Token budget per row (tokens in θ). Default: sized so `compare` takes ~10 min on 2 cores. */
  tokens?: number;
  /** Alternative budget: rounds of the nominal island (tokens = rounds × islands × H × B × T). */
  rounds?: number;
  /** One seed and fewer, shorter rows (tests). */
  quick?: boolean;
  /** 'diloco' preset: sync or async (default async). */
  mode?: TrainingMode;
  /** 'diloco' preset: uplink encoding (default int4). */
  codec?: Encoding;
  /** Every DiLoCo row's downlink, as `serve --downlink` gives it (default: the row's). */
  downlink?: DownlinkEncoding;
  /**
   * Tokens of single-island training that every row starts from (DiLoCo's protocol: its runs start
   * from a pretrained model). Default 32768 for compare/diloco, 0 for smoke. Not counted in `tokens`.
   */
  warmStartTokens?: number;
  /** Replay an `atoll fleet` report.json: its twin, DDP and single rows, cold (the preset's rows are not run). */
  fromFleet?: string;
  /** Inner steps H of a nominal island (default: per preset). */
  innerSteps?: number;
  /** Every DiLoCo row's outer lr and momentum (default: serve's, 0.7 and 0.9; compare's rows 1.0 and 0.8). */
  outerLr?: number;
  /** The outer step's trust region factor on every DiLoCo row (0: off; core/coord/trust.ts). */
  trustRegion?: number;
  outerMomentum?: number;
  /** Peak inner lr of every row (the floor a tenth of it; default 3e-3). */
  innerLr?: number;
  /** Every island's link on the home network (default 20 Mbit/s up, 100 down, 30 ms). */
  network?: NetworkSpec;
  /** Engine of islands, baselines and evaluation: 'cpu' (default) or 'webgpu' (Dawn); virtual time either way. */
  engine?: SimEngineKind;
  /** Run folder for report.json, curves.csv, plot.svg, report.html, metrics/. Default runs/simulate-<time>. */
  out?: string;
  /** Print report.json on stdout instead of the table. */
  json?: boolean;
  /** Only these rows of the preset, by name (with quick: the full preset's rows, one seed). */
  rows?: string[];
  /** Extra rows by name to add to 'diloco' ('ddp', 'single'), comma-separated; 'none' drops them. */
  compare?: string;
  seed?: number;
  /** Parallel worker threads (default min(2, cores)); 0 = run rows in this thread. */
  workers?: number;
  /** Corpus path (default: the bundled Moby-Dick). */
  data?: string;
  /** Held-out batches per evaluation (default 64; smoke 2). */
  evalBatches?: number;
  /** Print the table (or the JSON) on stdout. Default true. */
  print?: boolean;
  /** Progress lines (default: stderr unless json). */
  log?: (line: string) => void;
  /** Progress per row: start(names) once the rows are known, then update(row index, fraction done). */
  progress?: { start(names: string[]): void; update(i: number, frac: number): void };
}

export interface SimReport {
  config: {
    preset: string;
    model: string;
    params: number;
    seqLen: number;
    tokens: number;
    warmStartTokens: number;
    warmStartEvalLoss: number;
    /** Each seed's warm start: tokens (doubled until off the unigram plateau) and held-out loss. */
    warmStarts: Array<{ seed: number; tokens: number; evalLoss: number }>;
    seed: number;
    workers: number;
    baseTokensPerSec: number;
    /** The link of every island on the home network (--network). */
    network: NetworkSpec;
    /** The report's header: the knobs against serve's defaults, the rows that differ and why, the time axis. */
    setting: string[];
    realTimeMs: number;
    rows: Array<
      Pick<SimRow, 'name' | 'kind' | 'mode' | 'codec' | 'lr' | 'coordinator'> & {
        islands: Array<Pick<IslandSpec, 'name' | 'speed' | 'batchSize' | 'behaviour' | 'dropProb'>>;
      }
    >;
  };
  runs: ReportRow[];
  /** The settings preset: the rows whose eval loss rose over riseLimit above its best, worst final ÷ best final. */
  settings?: { riseLimit: number; rising: string[]; worstOverBest: number };
}

/** What the twin replays: `atoll simulate --from-fleet report.json` reads it back. */
export interface TwinSpec {
  common: SimCommon;
  rows: SimRow[];
}
