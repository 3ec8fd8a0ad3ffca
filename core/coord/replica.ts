// The replica side of the downlink: apply one update message to a local θ and prove it matches.

import { type Result, err, ok } from '../result.ts';
import { decodeDelta } from '../codec/index.ts';
import { ErrorCode, type UpdateMsg } from '../protocol.ts';
import { hashParams } from './hash.ts';
import { applyUpdate } from './outer.ts';

/** A local copy of θ at some version. */
export interface ReplicaState {
  version: number;
  hash: string;
  params: Float32Array;
}

/**
 * Applies `msg` (v−1 → v) to `replica` in place: decode, θ ← θ − û (applyUpdate), re-hash.
 * Errors (nothing is changed unless noted):
 *   E_FUTURE_VERSION / E_STALE  the message does not follow the replica's version;
 *   codec codes                 the frame does not decode;
 *   E_HASH_MISMATCH             θ was changed but its hash differs from the server's: the replica
 *                               is now unusable and must fetch the snapshot.
 * `scratch` (n floats) avoids an allocation per message.
 */
export function applyUpdateMessage(replica: ReplicaState, msg: UpdateMsg, scratch?: Float32Array): Result<void> {
  if (msg.prevVersion !== replica.version) {
    return msg.prevVersion > replica.version
      ? err(
          ErrorCode.FUTURE_VERSION,
          `update ${msg.prevVersion}→${msg.version} does not follow version ${replica.version}`,
        )
      : err(ErrorCode.STALE, `update ${msg.prevVersion}→${msg.version} is already applied (at ${replica.version})`);
  }
  const n = replica.params.length;
  const d = decodeDelta(msg.frame, n, scratch && scratch.length === n ? scratch : undefined);
  if (!d.ok) return d;
  applyUpdate(replica.params, d.value);
  replica.version = msg.version;
  replica.hash = hashParams(replica.params);
  if (replica.hash !== msg.hash) {
    return err(ErrorCode.HASH_MISMATCH, `θ hash ${replica.hash} ≠ server's ${msg.hash} at version ${msg.version}`);
  }
  return ok(undefined);
}
