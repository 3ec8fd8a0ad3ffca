// The coordinator's state: one plain object that the coordinator's jobs (submit.ts, close.ts,
// restore.ts, replay.ts) read and change, and the Coordinator class (coordinator.ts) fronts.
// Nothing here does any work but building it.

import { ErrorCode } from '../protocol.ts';
import { NormHistory } from './aggregate.ts';
import {
  type CoordinatorConfig,
  type CoordinatorConfigPatch,
  DEFAULT_COORDINATOR_CONFIG,
  mergeConfig,
  validateCoordinatorConfig,
} from './config.ts';
import type { DataRanges } from './data-ranges.ts';
import { hashParams } from './hash.ts';
import { IslandBook } from './island-book.ts';
import { Ledger } from './ledger.ts';
import { OuterStep } from './outer-step.ts';
import { newRound } from './rounds.ts';
import type { Closing, CoordinatorEvent, RoundState } from './types.ts';

export interface CoordState {
  cfg: CoordinatorConfig;
  readonly paramCount: number;
  /** θ, the outer optimizer and the downlink (outer-step.ts). */
  readonly outerStep: OuterStep;
  version: number;
  hash: string;
  readonly book: IslandBook;
  /** Async: the last assignment's round id. */
  assignSerial: number;
  round: RoundState;
  readonly norms: NormHistory;
  paused: boolean;
  done: boolean;
  readonly ledger: Ledger;
  /** A shard run's range ledger (data-ranges.ts); null for a corpus run. */
  readonly ranges: DataRanges | null;
  /** Queued for drainEvents (see the durability contract in types.ts); emptied, never replaced. */
  readonly events: CoordinatorEvent[];
  /** The round whose outer step a host is taking (OuterOffload.step: close.ts), and that step's end. */
  closing: Closing | null;
  inFlight: Promise<void> | null;
  // scratch, allocated once (no n-sized allocation per message on the hot path)
  readonly decodeBuf: Float32Array;
  readonly accBuf: Float64Array;
}

/** A config patch merged over the defaults, or E_BAD_CONFIG (thrown: a constructor's argument). */
export function checkedConfig(patch: CoordinatorConfigPatch | CoordinatorConfig | undefined): CoordinatorConfig {
  const cfg = mergeConfig(DEFAULT_COORDINATOR_CONFIG, patch ?? {});
  const problems = validateCoordinatorConfig(cfg);
  if (problems.length) throw new RangeError(`${ErrorCode.BAD_CONFIG}: ${problems.join('; ')}`);
  return cfg;
}

/**
 * A fresh state at version 0 on θ = `params` (copied), or at the given figures (restore.ts).
 * `ledger` and `norms` come filled in on a restore.
 */
export function newState(
  params: Float32Array,
  cfg: CoordinatorConfig,
  now: number,
  at: Partial<Pick<CoordState, 'version' | 'hash' | 'paused' | 'done' | 'assignSerial' | 'round'>> & {
    ledger?: Ledger;
    norms?: NormHistory;
    ranges?: DataRanges | null;
  } = {},
): CoordState {
  const n = params.length;
  const outerStep = new OuterStep(params);
  const events: CoordinatorEvent[] = [];
  return {
    cfg,
    paramCount: n,
    outerStep,
    version: at.version ?? 0,
    hash: at.hash ?? hashParams(outerStep.theta),
    book: new IslandBook((e) => events.push(e)),
    assignSerial: at.assignSerial ?? 0,
    round: at.round ?? newRound(0, 0, now),
    norms: at.norms ?? new NormHistory(),
    paused: at.paused ?? false,
    done: at.done ?? false,
    ledger: at.ledger ?? new Ledger(),
    ranges: at.ranges ?? null,
    events,
    closing: null,
    inFlight: null,
    decodeBuf: new Float32Array(n),
    accBuf: new Float64Array(n),
  };
}

/** Takes the queued events (the book's island events land in the same array: it is emptied, not replaced). */
export function takeEvents(s: CoordState): CoordinatorEvent[] {
  return s.events.splice(0, s.events.length);
}
