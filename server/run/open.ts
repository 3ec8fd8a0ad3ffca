// What `Run.open` does before and after the constructor: the parts of a run read from its folder
// (the store, the coordinator restored or new, the outer step's workers, the history and waiters
// read back from the log), then the first commit of this process (version 0's checkpoint and the
// 'start' line, or a 'resume' line). Kept apart so run.ts holds the run itself.

import { Coordinator, type CoordinatorConfigPatch } from '../../core/coord/index.ts';
import type { TextDataset } from '../../core/data/dataset.ts';
import { initParams } from '../../core/model/gpt.ts';
import type { RunConfig } from '../../core/api.ts';
import { numParams } from '../../core/model/config.ts';
import type { Metrics } from '../metrics.ts';
import { OuterOffloadHost } from '../outer/offload.ts';
import type { AuditOptions } from './audit.ts';
import { encodeRunCheckpoint, restoreLatest } from './checkpoint.ts';
import { type ServedShards, openData } from './served-shards.ts';
import { refuseUnreadableRun } from './folder.ts';
import { RunHistory } from './history.ts';
import type { Traffic } from './islands.ts';
import { ScalarLog, metricsDir } from './scalars.ts';
import { RunStore } from './store.ts';
import { Waiters } from './waiters.ts';

export interface OpenRunOptions {
  dir: string;
  config: RunConfig;
  /** Runtime-knob changes to apply on resume (from flags). */
  resumePatch?: CoordinatorConfigPatch;
  metrics: Metrics;
  /** Eval after updates in a worker (default true). */
  evaluate?: boolean;
  log?: (line: string) => void;
  /** Worker threads for the outer step (0: on the event loop). Default 0. */
  outerWorkers?: number;
  /** Verified work (audit.ts): audits of a sample of accepted deltas by validators holding its token. */
  audit?: AuditOptions;
  /** θ0 of a new run in place of the seed's init (`serve --init`: a transformers folder); unused on resume. */
  init?: { params: Float32Array; from: string };
}

/** The parts a run is built from (Run.open makes them). */
export interface RunParts {
  config: RunConfig;
  store: RunStore;
  metrics: Metrics;
  dataset: TextDataset;
  /** A shard run's shards (serve --data DIR), or null: a corpus run. */
  shards: ServedShards | null;
  coord: Coordinator;
  resumed: boolean;
  history: RunHistory;
  waiters: Waiters;
  /** The traffic so far (from the log); the islands' side counts on from it. */
  traffic: Traffic;
  offload: OuterOffloadHost | null;
  audit?: AuditOptions;
  log: (line: string) => void;
}

/** A run's parts from `o.dir` (resuming when the folder holds a run); `now`: when it opened. */
export async function openParts(o: OpenRunOptions): Promise<{ parts: RunParts; now: number }> {
  // a rotated log starts with what a reader of the old files would have learnt (history.carryLine)
  let carry: (() => ReturnType<RunHistory['carryLine']>) | null = null;
  const { dataset, shards } = openData(o.config); // checked in full before the folder is touched
  // mixing groups submit one mean for several members' ranges: not with ranges yet
  if (shards && o.config.mix.k)
    throw Object.assign(new Error('serve --data DIR (shards) trains without mixing groups (--mix-group) for now'), {
      code: 'E_BAD_CONFIG',
    });
  const store = new RunStore(o.dir, {
    keep: o.config.checkpoints,
    maxLogBytes: o.config.limits.maxLogBytes,
    carry: () => carry?.() ?? { type: 'carry' },
  });
  const log = o.log ?? (() => {});
  const now = Date.now();
  const restored = restoreLatest(store, o.config.model, log);
  // a folder that holds a run but no readable checkpoint must not quietly start again at version 0
  if (!restored) refuseUnreadableRun(store);
  await store.openLog();
  const resumed = restored !== null;
  const params = () => o.init?.params.slice() ?? initParams(o.config.model, o.config.seed);
  if (o.init && o.init.params.length !== numParams(o.config.model))
    throw Object.assign(new Error(`θ0 from ${o.init.from} does not fit the run's model`), { code: 'E_WRONG_SIZE' });
  const ranges = shards ? { ranges: shards.train } : {};
  const coord = restored ?? new Coordinator({ params: params(), config: o.config.coordinator, now, ...ranges });
  if (resumed && o.resumePatch && Object.keys(o.resumePatch).length) {
    const r = coord.setConfig(o.resumePatch);
    if (!r.ok) throw Object.assign(new Error(r.error.message), { code: r.error.code });
  }
  if (resumed) {
    // Nobody is connected to a process that just started: islands count again once they say hello.
    for (const isl of coord.islands()) if (isl.status === 'online') coord.leave(isl.id, now);
    coord.drainEvents();
  }
  const workers = o.outerWorkers ?? 0;
  const offload = workers > 0 ? await OuterOffloadHost.start(coord, workers) : null;
  const config = { ...o.config, coordinator: coord.config() };
  store.writeConfig(config);
  const history = new RunHistory();
  const waiters = new Waiters();
  const traffic = history.replay(store.readEvents(), coord.version, waiters.lastApplied);
  carry = () => history.carryLine(waiters.lastApplied, traffic);
  history.scalars = new ScalarLog(metricsDir(o.dir)); // <dir>/metrics/: JSONL and TensorBoard, from here on
  for (const p of history.points) if (p.evalLoss !== null) store.noteEval(p.version, p.evalLoss);
  const parts = { config, store, metrics: o.metrics, dataset, shards, coord, resumed, history, waiters, traffic };
  return { parts: { ...parts, offload, audit: o.audit, log }, now };
}

/**
 * This process's first lines in the log (and version 0's checkpoint for a new run), made durable;
 * `initFrom`: the folder a new run's θ0 came from (serve --init), recorded in its 'start' line.
 */
export async function firstCommit(p: RunParts, now: number, initFrom?: string): Promise<void> {
  const { coord, store, waiters, history, config } = p;
  // Deltas accepted into the open sync round before a restart: a resend attaches to the ack.
  if (p.resumed) for (const d of coord.snapshot().meta.pending) void waiters.expectAck(d.islandId, d.seq);
  if (!p.resumed) {
    // version 0 is durable before anyone can see it: a restart reproduces it bit for bit
    store.requestCheckpoint(0, () => encodeRunCheckpoint(config, coord.snapshot()));
    const init = initFrom !== undefined ? { init: initFrom } : {};
    store.append({ type: 'start', version: 0, hash: coord.hash, params: coord.paramCount, config, ...init });
    history.start(now, 0);
  } else store.append({ type: 'resume', version: coord.version, hash: coord.hash });
  await store.commit();
}
