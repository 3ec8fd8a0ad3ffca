// `atoll bench server`, the checkpoint figures: how long the event loop stops for the snapshot and
// the encoding of a per-version checkpoint of a base-sized run, as `Run` takes them (arrays reused
// from the previous snapshot, the file written part by part) and, as the peer in the same run, the
// way they were taken before (fresh arrays, every kept update frame copied, the file gathered into
// one buffer).

import { syntheticDelta } from './codec.ts';
import { median } from './timing.ts';
import { encodeDelta } from '../../core/codec/index.ts';
import { Coordinator } from '../../core/coord/index.ts';
import { PROTOCOL_VERSION } from '../../core/protocol.ts';
import { numParams } from '../../core/model/config.ts';
import { buildRunConfig } from '../../server/run/config.ts';
import { SnapshotArrays, encodeRunCheckpoint } from '../../server/run/checkpoint.ts';
import { concatBytes } from '../../core/safetensors.ts';

export interface CheckpointBench {
  /** Update frames the snapshot holds (the run config keeps up to 32). */
  updates: number;
  /** Median ms on the event loop: snapshot + encode, as Run takes them. */
  stallMs: number;
  snapshotMs: number;
  encodeMs: number;
  /** The peer: fresh arrays and frame copies, the file in one buffer. */
  stallFreshMs: number;
  speedup: number;
}

/** `updates` outer steps of a `preset` run (default base), then `repeats` checkpoints each way. */
export function benchCheckpoint(
  o: { preset?: 'tiny' | 'small' | 'base'; updates?: number; repeats?: number } = {},
): CheckpointBench {
  const updates = o.updates ?? 8;
  const run = buildRunConfig(null, { preset: o.preset ?? 'base', name: 'bench' });
  const n = numParams(run.model);
  const coord = new Coordinator({
    params: syntheticDelta(n, 7),
    config: { ...run.coordinator, mode: 'sync', quorum: 1, minContributors: 1 },
    now: 0,
  });
  const j = coord.join({ caps: { engine: 'cpu' }, protocolVersion: PROTOCOL_VERSION }, 0);
  if (!j.ok || !j.value.assignment) throw new Error('bench: join failed');
  let a = j.value.assignment;
  const frame = encodeDelta(
    syntheticDelta(n, 11).map((x) => x * 0.01),
    a.codec,
  ); // the assignment's codec (a frame must use it)
  for (let v = 0, now = 1; v < updates; v++) {
    const r = coord.submit(
      {
        meta: {
          islandId: a.islandId,
          roundId: a.roundId,
          baseVersion: a.baseVersion,
          seq: v + 1,
          steps: a.innerSteps,
          tokens: a.innerSteps * a.batchSize * a.seqLen,
          lossFirst: 3,
          lossLast: 2.9,
          lossMean: 2.95,
          elapsedMs: 1000,
        },
        frame,
      },
      now++,
    );
    if (!r.ok) throw new Error(`bench: submit rejected: ${r.error.code}`);
    coord.drainEvents();
    const na = coord.nextAssignment(a.islandId, now++);
    if (!na.ok || !na.value) throw new Error('bench: no next assignment');
    a = na.value;
  }
  const arrays = new SnapshotArrays();
  const reused: number[] = [],
    snaps: number[] = [],
    encs: number[] = [],
    fresh: number[] = [];
  for (let r = 0; r < (o.repeats ?? 5); r++) {
    let t = performance.now();
    const s = coord.snapshot(arrays.alloc);
    const t1 = performance.now();
    encodeRunCheckpoint(run, s);
    const t2 = performance.now();
    arrays.releaseAll();
    snaps.push(t1 - t);
    encs.push(t2 - t1);
    reused.push(t2 - t);
    t = performance.now();
    const f = coord.snapshot();
    for (const [k, x] of Object.entries(f.tensors)) if (k.startsWith('update.')) f.tensors[k] = x.slice();
    concatBytes(encodeRunCheckpoint(run, f)); // the file gathered into one buffer, as before
    fresh.push(performance.now() - t);
  }
  const r1 = (x: number) => Number(x.toFixed(1));
  return {
    updates,
    stallMs: r1(median(reused)),
    snapshotMs: r1(median(snaps)),
    encodeMs: r1(median(encs)),
    stallFreshMs: r1(median(fresh)),
    speedup: r1(median(fresh) / median(reused)),
  };
}
