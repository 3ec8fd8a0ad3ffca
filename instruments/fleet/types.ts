// Types of `atoll fleet`: the spec of a live run, what the live run measured, and the report.

import type { MixStatus, RunConfig } from '../../core/api.ts';
import type { PresetName } from '../../core/model/config.ts';
import type { EvalPoint, IslandSpec, ReportRow, SimRunResult, TwinSpec } from '../simulate/types.ts';

/**
 * One event of the schedule: at this fraction of the token budget in θ, `count` Node islands join, leave (SIGTERM) or
 * are killed (-9) and restarted.
 */
export interface ScheduleEvent {
  action: 'join' | 'leave' | 'kill';
  count: number;
  at: number;
}

export interface FleetSpec {
  preset: PresetName;
  /** Node islands (separate processes), those of `join` events included. */
  islands: number;
  /** Headless Chromium volunteer pages. */
  browsers: number;
  /** Node islands' engines, cycled. */
  engines: string[];
  /** Node islands' micro-batches, cycled (empty: the run's batch). */
  batches: number[];
  /** Node islands' duty cycles, cycled. */
  duty: number[];
  schedule: ScheduleEvent[];
  /** Tokens in θ that end the run. */
  tokens: number;
  data?: string;
  seed: number;
  mode?: string;
  codec?: string;
  /** A JSON run config (as `serve --config`). */
  config?: string;
  /** The Redis roles: a URL, or true to start a redis-server. */
  redis?: string | true;
  /** Butterfly mixing's group size (`atoll serve --mix-group`); 0: off. */
  mixGroup: number;
  /** Evaluation points over the run (θ is kept at each). */
  evals: number;
  evalBatches: number;
  timeoutMs: number;
}

/** One island process (a restart is another) or page, as the live run saw it. */
export interface LiveIsland {
  name: string;
  kind: 'node' | 'page';
  engine: string;
  batchSize: number;
  duty: number;
  /** Island ids the server gave it. */
  ids: string[];
  /** ms from the fleet's start to its first round; -1: never got one. */
  joinAtMs: number;
  /** ms from the fleet's start to its leave or kill; null: stayed to the end. */
  leaveAtMs: number | null;
  lastMs: number;
  killed: boolean;
  /** Time between consecutive steps of a round, and their tokens: the island's speed. */
  computeMs: number;
  computeTokens: number;
  /** Tokens of every step it trained (pages: tokens contributed). */
  stepTokens: number;
  tokensPerSec: number;
  accepted: number;
  rejected: number;
  rejectedByCode: Record<string, number>;
  bytesUp: number;
  bytesDown: number;
  reconnects: number;
  /** Node islands: updates applied to the replica with θ's hash matching the server's, and those that did not. */
  hashChecks: number;
  hashMismatches: number;
  /** Rounds whose Δ went up mixed in a group (butterfly mixing). */
  roundsMixed: number;
  /** Training data fetched (a shard run: the index and the ranges), and 2 bytes × its assigned ranges' tokens. */
  dataBytes: number;
  rangeBytes: number;
  /** Node islands: the runtime's tokens/s over its last round's steps (its speed when no round had two steps). */
  stepSpeed: number;
  /** [islandId, seq] of every 'applied' ack (Node islands). */
  acks: Array<[string, number]>;
  /** Rounds the page counted as accepted. */
  pageAccepted?: number;
}

/** What an island child's lines set on its LiveIsland (instruments/fleet/island-child.ts). */
export type ChildCounters = Pick<
  LiveIsland,
  | 'bytesUp'
  | 'bytesDown'
  | 'computeMs'
  | 'computeTokens'
  | 'stepTokens'
  | 'reconnects'
  | 'hashChecks'
  | 'hashMismatches'
  | 'stepSpeed'
  | 'roundsMixed'
  | 'dataBytes'
  | 'rangeBytes'
>;

/** One line an island child prints. */
export type ChildLine =
  | { kind: 'assignment'; island: string; t: number }
  | {
      kind: 'submitted';
      island: string;
      seq: number;
      status: string;
      code: string | null;
      tokens: number;
      t: number;
      counters: ChildCounters;
    }
  | { kind: 'step' | 'exit'; counters: ChildCounters };

/** Server bytes per accepted token from a mark on (the tokens in θ and the version at the mark). */
export interface SteadyTraffic {
  fromTokens: number;
  fromVersion: number;
  /**
   * Frames (Δs, fragments, updates, pieces, the islands' snapshots: /api/status bytesIn/bytesOut, less the fleet's own
   * θ downloads).
   */
  inPerToken: number;
  outPerToken: number;
  /**
   * Everything on the islands' socket.io connections as sent (engine.io packets: /metrics atoll_wire_bytes_*; θ's HTTP
   * downloads are not in it); null: not counted (the Redis roles).
   */
  wireInPerToken: number | null;
  wireOutPerToken: number | null;
  /** Frames out by kind (/metrics atoll_bytes_out_total: update, piece, catchup, model); null: not counted. */
  outByKindPerToken: Record<string, number> | null;
}

export interface ThetaSnapshot {
  version: number;
  timeMs: number;
  params: Float32Array;
  tokens?: number;
}

