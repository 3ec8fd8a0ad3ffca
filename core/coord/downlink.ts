// The server side of the downlink: the outer update is quantized with server-side error feedback
// (every replica applies the same decoded bits; a sparse downlink's residual keeps the entries a
// frame left out, decayed by its feedbackDecay), and the last update frames are kept for catch-up.

import { CodecScratch, ErrorFeedback, encodeWithFeedback } from '../codec/index.ts';
import { type Result, err, ok } from '../result.ts';
import { ErrorCode, type UpdateMsg } from '../protocol.ts';
import type { CoordinatorConfig } from './config.ts';

export class Downlink {
  readonly fb: ErrorFeedback;
  /** The last `keepUpdates` update messages, oldest first. */
  updates: UpdateMsg[] = [];
  private readonly residualBackup: Float32Array;
  private readonly scratch = new CodecScratch();

  constructor(n: number) {
    this.fb = new ErrorFeedback(n);
    this.residualBackup = new Float32Array(n);
  }

  /**
   * Encodes update u with error feedback. Returns the frame and the decoded update every replica
   * applies; on failure the residual is left as it was.
   */
  encode(u: Float32Array, cfg: CoordinatorConfig['downlink']): Result<{ frame: Uint8Array; decoded: Float32Array }> {
    this.residualBackup.set(this.fb.residual);
    const q = encodeWithFeedback(u, this.fb, cfg, this.scratch); // the config is the codec's options (sparse's too)
    if (!q.ok) {
      this.fb.residual.set(this.residualBackup);
      return err(q.error.code, `the outer update could not be encoded: ${q.error.message}`);
    }
    return ok({ frame: q.value.frame, decoded: q.value.decoded });
  }

  keep(update: UpdateMsg, limit: number): void {
    this.updates.push(update);
    if (this.updates.length > limit) this.updates.splice(0, this.updates.length - limit);
  }

  /**
   * The update messages from `fromVersion` to `version`. E_TOO_OLD when some are no longer kept
   * (fetch the snapshot), E_FUTURE_VERSION when fromVersion is ahead.
   */
  since(fromVersion: number, version: number, maxBytes = Infinity): Result<UpdateMsg[]> {
    if (fromVersion > version)
      return err(ErrorCode.FUTURE_VERSION, `version ${fromVersion} is ahead of the server's ${version}`);
    if (fromVersion === version) return ok([]);
    const first = this.updates.length ? this.updates[0].prevVersion : version;
    if (fromVersion < first)
      return err(
        ErrorCode.TOO_OLD,
        `updates from version ${fromVersion} are no longer kept (oldest ${first}): fetch the snapshot`,
      );
    const ups = this.updates.slice(fromVersion - first);
    // the lean downlink: k frames, or θ when that is smaller
    const bytes = ups.reduce((a, u) => a + u.frame.length, 0);
    if (bytes > maxBytes)
      return err(
        ErrorCode.TOO_OLD,
        `${ups.length} updates (${bytes} bytes) are larger than θ (${maxBytes} bytes): fetch the snapshot`,
      );
    return ok(ups);
  }
}
