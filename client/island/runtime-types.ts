// What IslandRuntime (runtime.ts) reports and is built from: its status names, its progress, its
// events, its options and the summary of a run.

import type { TrainingEngine } from '../../core/engine/index.ts';
import type { AckMsg, Assignment, DeltaMeta, IslandCaps } from '../../core/protocol.ts';
import type { AtollError } from '../../core/result.ts';
import type { TokenArray } from '../../core/data/tokenizer.ts';
import type { DataRange } from '../../core/server-messages.ts';
import type { Clock, Transport } from './transport.ts';

export type IslandStatusName =
  | 'idle'
  | 'connecting'
  | 'syncing'
  | 'training'
  | 'submitting'
  | 'waiting'
  | 'paused'
  | 'stopped'
  | 'done'
  | 'error';

/** Everything a progress bar, a page or the simulator shows. Updated in place; read it any time. */
export interface IslandProgress {
  status: IslandStatusName;
  islandId: string | null;
  roundId: number | null;
  /** Steps done in the current round / its steps. */
  step: number;
  of: number;
  loss: number;
  lr: number;
  /** Compute throughput of the last round (tokens/s, excluding sleeps and pauses). */
  tokensPerSec: number;
  /** θ version the replica holds. */
  version: number;
  rounds: number;
  tokens: number;
  accepted: number;
  rejected: Record<string, number>;
  bytesUp: number;
  bytesDown: number;
  snapshots: number;
}

export type IslandEvent =
  | { type: 'status'; status: IslandStatusName; detail?: string }
  | { type: 'assignment'; assignment: Assignment }
  | { type: 'step'; step: number; of: number; loss: number; lr: number; tokensPerSec: number }
  /** `frame`: the bytes sent (the runtime's own buffer: read it in the listener, do not keep it). */
  | { type: 'submitted'; meta: DeltaMeta; frameBytes: number; frame: Uint8Array; ack: AckMsg }
  | { type: 'synced'; version: number; hash: string; via: 'update' | 'snapshot' }
  | { type: 'error'; error: AtollError };

export interface IslandRuntimeOptions {
  /** Its AdamW state fresh (the runtime counts its steps from there for the lr warmup, and resets it itself). */
  engine: TrainingEngine;
  /** Training bytes (the train split of the corpus). */
  train: TokenArray;
  /** A shard run: the tokens of an assignment's `data.range` (range-fetch.ts); its batches are rangeBatch's. */
  fetchRange?: (range: DataRange) => Promise<TokenArray>;
  transport: Transport;
  caps?: Partial<IslandCaps>;
  /** Rejoin under a previous id. */
  resumeIslandId?: string;
  clock?: Clock;
  /** Fraction of time spent computing, (0, 1]: after a step of d ms, sleep d·(1−u)/u. Default 1. */
  dutyCycle?: number;
  /** Read losses back every this many steps (WebGPU: a readback stalls the queue). Default 1. */
  lossEvery?: number;
  /** Give up a submit after this many transport failures in a row. Default 5. */
  maxRetries?: number;
  /**
   * Let the event loop run once the round's steps have held it this long, ms (0: never, the default).
   * A Node island on the CPU engine steps synchronously: a whole round held its socket's thread past
   * the server's ping timeout on a loaded machine, and the island dropped out of every merge.
   */
  yieldEveryMs?: number;
}

export interface IslandRunSummary {
  islandId: string | null;
  /** 'done' (server budget reached), 'stopped' (stop()), or an error code. */
  reason: string;
  progress: IslandProgress;
}
