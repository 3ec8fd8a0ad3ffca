// The socket.io gateway: the island protocol (namespace /island, docs/protocol.md) and the
// read-only live stream of the dashboard (namespace /dashboard).
//
// Every inbound message is checked against a compiled TypeBox schema before anything reads it,
// and every request is answered through its ack callback with a Result:
//   { ok: true, value } | { ok: false, error: { code, message } }
// The events are declared in one table (island-events.ts, mix.ts's `events`) and registered by one
// loop (socket-events.ts). A message with no ack callback, an unknown event, or too many of either
// gets a `protocol_error` emit and, past a budget, a disconnect. Nothing a client sends can throw
// out of a handler.

import type { IncomingMessage, Server as HttpServer } from 'node:http';
import { Server, type Namespace, type Socket } from 'socket.io';
import { ErrorCode } from '../../core/protocol.ts';
import type { RunPort } from './run-port.ts';
import { AuthLimiter } from '../plugins/auth-limit.ts';
import { IdentityCost } from './identity-cost.ts';
import { TokenBuckets } from './token-buckets.ts';
import type { MixGateway } from './mix.ts';
import type { Metrics } from '../metrics.ts';
import { type WirePacket, WireMeter } from './wire-meter.ts';
import { DashboardStream } from './dashboard-stream.ts';
import { islandEvents } from './island-events.ts';
import { IslandSockets } from './island-sockets.ts';
import { type EventTable, GatewayError, type IslandConn, registerEvents } from './socket-events.ts';

export { GatewayError } from './socket-events.ts';

// ── options ──────────────────────────────────

export interface GatewayOptions {
  /** The run: in this process (localPort) or over Redis (cluster/remote-port.ts). */
  run: RunPort;
  /** hello messages per IP per minute. */
  helloPerMinute: number;
  /** A new identity's proof of work (leading zero bits; 0: none) and its budget per address per hour. */
  powBits?: number;
  newIslandsPerHour?: number;
  maxIslands: number;
  /** Origins allowed besides same-origin; requests without an Origin header (Node islands) pass. */
  allowOrigins: string[];
  /** Per-socket messages per second (burst: 2 s worth). */
  messagesPerSecond?: number;
  /** Protocol violations (no ack, unknown event) before a disconnect. */
  violationBudget?: number;
  /** Dashboard stream period, ms (≥ 500: at most 2 messages per second). */
  dashboardPeriodMs?: number;
  heartbeatMs?: number;
  log?: (line: string) => void;
  /** Butterfly mixing (mix-gateway.ts); absent: off, islands upload directly. */
  mix?: MixGateway;
  /** Counters of the islands' connections' bytes as sent (engine.io packets); absent: not counted. */
  wire?: Pick<Metrics, 'wireBytesIn' | 'wireBytesOut'>;
}

/** Addresses whose hello budget is remembered (the least recently seen is forgotten first). */
const HELLO_ADDRESSES = 100_000;

export class Gateway {
  readonly io: Server;
  readonly islands: Namespace;
  readonly dashboard: Namespace;
  /** The largest inbound socket.io packet: the largest legal frame plus headroom. */
  readonly maxHttpBufferSize: number;
  private readonly run: RunPort;
  private readonly opts: GatewayOptions;
  /** The hellos counted per address, a minute's worth at most. */
  private readonly helloLimiter: TokenBuckets;
  /** Sockets by island id (usually one; a newer connection replaces an older one). */
  private readonly sockets: IslandSockets;
  private readonly dashStream: DashboardStream;
  private heartbeatTimer: ReturnType<typeof setInterval>;
  private readonly log: (line: string) => void;
  /** Wrong validator tokens, per address, with back-off (auth-limit.ts). */
  readonly validatorAuth: AuthLimiter;
  /** What a new identity costs (identity-cost.ts). */
  readonly identities: IdentityCost;
  /** Every event an island socket may send, each declared once (socket-events.ts). */
  private readonly events: EventTable<IslandConn>;
  private readonly known: Set<string>;
  /** Counters for tests and the bench. */
  stats = { violations: 0, oversize: 0, disconnectsForViolations: 0, dashboardMessages: 0 };

