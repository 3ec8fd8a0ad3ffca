// The run checkpoint format.
//
// A run checkpoint is a model checkpoint (core/checkpoint.ts: one F32 tensor per parameter tensor,
// `config` metadata; `atoll sample --checkpoint` and Python read it) plus the coordinator's state:
// F32 tensors outer.momentum, outer.buffer, downlink.residual, pending.<i>, U8 tensors update.<v>
// (the last few downlink frames), and the coordinator's JSON snapshot under metadata `coordinator`,
// whose island records are only what resuming needs (island-file.ts: the full ones are beside it).

import type { RunConfig } from '../../core/api.ts';
import { Coordinator, type CoordinatorSnapshot, type CoordinatorSnapshotMeta } from '../../core/coord/index.ts';
import { type GPTConfig, numParams, paramLayout } from '../../core/model/config.ts';
import { type Result, err, ok } from '../../core/result.ts';
import type { RunStore } from './store.ts';
import { type IslandCore, IslandFile, joinIslands, splitIslands } from './island-file.ts';
import type { IslandRecord } from '../../core/coord/index.ts';
import { type TensorInput, readSafetensors, safetensorsParts, tensorAsFloat32 } from '../../core/safetensors.ts';

/** Update frames kept in a checkpoint (islands further behind after a restart fetch the snapshot). */
const CHECKPOINT_UPDATES = 8;

/** Floats touched between two yields to the event loop while arrays are warmed (8 MB: tens of ms of page faults). */
export const WARM_CHUNK = 2 * 1024 * 1024;

/**
 * Arrays for the snapshots the pump checkpoints one after another: a snapshot copies the optimizer
 * state and the pending deltas into arrays lent from here, and they come back once its checkpoint
 * is written; its θ goes into an array given for good (it stays the durable θ). Reused arrays spare
 * the page faults of fresh ones, which cost 3-40× the copy itself (about 2 s per 500 MB on some
 * hosts: GPT-2 small's four arrays held the event loop 8 s). `warm()` makes the arrays the next
 * snapshot needs before it is taken, touching their pages a chunk at a time with the event loop
 * free in between, so the snapshot itself only copies.
 */
export class SnapshotArrays {
  private readonly free: Float32Array[] = [];
  private readonly lent: Float32Array[] = [];
  /** Fresh arrays, pages touched, for the next snapshots' θ (never lent back). */
  private readonly thetas: Float32Array[] = [];
  /** Arrays the last snapshot lent (θ's state and each pending delta): what the next one likely needs. */
  private lastLent = 3;

  constructor(private readonly keep = 6) {}

  readonly alloc = (n: number, kind: 'theta' | 'state' = 'state'): Float32Array => {
    if (kind === 'theta') {
      const i = this.thetas.findIndex((a) => a.length === n);
      return i >= 0 ? this.thetas.splice(i, 1)[0] : new Float32Array(n);
    }
    const i = this.free.findIndex((a) => a.length === n);
    const a = i >= 0 ? this.free.splice(i, 1)[0] : new Float32Array(n);
    this.lent.push(a);
    return a;
  };

  /** Every array lent so far comes back: the checkpoint that held them is written. */
  releaseAll(): void {
    this.lastLent = Math.max(3, this.lent.length);
    for (const a of this.lent) if (this.free.length < this.keep) this.free.push(a);
    this.lent.length = 0;
  }

  /** A new set with the arrays of one snapshot of `n` floats made (checkpointNow's). */
  static async warmed(n: number): Promise<SnapshotArrays> {
    const a = new SnapshotArrays();
    await a.warm(n);
    return a;
  }

  /**
   * Makes (pages touched, a chunk per turn of the event loop) what a snapshot of `n` floats with
   * `states` lent arrays (default: as many as the last snapshot's) needs beyond what is here: one θ
   * and up to `keep` lent ones. Null when nothing is missing.
   */
  warm(n: number, states = this.lastLent): Promise<void> | null {
    const missing: Array<{ into: Float32Array[] }> = [];
    if (!this.thetas.some((a) => a.length === n)) missing.push({ into: this.thetas });
    const have = this.free.filter((a) => a.length === n).length;
    for (let k = have; k < Math.min(states, this.keep); k++) missing.push({ into: this.free });
    if (missing.length === 0) return null;
    return (async () => {
      for (const m of missing) {
        const a = new Float32Array(n);
        for (let at = 0; at < n; at += WARM_CHUNK) {
          a.fill(0, at, Math.min(n, at + WARM_CHUNK));
          if (n > WARM_CHUNK) await new Promise<void>((r) => setImmediate(r));
        }
        m.into.push(a);
      }
    })();
  }
}

/** One name per checkpoint: its download name (the dashboard shows the same). */
export function checkpointFile(run: string, version: number, format: 'atoll' | 'hf' = 'atoll'): string {
  return `${run}-v${version}${format === 'hf' ? '-hf.tar' : '.safetensors'}`;
}