/** A shard run's range ledger at the end (GET /api/data); null on a text. */
export interface FleetData {
  epochsDone: number;
  epochProgress: number;
  trainTokens: number;
  /** Tokens trained by the ledger's count (every shard's `trained`). */
  tokensTrained: number;
  /** Of the last 256 ranges trained (`rangesChecked`), those overlapping another of their epoch (0: none twice). */
  overlapsInEpoch: number;
  rangesChecked: number;
  /** Shard bytes the server sent (ranges and whole files), and the index's size (each island fetches it once). */
  bytesServed: number;
  indexBytes: number;
}

export interface LiveRun {
  topology: 'embedded' | 'roles';
  runConfig: RunConfig;
  seconds: number;
  versions: number;
  tokens: number;
  bytesIn: number;
  /** Frames sent to the islands (/api/status bytesOut, less the fleet's own θ downloads at its evaluation marks). */
  bytesOut: number;
  /** The islands' connections' bytes as sent, whole run (null: not counted). */
  wireIn: number | null;
  wireOut: number | null;
  /** Frames out by kind, whole run (/metrics atoll_bytes_out_total{kind}); null: not counted (the Redis roles). */
  outByKind: Record<string, number> | null;
  /** The wire bytes by message, whole run (/metrics atoll_wire_bytes_*_total{message}); null: not counted. */
  wireByMessage: { in: Record<string, number>; out: Record<string, number> } | null;
  /**
   * The server's traffic once every island had downloaded θ and was training (a snapshot each is the same with or
   * without mixing).
   */
  steady: SteadyTraffic;
  /** /api/status's mixing figures at the end (null: the run did not mix). */
  mix: MixStatus | null;
  snapshots: Array<ThetaSnapshot & { tokens: number }>;
  islands: LiveIsland[];
  lost: number;
  duplicated: number;
  faults: string[];
  data: FleetData | null;
  /** The run folder's events.jsonl (the fleet writes it beside the report as live-events.jsonl). */
  events: string;
  /** The servers' own output (warnings and errors at the run's log level), the last 64 kB of each: server.log. */
  serverLog: string;
  /** The run folder's metrics/ files (scalars.jsonl, event files) by name: the fleet writes them to metrics/live/. */
  metrics: Array<{ name: string; data: Uint8Array }>;
}

/** A row of the report: eval loss at the end, the eval curve `[{tokens, evalLoss}]` and the full curve. */
export type FleetRow = ReportRow & { curve?: SimRunResult['curve'] };

export interface FleetReport {
  config: Pick<
    FleetSpec,
    'preset' | 'tokens' | 'islands' | 'browsers' | 'mixGroup' | 'engines' | 'batches' | 'duty' | 'schedule'
  > & {
    params: number;
    data: string;
    seed: number;
    topology: 'embedded' | 'roles';
    /** The live run's coordinator config: the twin's too. */
    coordinator: RunConfig['coordinator'];
    /** 1-minute load average at the start and the end, cores. */
    load: [number, number];
    cores: number;
    realTimeMs: number;
  };
  live: {
    evalLoss: number;
    tokens: number;
    versions: number;
    seconds: number;
    bytesIn: number;
    bytesOut: number;
    /** Whole run, per accepted token (snapshots included): frames, and everything on the wire (null: not counted). */
    inPerToken: number;
    outPerToken: number;
    wireInPerToken: number | null;
    wireOutPerToken: number | null;
    /** Frames out by kind per accepted token, whole run (null: not counted). */
    outByKindPerToken: Record<string, number> | null;
    /** Wire bytes by message per accepted token, whole run (null: not counted). */
    wireByMessagePerToken: { in: Record<string, number>; out: Record<string, number> } | null;
    steady: SteadyTraffic;
    mix: MixStatus | null;
    curve: SimRunResult['curve'];
    /** The live θ's eval curve, `[{tokens, evalLoss}]`, as every row's. */
    evalCurve: EvalPoint[];
  };
  twin: FleetRow;
  ddp: FleetRow;
  single: FleetRow;
  /** live / twin and live / DDP final eval loss. */
  ratios: { liveOverTwin: number; liveOverDdp: number; twinOverDdp: number };
  lost: number;
  duplicated: number;
  faults: string[];
  /** A shard run's range ledger (null on a text). */
  data: FleetData | null;
  islands: Array<{
    name: string;
    kind: 'node' | 'page';
    engine: string;
    batchSize: number;
    duty: number;
    tokensPerSec: number;
    accepted: number;
    rejected: number;
    rejectedByCode: Record<string, number>;
    bytesUp: number;
    bytesDown: number;
    reconnects: number;
    joinAtMs: number;
    leaveAtMs: number | null;
    killed: boolean;
    /** Updates applied whose θ hash agreed with the server's, and those that did not (θ fetched again). */
    hashChecks: number;
    hashMismatches: number;
    roundsMixed: number;
    dataBytes: number;
    rangeBytes: number;
  }>;
  twinSpec: TwinSpec;
  /** The twin's islands, in the simulator's terms. */
  twinIslands: Array<Pick<IslandSpec, 'name' | 'speed' | 'batchSize' | 'joinAtMs' | 'leaveAtMs'>>;
}
