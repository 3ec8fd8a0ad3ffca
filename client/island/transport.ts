// The island's view of the server: the Transport interface every island runtime talks through.
// socket.io (browser and Node islands), the in-process transport of the simulator and the test
// transports implement it. No node: imports here.

import type { Result } from '../../core/result.ts';
import type { AckMsg, Assignment, DeltaMeta, HelloMsg, ModelSnapshotMsg, UpdateMsg } from '../../core/protocol.ts';

export interface HelloResult {
  islandId: string;
  /** null: the server has no work right now; call nextAssignment() (it resolves when there is). */
  assignment: Assignment | null;
}

export interface Transport {
  /** Registers the island. */
  hello(msg: HelloMsg): Promise<Result<HelloResult>>;
  /** The full model at the server's current version. */
  fetchModel(): Promise<Result<ModelSnapshotMsg>>;
  /**
   * Sends one delta. Resolves with the server's ack, which the server sends only once the update
   * that includes the delta is durable (AckMsg.status 'applied'), or at once when it rejects it
   * ('rejected' + error). A transport failure is { ok: false, code E_TRANSPORT }: resend the same
   * (meta, frame), the seq guards against double counting.
   */
  submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>>;
  /** Resolves with the next assignment once there is one (sync: when the round closes). E_DONE ends the run. */
  nextAssignment(): Promise<Result<Assignment>>;
  /** Update messages after `fromVersion` up to the server's current one; E_TOO_OLD: fetch the model. */
  fetchUpdates(fromVersion: number): Promise<Result<UpdateMsg[]>>;
  /** Subscribes to pushed update messages; returns the unsubscribe function. */
  onUpdate(listener: (msg: UpdateMsg) => void): () => void;
  /** Says bye and releases the connection. */
  close(reason: string): Promise<void>;
}

/** Time source and sleep: the wall clock by default, a virtual clock in the simulator. */
export interface Clock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

export const wallClock: Clock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms))),
};
