// Typed messages between the volunteer page (main thread) and its island worker.
// The page never touches the GPU or the socket: it sends commands and renders the
// `IslandView` snapshots and loss points the worker posts back.

import type { Assignment, EngineKind } from '../../core/protocol.ts';
import type { Calibration, ModelShape } from '../island/calibrate.ts';
import type { DataRange } from '../../core/server-messages.ts';

export type { Calibration, ModelShape };

export type { EngineKind };

/** What the page needs to know about the adapter the worker would train on. */
export interface AdapterSummary {
  /** Human-readable name, e.g. "google swiftshader" or "nvidia ampere". */
  name: string;
  vendor: string;
  architecture: string;
  isFallbackAdapter: boolean;
}

export type ProbeFailure = 'no-navigator-gpu' | 'no-adapter' | 'too-small' | 'error';

/** Result of checking WebGPU in the worker, where training would run. */
export type GpuProbe =
  | { ok: true; adapter: AdapterSummary; gpuBytes: number }
  | { ok: false; reason: ProbeFailure; message: string; adapter?: AdapterSummary; gpuBytes: number };

/** How the engine is sized: the model config and the batch the server assigns. */

export interface StartOptions {
  engine: EngineKind;
  /** Origin of the Atoll server (the page's own origin). */
  serverUrl: string;
  contributorId: string;
  displayName: string;
  /** GPU usage cap: fraction of wall time spent computing (0.25 … 1). */
  dutyCycle: number;
  shape: ModelShape;
  /** The last calibration saved by the page (re-used when its key still fits). */
  calibration: Calibration | null;
  /**
   * WebGPU: time the matmul variants at engine start, choices cached by adapter in IndexedDB (false: the page's
   * ?autotune=0).
   */
  autotune: boolean;
  /**
   * WebGPU storage precision (the page's ?precision=): 'auto' times f32 and f16 on a first visit
   * and keeps the faster (a software adapter keeps f32 untimed: it only emulates a GPU).
   */
  precision: 'auto' | 'f32' | 'f16';
  /** A shard run (the run info's `data.shards`): each round's range by HTTP Range, not the whole train split. */
  shardRun: boolean;
}

/** Test hooks: delays (ms) that make each phase last long enough to look at. */
export interface DebugDelays {
  /** Added to every training step's compute (as a busy GPU would). */
  stepMs: number;
  /** Added before model downloads, Δ uploads and waits for the next round. */
  syncMs: number;
  uploadMs: number;
  waitMs: number;
}

export type PauseReason = 'user' | 'hidden';

export type ToWorker =
  | { type: 'probe'; shape: ModelShape }
  /** `peers`: the page's WebRTC data channels for butterfly mixing (client/island/mix-relay.ts); absent: none. */
  | { type: 'start'; opts: StartOptions; peers?: MessagePort }
  | { type: 'pause'; reason: PauseReason }
  | { type: 'resume'; reason: PauseReason }
  | { type: 'set-duty-cycle'; dutyCycle: number }
  | { type: 'set-display-name'; displayName: string }
  | {
      type: 'sample';
      id: number;
      prompt: string;
      tokens: number;
      temperature: number;
      seed: number;
      engine: EngineKind;
      shape: ModelShape;
    }
  /** Test hook: lose the GPU device as a driver crash would. */
  | { type: 'debug-lose-device' }
  /** Test hook: fetch a range through the worker's (cached) range source, as a round would. */
  | { type: 'debug-fetch-range'; id: number; range: DataRange }
  | { type: 'debug-delays'; delays: Partial<DebugDelays> };

export type Phase =
  | 'idle' // nothing started
  | 'starting' // creating the engine / connecting
  | 'syncing' // downloading the global model
  | 'training' // inner steps
  | 'uploading' // sending Δ
  | 'waiting' // Δ sent, waiting for the round to close / next assignment
  | 'pausing' // pause asked: finishing the current step
  | 'paused'
  | 'recovering' // device lost or connection dropped: rebuilding
  | 'error'; // cannot go on (shown with a reason)

export type Connection = 'offline' | 'connecting' | 'connected' | 'reconnecting';

export interface RoundView {
  /** Global version this round trains from. */
  baseVersion: number;
  step: number;
  total: number;
  /** Estimated seconds left in the inner loop, usage cap included (null until timed, or paused). */
  etaSec: number | null;
}

/** A shard run's range cache in this browser (range-cache.ts). */
export interface RangeCacheStats {
  capBytes: number;
  /** Ranges served from the cache, and those fetched from the network. */
  hits: number;
  misses: number;
  /** Bytes of ranges held after the last store (this origin's, every tab's). */
  storedBytes: number;
}

