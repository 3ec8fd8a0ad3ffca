// The islands' side of the run: hello (join), rename, leave, heartbeats, assignments, deltas, and the
// traffic counters. Everything here calls the coordinator and then `kick()`s the run, whose
// durability pump releases acks and assignments only once the state they report is on disk
// (server/run/run.ts). The gateway reaches it through its RunPort (run-port.ts).

import type { Coordinator } from '../../core/coord/index.ts';
import { type AckMsg, type Assignment, type DeltaMeta, ErrorCode } from '../../core/protocol.ts';
import { type Result, err, ok } from '../../core/result.ts';
import type { RunAudits } from './audit.ts';
import { finiteOrNull } from './history.ts';
import type { BytesOutKind, Metrics } from '../metrics.ts';
import type { OuterOffloadHost } from '../outer/offload.ts';
import type { ResumeTokens } from './resume-tokens.ts';
import type { DeltaArchive } from './delta-archive.ts';
import type { RunStore } from './store.ts';
import type { Waiters } from './waiters.ts';
import type { DurableTheta } from './durable.ts';

/** Bytes in and out of the islands' side, cumulative over the run (restored from the log). */
export interface Traffic {
  bytesIn: number;
  bytesOut: number;
}

/** The run's parts the islands' side works with (run.ts builds them). */
export interface IslandsParts {
  coord: Coordinator;
  store: RunStore;
  metrics: Metrics;
  tokens: ResumeTokens;
  waiters: Waiters;
  offload: OuterOffloadHost | null;
  audits: RunAudits | null;
  archive: DeltaArchive;
  durable: DurableTheta;
  /** Connected island sockets by island id (kept by the gateway through setConnected). */
  connected: Map<string, number>;
  /** The traffic so far; counted on here. */
  traffic: Traffic;
  /** An island connected or left (the views' copy). */
  moved(): void;
  /** Handles what the coordinator queued (the run's durability pump). */
  kick(): void;
}

/** A butterfly group's token-weighted mean Δ (server/gateway/mix.ts), counted as each member's contribution. */
export interface MixedDelta {
  delta: Float32Array;
  norm: number;
}

export class RunIslands {
  private readonly run: IslandsParts;
  /** Bytes in and out, cumulative over the run. */
  readonly traffic: Readonly<Traffic>;
  readonly connected: ReadonlyMap<string, number>;

  constructor(parts: IslandsParts) {
    this.run = parts;
    this.traffic = parts.traffic;
    this.connected = parts.connected;
  }

  /** Sockets a gateway holds for an island (0: none). */
  setConnected(islandId: string, sockets: number): void {
    if (sockets > 0) this.run.connected.set(islandId, sockets);
    else this.run.connected.delete(islandId);
    this.run.moved();
    this.run.metrics.islandsOnline.set(this.run.connected.size);
  }

  /** A resume token for an island id: an HMAC, so it survives restarts without being stored. */
  resumeToken(islandId: string): string {
    return this.run.tokens.token(islandId);
  }

  checkResumeToken(islandId: string, token: unknown): boolean {
    return this.run.tokens.check(islandId, token);
  }

