// The coordinator: versions, rounds, outer optimizers, staleness, DyLU, validation.
// Pure logic (no I/O, no timers): the server, the simulator and tests drive the same code.
//
//   const coord = new Coordinator({ params: initParams(cfg, seed), config: { mode: 'sync' } });
//   const j = coord.join({ caps }, now);                  // → { islandId, assignment | null }
//   const r = coord.submit({ meta, frame }, now);         // → validated; ack from events
//   for (const ev of coord.drainEvents()) { ... }         // 'update' → persist, THEN ack contributors
//   coord.tick(now);                                      // grace windows, timeouts (at coord.nextDeadline())
//
// Replicas: applyUpdate(theta, decodeDelta(update.frame, n)) then hashParams(theta) === update.hash.

export {
  Coordinator,
  trimmedMean,
  type CoordinatorEvent,
  type CoordinatorOptions,
  type CoordinatorSnapshot,
  type CoordinatorSnapshotMeta,
  type CoordinatorTotals,
  type Contribution,
  type DeltaSubmission,
  type IslandRecord,
  type IslandStatus,
  type JoinRequest,
  type JoinResult,
  type RejectedContribution,
  type SubmitAccepted,
  type VersionStats,
} from './coordinator.ts';
export {
  type CoordinatorConfig,
  type CoordinatorConfigPatch,
  type StalenessFn,
  COLD_START_WARMUP_STEPS,
  DEFAULT_COORDINATOR_CONFIG,
  DENSE_DOWNLINK,
  RUNTIME_KEYS,
  codecSetting,
  MEASURED_SETTING,
  SPARSE_CODE_DOWNLINK,
  SPARSE_DOWNLINK,
  SPARSE_UPLINK,
  TOPK_UPLINK,
  ASYNC_WINDOW_FRACTION,
  downlinkSetting,
  mergeConfig,
  stalenessWeight,
  validateCoordinatorConfig,
} from './config.ts';
export {
  type OuterConfig,
  type OuterKind,
  type OuterState,
  DILOCO_OUTER,
  FEDAVG_OUTER,
  OuterOptimizer,
  applyUpdate,
  newOuterState,
} from './outer.ts';
export { type DyluInput, dyluInnerSteps } from './dylu.ts';
export { hashParams } from './hash.ts';
export { applyUpdateMessage, type ReplicaState } from './replica.ts';