export interface IslandView {
  phase: Phase;
  /** Why the island is paused or in error, or what it is recovering from. */
  detail: string;
  engine: EngineKind | null;
  /** GPU (adapter) name, or "CPU". */
  device: string;
  connection: Connection;
  /** Seconds until the next reconnect attempt, while reconnecting. */
  reconnectInSec: number | null;
  islandId: string | null;
  round: RoundView | null;
  globalVersion: number | null;
  globalEvalLoss: number | null;
  lastLoss: number | null;
  /** Inner steps run on this device (all rounds). */
  stepsDone: number;
  /** Tokens in deltas the server accepted. */
  tokensContributed: number;
  /** Tokens trained locally (accepted or not yet). */
  tokensTrained: number;
  roundsAccepted: number;
  roundsRejected: number;
  bytesUp: number;
  /** Everything received: the model, updates, and the training data (`dataBytes`). */
  bytesDown: number;
  /** Training data received from the network: the train split once, or a shard run's index and ranges. */
  dataBytes: number;
  /** A shard run: 2 bytes × the tokens of every range assigned (at most what `dataBytes` holds, the index aside). */
  rangeBytesAssigned: number;
  /** A shard run's range cache in this browser (null: a corpus run, or no Cache API here). */
  rangeCache: RangeCacheStats | null;
  /** Training speed at the usage cap (rests included), as the round ran so far. */
  tokensPerSec: number | null;
  /** Median compute time of a step, ms (rests excluded). */
  stepMs: number | null;
  /** Model FLOPs utilization of the engine, when it knows its adapter's peak (0 … 1). */
  mfu: number | null;
  /** The usage cap chosen, and the one in force (lower while the GPU is busy elsewhere). */
  dutyCycle: number;
  effectiveDutyCycle: number;
  /** Busy-GPU back-off: steps take much longer than this island's recent median. */
  busy: boolean;
  calibration: Calibration | null;
  paused: boolean;
  pauseReasons: PauseReason[];
  lastRejection: { code: string; message: string; at: number } | null;
  /** Updates applied to the replica whose θ hash matched the server's, and those that did not (θ fetched again). */
  hashChecks: number;
  hashMismatches: number;
  /** Rounds whose Δ went up mixed in a group (butterfly mixing), and those sent directly while the server mixes. */
  roundsMixed: number;
  roundsDirect: number;
}

export interface LossPoint {
  /** Index of the inner step on this island, counting from 1 across rounds. */
  step: number;
  /** The round (assignment) and the step in it, from 1. */
  roundId: number;
  roundStep: number;
  /** Global version the round started from. */
  version: number;
  loss: number;
  /** When the step's loss was read (epoch ms). */
  at: number;
}

export type LogLevel = 'info' | 'warn' | 'error';

/** A written sample: its text as UTF-8 and its `tokens` tokens. */
interface SampleDone {
  type: 'sample';
  id: number;
  ok: true;
  bytes: Uint8Array;
  tokens: number;
  version: number | null;
  ms: number;
  device: string;
}

export type FromWorker =
  | { type: 'probe'; probe: GpuProbe }
  | { type: 'calibrated'; calibration: Calibration }
  | { type: 'view'; view: IslandView }
  | { type: 'losses'; points: LossPoint[] }
  /** Each assignment as received (shown in the activity log; the tests replay it). */
  | { type: 'assignment'; assignment: Assignment }
  | { type: 'log'; level: LogLevel; text: string; at: number }
  /** A sample's text so far as UTF-8 (`written` of `tokens` tokens); invalid UTF-8 shows as visible escapes. */
  | { type: 'sample-progress'; id: number; bytes: Uint8Array; written: number; tokens: number }
  | SampleDone
  | { type: 'sample'; id: number; ok: false; code: string; message: string }
  /** The debug-fetch-range answer: the range's tokens and the data bytes fetched before and after. */
  | { type: 'debug-range'; id: number; ok: true; tokens: Uint16Array; bytesBefore: number; bytesAfter: number }
  | { type: 'debug-range'; id: number; ok: false; message: string };

export function initialView(dutyCycle = 1): IslandView {
  return {
    phase: 'idle',
    detail: '',
    engine: null,
    device: '',
    connection: 'offline',
    reconnectInSec: null,
    islandId: null,
    round: null,
    globalVersion: null,
    globalEvalLoss: null,
    lastLoss: null,
    stepsDone: 0,
    tokensContributed: 0,
    tokensTrained: 0,
    roundsAccepted: 0,
    roundsRejected: 0,
    bytesUp: 0,
    bytesDown: 0,
    dataBytes: 0,
    rangeBytesAssigned: 0,
    rangeCache: null,
    tokensPerSec: null,
    stepMs: null,
    mfu: null,
    dutyCycle,
    effectiveDutyCycle: dutyCycle,
    busy: false,
    calibration: null,
    paused: false,
    pauseReasons: [],
    lastRejection: null,
    hashChecks: 0,
    hashMismatches: 0,
    roundsMixed: 0,
    roundsDirect: 0,
  };
}
