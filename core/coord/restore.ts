// Snapshot and restore of the coordinator's state (state.ts) through its plain form (snapshot.ts):
// a snapshot is everything needed to resume exactly; a restore builds a new state from one, checking
// sizes and θ's hash. The state is built whole, never patched field by field.

import { type Result, err, ok } from '../result.ts';
import { ErrorCode } from '../protocol.ts';
import { NormHistory } from './aggregate.ts';
import { DataRanges } from './data-ranges.ts';
import { Ledger } from './ledger.ts';
import { type SnapshotAlloc, readSnapshot, writeSnapshot } from './snapshot.ts';
import { type CoordState, checkedConfig, newState } from './state.ts';
import type { CoordinatorSnapshot } from './types.ts';

/** The snapshot of `s`: its arrays are copies (`alloc` lends those of the optimizer state and pending deltas). */
export function snapshotOf(s: CoordState, alloc?: SnapshotAlloc): CoordinatorSnapshot {
  const { outer, residual } = s.outerStep.state();
  return writeSnapshot(
    {
      config: s.cfg,
      theta: s.outerStep.theta,
      version: s.version,
      hash: s.hash,
      paused: s.paused,
      done: s.done,
      outer,
      downlinkResidual: residual,
      islands: [...s.book.byId.values()],
      nextIslandSerial: s.book.nextSerial,
      assignSerial: s.assignSerial,
      round: s.round,
      normHistory: s.norms.scores,
      normSteps: s.norms.steps,
      totals: s.ledger.totals,
      perVersion: s.ledger.perVersion,
      updates: s.outerStep.downlink.updates,
      history: s.ledger.history,
      ...(s.ranges ? { dataRanges: s.ranges.state() } : {}),
    },
    alloc,
  );
}

/** A state rebuilt from `snapshotOf`'s output; E_BAD_CONFIG, or the snapshot's own codes. */
export function restoreState(snap: CoordinatorSnapshot): Result<CoordState> {
  const r = readSnapshot(snap);
  if (!r.ok) return r;
  const x = r.value;
  let cfg: CoordState['cfg'];
  try {
    cfg = checkedConfig(x.config);
  } catch (e) {
    return err(ErrorCode.BAD_CONFIG, e instanceof Error ? e.message : String(e));
  }
  const norms = new NormHistory();
  norms.restore(x.normHistory, x.normSteps);
  const ledger = new Ledger({ totals: x.totals, perVersion: x.perVersion, history: x.history });
  const s = newState(x.theta, cfg, x.round.openedAt, {
    version: x.version,
    hash: x.hash,
    paused: x.paused,
    done: x.done,
    assignSerial: x.assignSerial,
    round: x.round,
    ledger,
    norms,
    ranges: x.dataRanges ? new DataRanges(x.dataRanges) : null,
  });
  s.outerStep.restore(x.outer, x.downlinkResidual, x.updates);
  s.book.load(x.islands, x.nextIslandSerial);
  return ok(s);
}
