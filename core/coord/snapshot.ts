// The coordinator's snapshot for exact resume: typed arrays (stored as safetensors tensors) and
// JSON-safe metadata, written from and read back into plain state.

import { type Result, err, ok } from '../result.ts';
import { ErrorCode, PROTOCOL_VERSION, type UpdateMsg } from '../protocol.ts';
import type { CoordinatorConfig } from './config.ts';
import type { DataRangesState } from './data-ranges.ts';
import { hashParams } from './hash.ts';
import type { OuterState } from './outer.ts';
import type {
  CoordinatorSnapshot,
  CoordinatorSnapshotMeta,
  CoordinatorTotals,
  IslandRecord,
  PerVersion,
  RoundState,
  VersionStats,
} from './types.ts';

/** Everything a coordinator is, as plain data. */
export interface CoordinatorState {
  config: CoordinatorConfig;
  theta: Float32Array;
  version: number;
  hash: string;
  paused: boolean;
  done: boolean;
  outer: OuterState;
  downlinkResidual: Float32Array;
  islands: IslandRecord[];
  nextIslandSerial: number;
  assignSerial: number;
  round: RoundState;
  normHistory: number[];
  normSteps?: number[];
  totals: CoordinatorTotals;
  perVersion: PerVersion;
  updates: UpdateMsg[];
  history: VersionStats[];
  /** A shard run's range ledger (absent for a corpus run). */
  dataRanges?: DataRangesState;
}

/**
 * Gives the arrays a snapshot copies the optimizer's state and the pending deltas into (a caller
 * that writes snapshots one after another reuses them: fresh pages cost 3-4× the copy itself), and
 * θ's (`kind` 'theta': an array the snapshot keeps, never one lent before; its caller may have
 * touched its pages beforehand, off the critical path).
 */
export type SnapshotAlloc = (n: number, kind?: 'theta' | 'state') => Float32Array;

/**
 * The snapshot of `s`. Every array is a copy (θ always into a fresh one: it outlives the snapshot
 * as the durable θ; all into `alloc`'s when given), except the update frames: a frame is
 * never written once made, so the snapshot shares it.
 */
export function writeSnapshot(s: CoordinatorState, alloc?: SnapshotAlloc): CoordinatorSnapshot {
  const copy = (x: Float32Array, kind: 'theta' | 'state' = 'state') => {
    if (!alloc) return x.slice();
    const y = alloc(x.length, kind);
    y.set(x);
    return y;
  };
  const tensors: Record<string, Float32Array | Uint8Array> = {
    theta: copy(s.theta, 'theta'),
    'outer.momentum': copy(s.outer.momentum),
    'outer.buffer': copy(s.outer.buffer),
    'downlink.residual': copy(s.downlinkResidual),
  };
  s.round.pending.forEach((p, i) => {
    tensors[`pending.${i}`] = copy(p.delta);
  });
  for (const u of s.updates) tensors[`update.${u.version}`] = u.frame;
  const r = s.round;
  const meta: CoordinatorSnapshotMeta = {
    format: 'atoll-coordinator',
    formatVersion: 1,
    protocolVersion: PROTOCOL_VERSION,
    config: structuredClone(s.config),
    paramCount: s.theta.length,
    version: s.version,
    hash: s.hash,
    paused: s.paused,
    outer: { bufferCount: s.outer.bufferCount, steps: s.outer.steps },
    islands: structuredClone(s.islands),
    nextIslandSerial: s.nextIslandSerial,
    assignSerial: s.assignSerial,
    round: {
      id: r.id,
      baseVersion: r.baseVersion,
      openedAt: r.openedAt,
      members: [...r.members],
      returned: [...r.returned],
      failed: [...r.failed],
    },
    pending: r.pending.map(({ delta: _d, ...rest }) => structuredClone(rest)),
    normHistory: s.normHistory.slice(),
    normSteps: s.normSteps?.slice(),
    totals: structuredClone(s.totals),
    perVersion: structuredClone(s.perVersion),
    updates: s.updates.map(({ frame: _f, ...rest }) => structuredClone(rest)),
    // VersionStats entries are never mutated once pushed: a shallow copy is a snapshot
    history: s.history.slice(),
    done: s.done,
    ...(s.dataRanges ? { dataRanges: structuredClone(s.dataRanges) } : {}),
  };
  return { tensors, meta };
}

/** The state in a snapshot; checks the format, tensor sizes and θ's hash. */
export function readSnapshot(s: CoordinatorSnapshot): Result<CoordinatorState> {
  const m = s.meta;
  if (m?.format !== 'atoll-coordinator' || m.formatVersion !== 1)
    return err(ErrorCode.BAD_REQUEST, 'not an atoll coordinator snapshot (v1)');
  const f32 = (name: string): Float32Array | null => {
    const t = s.tensors[name];
    return t instanceof Float32Array && t.length === m.paramCount ? t.slice() : null;
  };
  const theta = f32('theta'),
    mom = f32('outer.momentum'),
    buf = f32('outer.buffer'),
    res = f32('downlink.residual');
  if (!theta || !mom || !buf || !res)
    return err(ErrorCode.WRONG_SIZE, `snapshot tensors are missing or not ${m.paramCount} f32 elements`);
  if (hashParams(theta) !== m.hash) return err(ErrorCode.HASH_MISMATCH, 'snapshot θ does not match its hash');
  const round: RoundState = {
    id: m.round.id,
    baseVersion: m.round.baseVersion,
    openedAt: m.round.openedAt,
    members: new Set(m.round.members),
    returned: new Map(m.round.returned),
    failed: new Set(m.round.failed ?? []),
    pending: [],
  };
  for (let i = 0; i < m.pending.length; i++) {
    const d = f32(`pending.${i}`);
    if (!d) return err(ErrorCode.WRONG_SIZE, `pending.${i} is missing`);
    round.pending.push({ ...structuredClone(m.pending[i]), delta: d });
  }
  const updates: UpdateMsg[] = [];
  for (const u of m.updates) {
    const frame = s.tensors[`update.${u.version}`];
    if (!(frame instanceof Uint8Array)) return err(ErrorCode.BAD_REQUEST, `update.${u.version} frame is missing`);
    updates.push({ ...structuredClone(u), frame: frame.slice() });
  }
  return ok({
    config: m.config,
    theta,
    version: m.version,
    hash: m.hash,
    paused: m.paused,
    done: m.done,
    outer: { momentum: mom, buffer: buf, bufferCount: m.outer.bufferCount, steps: m.outer.steps },
    downlinkResidual: res,
    islands: structuredClone(m.islands),
    nextIslandSerial: m.nextIslandSerial,
    assignSerial: m.assignSerial,
    round,
    normHistory: m.normHistory.slice(),
    normSteps: m.normSteps?.slice(),
    totals: structuredClone(m.totals),
    perVersion: structuredClone(m.perVersion),
    updates,
    history: structuredClone(m.history),
    ...(m.dataRanges ? { dataRanges: structuredClone(m.dataRanges) } : {}),
  });
}
