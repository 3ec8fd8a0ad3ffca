// The island's replica of θ and its downlink: pushed updates wait in an inbox until they follow the
// replica's version; a round's base is reached by them, else by fetched ones, else by the snapshot
// (each hash-checked). IslandRuntime (runtime.ts) owns one.

import { applyUpdateMessage, type ReplicaState } from '../../core/coord/replica.ts';
import { hashParams } from '../../core/coord/hash.ts';
import { ErrorCode, type UpdateMsg } from '../../core/protocol.ts';
import type { Result } from '../../core/result.ts';
import type { IslandEvent, IslandProgress } from './runtime-types.ts';
import type { Transport } from './transport.ts';

export class ReplicaSync {
  /** θ as the island holds it (null before the first model download, or after it fell out of sync). */
  replica: ReplicaState | null = null;
  /** The newest version heard of (pushed or fetched). */
  latestKnownVersion = -1;
  private inbox: UpdateMsg[] = [];
  private decodeScratch: Float32Array | null = null;

  constructor(
    private readonly transport: Transport,
    private readonly progress: IslandProgress,
    private readonly emit: (e: IslandEvent) => void,
  ) {}

  onPushed(msg: UpdateMsg): void {
    this.progress.bytesDown += msg.frame.length;
    this.latestKnownVersion = Math.max(this.latestKnownVersion, msg.version);
    this.inbox.push(msg);
    this.drain();
  }

  /** Applies buffered updates that follow the replica's version; drops old ones. */
  drain(): boolean {
    const rep = this.replica;
    if (!rep) return true;
    let progressed = true;
    while (progressed && this.inbox.length) {
      progressed = false;
      for (let k = 0; k < this.inbox.length; k++) {
        const msg = this.inbox[k];
        if (msg.version <= rep.version) {
          this.inbox.splice(k--, 1);
          continue;
        }
        if (msg.prevVersion !== rep.version) continue;
        this.inbox.splice(k, 1);
        if (!this.applyOne(msg)) return false;
        progressed = true;
        break;
      }
    }
    return true;
  }

  private applyOne(msg: UpdateMsg): boolean {
    const rep = this.replica!;
    if (!this.decodeScratch || this.decodeScratch.length !== rep.params.length)
      this.decodeScratch = new Float32Array(rep.params.length);
    const r = applyUpdateMessage(rep, msg, this.decodeScratch);
    if (!r.ok) {
      this.emit({ type: 'error', error: r.error });
      this.replica = null; // out of sync (hash mismatch or bad frame): refetch the snapshot
      return false;
    }
    this.progress.version = rep.version;
    this.emit({ type: 'synced', version: rep.version, hash: rep.hash, via: 'update' });
    return true;
  }

  /** Brings the replica to at least `minVersion`: pushed updates, then fetched ones, else the snapshot. */
  async sync(minVersion: number): Promise<Result<void>> {
    for (let attempt = 0; attempt < 3; attempt++) {
      this.drain();
      if (this.replica && this.replica.version >= minVersion) return { ok: true, value: undefined };
      if (this.replica) {
        const ups = await this.transport.fetchUpdates(this.replica.version);
        if (ups.ok) {
          for (const u of ups.value) {
            this.progress.bytesDown += u.frame.length;
            this.latestKnownVersion = Math.max(this.latestKnownVersion, u.version);
            if (!this.replica || u.version <= this.replica.version) continue;
            if (!this.applyOne(u)) break;
          }
          if (this.replica && this.replica.version >= minVersion) return { ok: true, value: undefined };
        }
      }
      const snap = await this.transport.fetchModel();
      if (!snap.ok) return snap;
      const s = snap.value;
      this.progress.bytesDown += s.fetchedBytes ?? s.params.byteLength;
      this.progress.snapshots += 1;
      const hash = hashParams(s.params);
      if (hash !== s.hash) {
        this.emit({
          type: 'error',
          error: { code: ErrorCode.HASH_MISMATCH, message: `snapshot hash ${hash} ≠ ${s.hash}` },
        });
        continue;
      }
      this.replica = { version: s.version, hash, params: s.params.slice() };
      this.latestKnownVersion = Math.max(this.latestKnownVersion, s.version);
      this.progress.version = s.version;
      this.emit({ type: 'synced', version: s.version, hash, via: 'snapshot' });
    }
    this.drain();
    if (this.replica && this.replica.version >= minVersion) return { ok: true, value: undefined };
    return { ok: false, error: { code: ErrorCode.HASH_MISMATCH, message: `could not reach version ${minVersion}` } };
  }
}
