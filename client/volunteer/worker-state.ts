// The island worker's state, shared by its modules (island.worker.ts, worker-view.ts,
// worker-events.ts, worker-calibration.ts): one object, so each module reads and writes the same
// fields the worker once held as module variables. `post` and `log` reach the page.

import type { IslandRuntime, IslandRuntimeOptions } from '../island/index.ts';
import type { Assignment } from '../../core/protocol.ts';
import type { ConnectedTransport } from './connect.ts';
import type { RelayPeerNet } from '../island/mix-relay.ts';
import type { MixMemberStats } from '../island/mix-member.ts';
import type {
  Calibration,
  DebugDelays,
  FromWorker,
  IslandView,
  LogLevel,
  PauseReason,
  StartOptions,
} from './messages.ts';
import { initialView } from './messages.ts';
import type { ResilientEngine } from './resilient-engine.ts';
import type { TokenArray } from '../../core/data/tokenizer.ts';
import type { CachedRangeSource } from './range-cache.ts';
import type { ThetaCache } from './theta-cache.ts';

export const post = (m: FromWorker) => (self as unknown as { postMessage(m: FromWorker): void }).postMessage(m);
export const log = (level: LogLevel, text: string) => post({ type: 'log', level, text, at: Date.now() });

export interface WorkerState {
  opts: StartOptions | null;
  view: IslandView;
  engine: ResilientEngine | null;
  runtime: IslandRuntime | null;
  runtimeOpts: IslandRuntimeOptions | null;
  link: ConnectedTransport | null;
  /** The corpus run's train split; on a shard run a dummy of seqLen + 2 bytes (calibration only times steps). */
  train: TokenArray | null;
  /** A shard run's ranges (cached in this browser where it can), or null on a corpus run. */
  ranges: CachedRangeSource | null;
  /** θ kept in this browser as it downloads (undefined: not opened yet; null: no Cache API). */
  thetaCache: ThetaCache | null | undefined;
  /** Bytes of the corpus run's train split downloaded (a shard run counts in `ranges.bytes`). */
  dataDown: number;
  pauseReasons: Set<PauseReason>;
  /** Totals of runtimes that ended (each runtime counts from zero). */
  carried: { bytesUp: number; bytesDown: number };
  extraDown: number;
  globalStep: number;
  assignment: Assignment | null;
  /** Losses of this round are read back every this many steps (the runtime's lossEvery). */
  roundLossEvery: number;
  calibration: Calibration | null;
  /** Test hooks (debug-delays). */
  delays: DebugDelays;
  runtimeStatus: string;
  reconnectAt: number | null;
  /** Why the island cannot go on (shown as the 'error' phase), or null. */
  fatal: string | null;
  /** A lost GPU device is being rebuilt / the supervisor waits to restart the runtime. */
  deviceRecovering: boolean;
  backingOff: boolean;
  /** Butterfly mixing: the page's data channels (null: the page has no RTCPeerConnection) and what the member did. */
  peers: RelayPeerNet | null;
  mixStats: MixMemberStats;
  /** The runtime's last error, as `code: message`. */
  lastError: string;
}

export const state: WorkerState = {
  opts: null,
  view: initialView(),
  engine: null,
  runtime: null,
  runtimeOpts: null,
  link: null,
  train: null,
  ranges: null,
  thetaCache: undefined,
  dataDown: 0,
  pauseReasons: new Set<PauseReason>(),
  carried: { bytesUp: 0, bytesDown: 0 },
  extraDown: 0,
  globalStep: 0,
  assignment: null,
  roundLossEvery: 1,
  calibration: null,
  delays: { stepMs: 0, syncMs: 0, uploadMs: 0, waitMs: 0 },
  runtimeStatus: 'idle',
  reconnectAt: null,
  fatal: null,
  deviceRecovering: false,
  backingOff: false,
  peers: null,
  mixStats: { mixed: 0, direct: 0, piecesOk: 0, piecesRefetched: 0 },
  lastError: '',
};
