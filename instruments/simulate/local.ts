// In-process transport: islands and the coordinator in one JS process (simulator, tests, `atoll
// train`-style local runs). It follows the same durability contract as the server: a delta's ack
// is released only after the 'update' that includes it has been handed to `persist` (awaited).
//
// Network effects are pluggable: each transport may have a Link whose up()/down() await the time
// a message of that many bytes takes (the simulator advances a virtual clock there). The bytes are
// what the live socket.io link would carry for the same message (wire-bytes.ts).

import type { Coordinator, CoordinatorEvent, DeltaSubmission } from '../../core/coord/index.ts';
import { type Result, err, ok } from '../../core/result.ts';
import {
  type AckMsg,
  type Assignment,
  type DeltaMeta,
  ErrorCode,
  type HelloAnswer,
  type HelloMsg,
  type ModelSnapshotMsg,
  PROTOCOL_VERSION,
  type UpdateMsg,
} from '../../core/protocol.ts';
import { type Clock, type HelloResult, type Transport, wallClock } from '../../client/island/transport.ts';
import { ackBytes, emitBytes, okBytes } from '../../core/wire-bytes.ts';

/** An HTTP GET of /api/model (request line and headers): the snapshot itself comes back as its f32 params. */
const MODEL_REQUEST_BYTES = 160;

/**
 * Time a message takes on an island's link; resolve when it has arrived. `what`: the message's event (for breakdowns).
 */
export interface Link {
  up(bytes: number, what?: string): Promise<void>;
  down(bytes: number, what?: string): Promise<void>;
}

export const instantLink: Link = { up: async () => {}, down: async () => {} };

export interface LocalHubOptions {
  clock?: Clock;
  /** Called for each 'update' event before any ack is released (a server writes its checkpoint here). */
  persist?: (ev: Extract<CoordinatorEvent, { type: 'update' }>) => void | Promise<void>;
  /** Takes an update's delivery to one transport over (true: butterfly mixing's pieces); default: the whole update. */
  route?: (update: UpdateMsg, t: LocalTransport) => boolean;
  /** Sees every event after it is handled (metrics, logs). */
  observe?: (ev: CoordinatorEvent) => void;
}

interface Waiter<T> {
  resolve: (v: T) => void;
}

/** Owns the coordinator and routes its events to the in-process transports. */
export class LocalHub {
  readonly coord: Coordinator;
  readonly clock: Clock;
  private readonly opts: LocalHubOptions;
  private readonly transports = new Set<LocalTransport>();
  /** Pending acks by `${islandId}#${seq}`. */
  private readonly ackWaiters = new Map<string, Waiter<AckMsg>>();
  /** Pending nextAssignment calls by island id. */
  private readonly assignWaiters = new Map<string, Waiter<Result<Assignment>>>();
  private dispatching: Promise<void> = Promise.resolve();
  private tickTimerAt = Infinity;
  private closed = false;

  constructor(coord: Coordinator, opts: LocalHubOptions = {}) {
    this.coord = coord;
    this.clock = opts.clock ?? wallClock;
    this.opts = opts;
  }

  /** A transport for one island. */
  connect(link: Link = instantLink): LocalTransport {
    const t = new LocalTransport(this, link);
    this.transports.add(t);
    return t;
  }

  /** Stops scheduling ticks (end of a simulation). */
  close(): void {
    this.closed = true;
  }

  /** @internal */ detach(t: LocalTransport): void {
    this.transports.delete(t);
  }

  /** Submits one delta to the coordinator now; resolves with its ack (rejected at once, or once durable). */
  async submit(sub: DeltaSubmission): Promise<AckMsg> {
    const { meta } = sub;
    const r = this.coord.submit(sub, this.clock.now());
    if (!r.ok) {
      await this.dispatch();
      return {
        islandId: meta.islandId,
        seq: meta.seq,
        roundId: meta.roundId,
        status: 'rejected',
        version: this.coord.version,
        error: r.error,
      };
    }
    const waiting = this.waitAck(meta.islandId, meta.seq);
    await this.dispatch();
    return waiting;
  }

  /** @internal */ waitAck(islandId: string, seq: number): Promise<AckMsg> {
    return new Promise((resolve) => this.ackWaiters.set(`${islandId}#${seq}`, { resolve }));
  }