  /** join → the assignment is released only once its base version is durable. */
  async join(
    req: Parameters<Coordinator['join']>[0],
  ): Promise<Result<{ islandId: string; assignment: Assignment | null }>> {
    if (this.run.coord.stepping) await this.run.coord.whenIdle();
    const now = Date.now();
    const known = req.resumeIslandId !== undefined && this.run.coord.island(req.resumeIslandId) !== undefined;
    let r = this.run.coord.join(req, now);
    if (!r.ok && known && r.error.code === ErrorCode.DONE) {
      // The run ended while this island was away (its connection dropped while its last delta was
      // in flight): it resumes, so that a resend of that delta gets its recorded ack (knownAck)
      // and its next assignment says E_DONE. A new island is still refused.
      r = ok({ islandId: req.resumeIslandId!, assignment: null });
    } else if (r.ok && known) {
      // A reconnecting island may still be busy with its previous round (training, or waiting for
      // the ack of a delta): it must not become a member of the open round it will not work on,
      // or a sync round would wait for it in vain. Leaving + heartbeat keeps it online and out of
      // the round; it gets its next assignment when it asks for one.
      this.run.coord.leave(r.value.islandId, now);
      this.run.coord.heartbeat(r.value.islandId, now);
      r.value.assignment = null;
    }
    this.run.kick();
    if (!r.ok) return r;
    this.run.store.append({
      type: 'join',
      island: r.value.islandId,
      name: req.caps.name ?? '',
      engine: req.caps.engine,
      adapter: req.caps.adapter ?? '',
      resumed: req.resumeIslandId !== undefined,
    });
    if (r.value.assignment) r.value.assignment = await this.releasable(r.value.assignment);
    return r;
  }

  rename(islandId: string, name: string): Result<void> {
    const r = this.run.coord.rename(islandId, name);
    if (r.ok) this.run.store.append({ type: 'rename', island: islandId, name });
    return r;
  }

  leave(islandId: string, reason: string): void {
    if (this.run.coord.stepping) {
      void this.run.coord.whenIdle().then(() => this.leave(islandId, reason));
      return;
    }
    const r = this.run.coord.leave(islandId, Date.now());
    if (r.ok) this.run.store.append({ type: 'leave', island: islandId, reason });
    this.run.waiters.deliver(islandId, err(ErrorCode.TRANSPORT, 'island left'));
    this.run.kick();
  }

  heartbeat(islandId: string): void {
    this.run.coord.heartbeat(islandId, Date.now());
    this.run.kick();
  }

  /** The next assignment; waits (sync) until the round closes. */
  async nextAssignment(islandId: string): Promise<Result<Assignment>> {
    if (this.run.coord.stepping) await this.run.coord.whenIdle();
    const r = this.run.coord.nextAssignment(islandId, Date.now());
    this.run.kick();
    if (!r.ok) return r;
    if (r.value) return ok(await this.releasable(r.value));
    return this.run.waiters.waitAssignment(islandId);
  }

  /**
   * An assignment may only name a durable version (an island must never train on a θ a crash could
   * take back). Sync: its round's base, so wait for it. Async: any base is fine (staleness is what
   * the island reports), so hand out the durable one at once instead of waiting for a commit.
   */
  private async releasable(a: Assignment): Promise<Assignment> {
    if (a.baseVersion <= this.run.durable.version) return a;
    if (a.mode === 'async') {
      this.run.coord.rebaseAssignment(a.islandId, a.roundId, this.run.durable.version);
      return { ...a, baseVersion: this.run.durable.version, baseHash: this.run.durable.hash };
    }
    await this.run.durable.whenDurable(a.baseVersion);
    return a;
  }

  /** Drops an island's waiting nextAssignment calls (its socket closed). */
  forgetWaiters(islandId: string): void {
    this.run.waiters.forget(islandId);
  }