  constructor(http: HttpServer, opts: GatewayOptions) {
    this.run = opts.run;
    this.opts = opts;
    this.log = opts.log ?? (() => {});
    this.helloLimiter = new TokenBuckets(opts.helloPerMinute, 60_000, HELLO_ADDRESSES);
    this.validatorAuth = new AuthLimiter('validator token', this.log);
    this.identities = new IdentityCost(opts.powBits ?? 16, opts.newIslandsPerHour ?? 60);
    this.sockets = new IslandSockets(this.run);
    // Headroom over the legal frame: a somewhat oversized frame still arrives and gets E_OVERSIZE;
    // only a grossly oversized one is cut by the transport (the island learnt the limit beforehand).
    const maxFrame = this.run.maxFrameBytes();
    this.maxHttpBufferSize = maxFrame + Math.max(1 << 20, maxFrame >> 3);
    this.events = {
      ...islandEvents({ ...this.eventHost(), maxIslands: opts.maxIslands, mix: opts.mix }),
      ...opts.mix?.events,
    };
    this.known = new Set(Object.keys(this.events));
    this.io = new Server(http, {
      path: '/socket.io',
      serveClient: false,
      maxHttpBufferSize: this.maxHttpBufferSize,
      // Frames are already compressed; per-message deflate would only burn CPU.
      perMessageDeflate: false,
      httpCompression: false,
      pingInterval: 10_000,
      pingTimeout: 10_000,
      connectTimeout: 20_000,
      allowRequest: (req, cb) => cb(null, this.originAllowed(req)),
    });
    this.islands = this.io.of('/island');
    this.dashboard = this.io.of('/dashboard');
    this.islands.on('connection', (s) => this.onIsland(s));
    this.dashStream = new DashboardStream(this.dashboard, this.run, opts.dashboardPeriodMs, this.stats, this.log);
    // socket.io's own engine errors (e.g. a packet above maxHttpBufferSize): say why in the log
    this.io.engine.on('connection_error', (e: { code: number; message: string }) =>
      this.log(`socket.io connection error ${e.code}: ${e.message}`),
    );

    this.run.listen({
      update: (u) => {
        // mixed groups get the update as pieces they all-gather (mix-gateway.ts); the rest get it whole
        const pieces = this.opts.mix?.route(u) ?? [];
        const n = (this.islands.adapter.rooms.get('islands')?.size ?? 0) - pieces.length;
        (pieces.length ? this.islands.to('islands').except(pieces) : this.islands.to('islands')).emit('update', u);
        this.run.noteBytesOut(n * (u.frame.length + 256), 'update');
      },
      ban: (id) => {
        for (const s of this.sockets.of(id)) {
          s.emit('banned', { code: ErrorCode.BANNED, message: 'this island was banned by the run admin' });
          s.disconnect(true);
        }
      },
      // closing the transport (not a disconnect, which islands take as final) makes them reconnect and resume
      reset: () => {
        for (const s of this.islands.sockets.values()) s.conn.close();
      },
    });
    this.heartbeatTimer = setInterval(() => this.run.heartbeat(this.sockets.ids()), opts.heartbeatMs ?? 10_000);
    this.heartbeatTimer.unref();
  }

  /** What the island events read of the gateway (island-events.ts). */
  private eventHost() {
    const { run, helloLimiter, identities, validatorAuth, sockets, maxHttpBufferSize, stats } = this;
    return { run, helloLimiter, identities, validatorAuth, sockets, maxHttpBufferSize, stats };
  }

  private originAllowed(req: IncomingMessage): boolean {
    const origin = req.headers.origin;
    if (!origin) return true; // Node islands, curl: not a browser, CORS does not apply
    try {
      const u = new URL(origin);
      if (u.host === req.headers.host) return true;
    } catch {
      return false;
    }
    return this.opts.allowOrigins.includes(origin);
  }

  async close(): Promise<void> {
    this.dashStream.close();
    clearInterval(this.heartbeatTimer);
    this.opts.mix?.close();
    // No explicit disconnect: closing the transports lets islands reconnect to the next process.
    await new Promise<void>((r) => this.io.close(() => r()));
  }

  /** Island sockets connected now (for tests). */
  get islandSockets(): number {
    return this.islands.sockets.size;
  }

  // ── islands ─────────────────────────────────

  private onIsland(socket: Socket): void {
    const ip = socket.handshake.address;
    const c: IslandConn = { socket, islandId: null, ip, tokens: 0, refilledAt: Date.now(), violations: 0 };
    const rate = this.opts.messagesPerSecond ?? 100;
    c.tokens = 2 * rate;
    const budget = this.opts.violationBudget ?? 32;
    const wire = this.opts.wire;
    if (wire) {
      const meter = new WireMeter(wire);
      socket.conn.on('packet', (p: WirePacket) => meter.count(p, 'up'));
      socket.conn.on('packetCreate', (p: WirePacket) => meter.count(p, 'down'));
    }

    const violation = (code: string, message: string) => {
      this.stats.violations++;
      c.violations++;
      socket.emit('protocol_error', { code, message });
      if (c.violations > budget) {
        this.stats.disconnectsForViolations++;
        socket.disconnect(true);
      }
    };
    const allow = (): boolean => {
      const now = Date.now();
      c.tokens = Math.min(2 * rate, c.tokens + ((now - c.refilledAt) * rate) / 1000);
      c.refilledAt = now;
      if (c.tokens < 1) return false;
      c.tokens -= 1;
      return true;
    };
    socket.onAny((event: string) => {
      if (!this.known.has(event))
        violation(GatewayError.UNKNOWN_EVENT, `unknown event '${String(event).slice(0, 64)}'`);
    });
    registerEvents(socket, this.events, c, { allow, violation, log: this.log });

    socket.on('disconnect', (reason) => {
      const id = c.islandId;
      if (!id) return;
      c.islandId = null;
      this.sockets.unbind(id, socket);
      this.opts.mix?.left(id, socket);
      if (!this.sockets.has(id)) {
        this.run.forgetWaiters(id);
        this.run.leave(id, `disconnected: ${reason}`);
      }
    });
  }
}