  /** @internal */ waitAssignment(islandId: string): Promise<Result<Assignment>> {
    return new Promise((resolve) => this.assignWaiters.set(islandId, { resolve }));
  }

  /** @internal */ forgetIsland(islandId: string): void {
    const w = this.assignWaiters.get(islandId);
    this.assignWaiters.delete(islandId);
    w?.resolve(err(ErrorCode.TRANSPORT, 'disconnected'));
  }

  /**
   * Handles every queued coordinator event in order (serialised: one dispatch at a time, so an
   * update is persisted before the next one's acks). Call after every coordinator call.
   */
  dispatch(): Promise<void> {
    this.dispatching = this.dispatching.then(() => this.dispatchNow());
    return this.dispatching;
  }

  private async dispatchNow(): Promise<void> {
    for (;;) {
      const events = this.coord.drainEvents();
      if (events.length === 0) break;
      for (const ev of events) {
        if (ev.type === 'update') {
          if (this.opts.persist) await this.opts.persist(ev);
          for (const c of ev.contributors) {
            this.resolveAck(c.islandId, c.seq, {
              islandId: c.islandId,
              seq: c.seq,
              roundId: c.roundId,
              status: 'applied',
              version: ev.update.version,
            });
          }
          for (const r of ev.rejected) this.rejectAck(r.islandId, r.seq, r.roundId, r.error);
          for (const t of this.transports) if (!this.opts.route?.(ev.update, t)) t.deliver(ev.update);
        } else if (ev.type === 'rejected') {
          for (const r of ev.rejected) this.rejectAck(r.islandId, r.seq, r.roundId, r.error);
        } else if (ev.type === 'assignment') {
          const w = this.assignWaiters.get(ev.islandId);
          if (w) {
            this.assignWaiters.delete(ev.islandId);
            w.resolve(ev.result);
          }
        } else if (ev.type === 'done') {
          for (const [id, w] of this.assignWaiters) {
            this.assignWaiters.delete(id);
            w.resolve(err(ErrorCode.DONE, 'the run reached its token budget'));
          }
        }
        this.opts.observe?.(ev);
      }
    }
    this.scheduleTick();
  }

  private resolveAck(islandId: string, seq: number, ack: AckMsg): void {
    const key = `${islandId}#${seq}`;
    const w = this.ackWaiters.get(key);
    if (w) {
      this.ackWaiters.delete(key);
      w.resolve(ack);
    }
  }

  private rejectAck(islandId: string, seq: number, roundId: number, error: { code: string; message: string }): void {
    this.resolveAck(islandId, seq, { islandId, seq, roundId, status: 'rejected', version: this.coord.version, error });
  }

  /** Arms one timer for the coordinator's next deadline (grace window, round timeout). */
  private scheduleTick(): void {
    if (this.closed) return;
    const at = this.coord.nextDeadline();
    if (!Number.isFinite(at) || at >= this.tickTimerAt) return;
    this.tickTimerAt = at;
    void this.clock.sleep(Math.max(0, at - this.clock.now())).then(() => {
      if (this.tickTimerAt !== at) return;
      this.tickTimerAt = Infinity;
      if (this.closed) return;
      this.coord.tick(this.clock.now());
      void this.dispatch();
    });
  }
}

/** One island's in-process connection to a LocalHub. */
export class LocalTransport implements Transport {
  private readonly hub: LocalHub;
  private readonly link: Link;
  private readonly listeners = new Set<(m: UpdateMsg) => void>();
  private islandId: string | null = null;
  private dead = false;

  constructor(hub: LocalHub, link: Link) {
    this.hub = hub;
    this.link = link;
  }

  get id(): string | null {
    return this.islandId;
  }

  /** Simulates a crash / lost connection: every later call fails, the coordinator sees the island leave. */
  kill(): void {
    void this.disconnect();
  }

  /** Detaches from the hub and tells the coordinator the island left (once). */
  private async disconnect(): Promise<void> {
    if (this.dead) return;
    this.dead = true;
    this.hub.detach(this);
    if (this.islandId) {
      this.hub.coord.leave(this.islandId, this.hub.clock.now());
      this.hub.forgetIsland(this.islandId);
      await this.hub.dispatch();
    }
  }