  /**
   * Submits one delta. Resolves with the ack: at once when rejected, after the update that holds
   * it is durable when accepted. A resend of a delta that is pending or already applied gets the
   * same answer as the original (the island lost the ack, not the delta).
   */
  async submit(meta: DeltaMeta, frame: Uint8Array, mixed?: MixedDelta): Promise<AckMsg> {
    const known = this.run.waiters.knownAck(meta.islandId, meta.seq, meta.roundId);
    if (known) return this.resent(known, frame, mixed);
    // with the offload, the frame is decoded on a worker first (the coordinator checks the rest);
    // a group's mean comes decoded, into a buffer the coordinator may keep
    const decoded = mixed
      ? ok({ delta: this.heldCopy(mixed.delta), norm: mixed.norm })
      : this.run.offload
        ? await this.run.offload.ingest(frame)
        : undefined;
    if (decoded) {
      // wait out a step in flight; another submit may start one between our wait's end and our turn
      // (a group's members are submitted together), so look again before going on
      do await this.run.coord.whenIdle();
      while (this.run.coord.stepping);
      const again = this.run.waiters.knownAck(meta.islandId, meta.seq, meta.roundId);
      if (again) {
        if (decoded.ok) this.run.offload!.release(decoded.value.delta);
        return this.resent(again, frame, mixed);
      }
    }
    const t0 = performance.now();
    const pick = this.run.audits?.sample(meta) ?? ok(null);
    const r = pick.ok ? this.run.coord.submit({ meta, frame, decoded }, Date.now()) : pick;
    if (!pick.ok && decoded?.ok) this.run.offload!.release(decoded.value.delta);
    if (r.ok) {
      if (pick.ok && pick.value) this.run.audits!.offer(meta, frame, pick.value);
      this.run.archive.hold(
        {
          islandId: meta.islandId,
          seq: meta.seq,
          roundId: meta.roundId,
          baseVersion: meta.baseVersion,
          staleness: r.value.staleness,
          tokens: meta.tokens,
          steps: r.value.steps,
          score: r.value.score,
          lossMean: finiteOrNull(meta.lossMean),
        },
        frame,
      );
    }
    this.run.metrics.applySeconds.observe((performance.now() - t0) / 1000);
    if (!mixed) this.noteBytesIn(frame.length); // a group's fragments were counted as they came (mix-gateway.ts)
    if (!r.ok) {
      this.run.metrics.deltasRejected.inc({ code: r.error.code });
      this.run.store.append({
        type: 'delta',
        island: meta.islandId,
        seq: meta.seq,
        round: meta.roundId,
        base: meta.baseVersion,
        bytes: frame.length,
        status: 'rejected',
        code: r.error.code,
      });
      this.run.kick();
      return {
        islandId: meta.islandId,
        seq: meta.seq,
        roundId: meta.roundId,
        status: 'rejected',
        version: this.run.durable.version,
        error: r.error,
      };
    }
    this.run.store.append({
      type: 'delta',
      island: meta.islandId,
      seq: meta.seq,
      round: meta.roundId,
      base: meta.baseVersion,
      bytes: frame.length,
      status: r.value.status,
      staleness: r.value.staleness,
      tokens: meta.tokens,
      loss: finiteOrNull(meta.lossMean),
    });
    const ack = this.run.waiters.expectAck(meta.islandId, meta.seq);
    this.run.kick();
    return ack;
  }

  /** A copy of a group's mean in a buffer the coordinator can hold (the offload's shared memory when offloaded). */
  private heldCopy(delta: Float32Array): Float32Array {
    const buf = this.run.offload ? this.run.offload.buffer() : new Float32Array(delta.length);
    buf.set(delta);
    return buf;
  }

  /**
   * A Δ the run already holds, sent again: its bytes came in all the same (a
   * group's mean came as fragments, counted then); the first ack answers it.
   */
  private resent(ack: Promise<AckMsg>, frame: Uint8Array, mixed: MixedDelta | undefined): Promise<AckMsg> {
    if (!mixed) {
      this.noteBytesIn(frame.length);
      this.run.metrics.deltasResent.inc();
    }
    return ack;
  }

  /** Counts a rejection made before the coordinator saw the message (schema, size, identity). */
  noteRejected(code: string, bytes: number): void {
    this.run.metrics.deltasRejected.inc({ code });
    this.noteBytesIn(bytes);
  }

  noteBytesIn(bytes: number): void {
    this.run.traffic.bytesIn += bytes;
    this.run.metrics.bytesIn.inc(bytes);
  }

  noteBytesOut(bytes: number, kind: BytesOutKind): void {
    this.run.traffic.bytesOut += bytes;
    this.run.metrics.bytesOut.inc({ kind }, bytes);
  }
}