/** The checkpoint file of `snap`, as its parts in order (the tensors are views of the snapshot's arrays). */
export function encodeRunCheckpoint(run: RunConfig, snap: CoordinatorSnapshot): Uint8Array[] {
  const layout = paramLayout(run.model);
  const theta = snap.tensors.theta as Float32Array;
  const tensors: Record<string, TensorInput> = {};
  for (const t of layout.tensors)
    tensors[t.name] = { dtype: 'F32', shape: t.shape, data: theta.subarray(t.offset, t.offset + t.size) };
  const meta: CoordinatorSnapshotMeta & { islandCore: IslandCore[] } = {
    ...snap.meta,
    updates: snap.meta.updates.slice(-CHECKPOINT_UPDATES),
    ...splitIslands(snap.meta.islands),
  };
  const keepUpdates = new Set(meta.updates.map((u) => `update.${u.version}`));
  for (const [name, arr] of Object.entries(snap.tensors)) {
    if (name === 'theta') continue;
    if (name.startsWith('update.') && !keepUpdates.has(name)) continue;
    tensors[name] = { dtype: arr instanceof Float32Array ? 'F32' : 'U8', shape: [arr.length], data: arr };
  }
  return safetensorsParts(tensors, {
    format: 'atoll-checkpoint-1',
    config: JSON.stringify(run.model),
    version: String(meta.version),
    hash: meta.hash,
    tokens: String(meta.totals.tokensApplied),
    preset: run.preset,
    tokenizer: run.tokenizer,
    run: run.name,
    params: String(numParams(run.model)),
    coordinator: JSON.stringify(meta),
  });
}

/** A run checkpoint's coordinator; `islandsFile` gives the full island records its cores are laid over. */
export function decodeRunCheckpoint(
  bytes: Uint8Array,
  expected: GPTConfig,
  islandsFile: () => Map<string, IslandRecord> = () => new Map(),
): Result<Coordinator> {
  const file = readSafetensors(bytes);
  if (!file.ok) return file;
  const { tensors, metadata } = file.value;
  if (metadata.config !== JSON.stringify(expected))
    return err('E_WRONG_MODEL', `checkpoint is for model ${metadata.config}, the run is ${JSON.stringify(expected)}`);
  let meta: CoordinatorSnapshotMeta & { islandCore?: IslandCore[] };
  try {
    meta = JSON.parse(metadata.coordinator ?? '') as CoordinatorSnapshotMeta;
  } catch {
    return err('E_BAD_CHECKPOINT', 'checkpoint has no coordinator state (a plain model checkpoint?)');
  }
  if (meta.islandCore) {
    const { islandCore, ...rest } = meta;
    meta = { ...rest, islands: joinIslands(meta.islands, islandCore, islandsFile()) };
  }
  const layout = paramLayout(expected);
  const theta = new Float32Array(layout.total);
  for (const t of layout.tensors) {
    const v = tensors[t.name];
    if (v?.dtype !== 'F32' || v.data.length !== 4 * t.size)
      return err('E_BAD_CHECKPOINT', `tensor ${t.name} is missing or malformed`);
    theta.set(tensorAsFloat32(v), t.offset);
  }
  const snapTensors: CoordinatorSnapshot['tensors'] = { theta };
  for (const [name, v] of Object.entries(tensors)) {
    if (layout.byName[name]) continue;
    if (v.dtype === 'F32') snapTensors[name] = tensorAsFloat32(v).slice();
    else if (v.dtype === 'U8') snapTensors[name] = v.data.slice();
  }
  return Coordinator.restore({ tensors: snapTensors, meta });
}

/** The coordinator of the newest usable checkpoint in the store (older ones when it is not), or null. */
export function restoreLatest(store: RunStore, model: GPTConfig, log: (line: string) => void): Coordinator | null {
  for (const ck of store.listCheckpoints()) {
    const bytes = store.readCheckpoint(ck.version);
    const r = bytes
      ? decodeRunCheckpoint(bytes, model, () => new IslandFile(store.paths.islands).read())
      : err('E_BAD_CHECKPOINT', 'unreadable');
    if (r.ok) return r.value;
    log(`checkpoint ${ck.path} is unusable (${r.error.code}: ${r.error.message}); trying an older one`);
  }
  return null;
}

/** The coordinator of the newest kept checkpoint older than `version` (a revert's start). */
export function checkpointBefore(
  store: RunStore,
  model: GPTConfig,
  islands: IslandFile,
  version: number,
): Result<{ version: number; coord: Coordinator }> {
  const kept = store.listCheckpoints();
  for (const ck of kept) {
    if (ck.version >= version) continue;
    const bytes = store.readCheckpoint(ck.version);
    const r = bytes
      ? decodeRunCheckpoint(bytes, model, () => islands.read())
      : err('E_BAD_CHECKPOINT', `${ck.path} is unreadable`);
    if (!r.ok) return err(r.error.code, `checkpoint ${ck.path}: ${r.error.message}`);
    return ok({ version: ck.version, coord: r.value });
  }
  const oldest = kept.at(-1)?.version;
  return err(
    'E_NOT_KEPT',
    `no kept checkpoint is older than version ${version} (the oldest is ${oldest ?? 'none'}): ` +
      `raise checkpoints.keep to reach further back`,
  );
}