  private gone<T>(): Result<T> {
    return err(ErrorCode.TRANSPORT, 'connection closed');
  }

  async hello(msg: HelloMsg): Promise<Result<HelloResult>> {
    if (this.dead) return this.gone();
    await this.link.up(emitBytes('up', 'hello', msg), 'hello');
    if (this.dead) return this.gone();
    const now = this.hub.clock.now();
    const r = this.hub.coord.join(
      { caps: msg.caps, protocolVersion: msg.protocolVersion, resumeIslandId: msg.resumeIslandId },
      now,
    );
    await this.hub.dispatch();
    await this.link.down(
      r.ok
        ? okBytes('down', helloAnswer(r.value.islandId, r.value.assignment, this.hub.coord, now))
        : errBytes(r.error),
      'hello',
    );
    if (!r.ok) return r;
    this.islandId = r.value.islandId;
    return ok({ islandId: r.value.islandId, assignment: r.value.assignment });
  }

  async fetchModel(): Promise<Result<ModelSnapshotMsg>> {
    if (this.dead) return this.gone();
    await this.link.up(MODEL_REQUEST_BYTES, 'model');
    const m = this.hub.coord.model();
    await this.link.down(m.params.byteLength, 'model');
    return this.dead ? this.gone() : ok(m);
  }

  async submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    if (this.dead) return this.gone();
    await this.link.up(emitBytes('up', 'delta', { meta, frame }), 'delta');
    if (this.dead) return this.gone();
    const ack = await this.hub.submit({ meta, frame });
    await this.link.down(okBytes('down', ack), 'delta');
    return this.dead ? this.gone() : ok(ack);
  }

  async nextAssignment(): Promise<Result<Assignment>> {
    if (this.dead || !this.islandId) return this.gone();
    await this.link.up(emitBytes('up', 'nextAssignment', {}), 'nextAssignment');
    if (this.dead) return this.gone();
    const id = this.islandId;
    const r = this.hub.coord.nextAssignment(id, this.hub.clock.now());
    let out: Result<Assignment>;
    if (!r.ok) out = r;
    else if (r.value) out = ok(r.value);
    else {
      const waiting = this.hub.waitAssignment(id);
      await this.hub.dispatch();
      out = await waiting;
    }
    await this.hub.dispatch();
    await this.link.down(out.ok ? okBytes('down', out.value) : errBytes(out.error), 'nextAssignment');
    return this.dead ? this.gone() : out;
  }

  async fetchUpdates(fromVersion: number): Promise<Result<UpdateMsg[]>> {
    if (this.dead) return this.gone();
    await this.link.up(emitBytes('up', 'updates', { fromVersion }), 'updates');
    const r = this.hub.coord.updatesSince(fromVersion);
    await this.link.down(r.ok ? okBytes('down', r.value) : errBytes(r.error), 'updates');
    return this.dead ? this.gone() : r;
  }

  onUpdate(listener: (msg: UpdateMsg) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** @internal Broadcast from the hub; arrives after this link's downlink time. */
  deliver(msg: UpdateMsg): void {
    if (this.dead || this.listeners.size === 0) return;
    void this.link.down(emitBytes('down', 'update', msg, false), 'update').then(() => {
      if (this.dead) return;
      for (const l of this.listeners) l(msg);
    });
  }

  async close(_reason: string): Promise<void> {
    await this.disconnect();
  }
}

/** A refused request's answer, `{ ok: false, error }`. */
function errBytes(error: { code: string; message: string }): number {
  return ackBytes('down', { ok: false, error: { code: error.code, message: error.message } });
}

/** The hello answer the live server sends (HelloAnswer): what the simulator counts for a join. */
function helloAnswer(islandId: string, assignment: Assignment | null, coord: Coordinator, now: number): HelloAnswer {
  const maxFrameBytes = coord.maxFrameBytes();
  return {
    islandId,
    resumeToken: 'r'.repeat(32),
    assignment,
    version: coord.version,
    hash: coord.hash,
    protocolVersion: PROTOCOL_VERSION,
    maxFrameBytes,
    maxHttpBufferSize: maxFrameBytes + Math.max(1 << 20, maxFrameBytes >> 3),
    serverTime: now,
    resumed: false,
  };
}
