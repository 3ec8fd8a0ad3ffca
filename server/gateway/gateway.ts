// The socket.io gateway: the island protocol (namespace /island, docs/protocol.md) and the
// read-only live stream of the dashboard (namespace /dashboard).
//
// Every inbound message is checked against a compiled TypeBox schema before anything reads it,
// and every request is answered through its ack callback with a Result:
//   { ok: true, value } | { ok: false, error: { code, message } }
// A message with no ack callback, an unknown event, or too many of either gets a `protocol_error`
// emit and, past a budget, a disconnect. Nothing a client sends can throw out of a handler.

import type { IncomingMessage, Server as HttpServer } from 'node:http';
import { Server, type Namespace, type Socket } from 'socket.io';
import type { Static, TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import {
  ByeSchema,
  RenameSchema,
  type DeltaMeta,
  DeltaSchema,
  EmptySchema,
  ErrorCode,
  type HelloAnswer,
  ISLAND_EVENTS,
  HelloSchema,
  PROTOCOL_VERSION,
  UpdatesSchema,
  ValidatorSchema,
  VerdictSchema,
} from '../../core/protocol.ts';
import { AuditError } from '../../core/coord/audit.ts';
import { err, ok } from '../../core/result.ts';
import type { DashboardTick, IslandView } from '../../core/api.ts';
import type { RunPort } from './run-port.ts';
import { AuthLimiter } from '../plugins/auth-limit.ts';
import { IdentityCost } from './identity-cost.ts';
import { TokenBuckets } from './token-buckets.ts';
import { MIX_EVENTS, type MixGateway } from './mix.ts';
import type { Metrics } from '../metrics.ts';
import { type WirePacket, WireMeter } from './wire-meter.ts';

/** Gateway-level error codes (besides core/protocol's). */
export const GatewayError = {
  /** A frame above the largest legal frame for this model. */
  OVERSIZE: 'E_OVERSIZE',
  RATE_LIMIT: 'E_RATE_LIMIT',
  /** A request that needs an identity (hello first). */
  NO_HELLO: 'E_NO_HELLO',
  UNKNOWN_EVENT: 'E_UNKNOWN_EVENT',
  INTERNAL: 'E_INTERNAL',
} as const;

// ── schemas (core/protocol.ts), compiled once ───────────────────────────────────────────────

const compile = <T extends TSchema>(s: T) => TypeCompiler.Compile(s);
const checkHello = compile(HelloSchema);
const checkDelta = compile(DeltaSchema);
const checkUpdates = compile(UpdatesSchema);
const checkBye = compile(ByeSchema);
const checkRename = compile(RenameSchema);
const checkEmpty = compile(EmptySchema);
const checkValidator = compile(ValidatorSchema);
const checkVerdict = compile(VerdictSchema);

function firstError(c: { Errors(v: unknown): Iterable<{ path: string; message: string }> }, v: unknown): string {
  for (const e of c.Errors(v)) return `${e.path || '(message)'}: ${e.message}`;
  return 'invalid message';
}

// ── options ─────────────────────────────────────────────────────────────────────────────────

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

type Ack = (r: unknown) => void;

interface IslandSocketState {
  islandId: string | null;
  ip: string;
  tokens: number;
  refilledAt: number;
  violations: number;
  /** Authenticated with the validator token. */
  validator?: boolean;
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
  private readonly socketsByIsland = new Map<string, Set<Socket>>();
  private readonly islandJson = new Map<string, string>();
  private dashTimer: ReturnType<typeof setInterval>;
  private readonly dashPeriodMs: number;
  private heartbeatTimer: ReturnType<typeof setInterval>;
  private readonly log: (line: string) => void;
  /** Wrong validator tokens, per address, with back-off (auth-limit.ts). */
  readonly validatorAuth: AuthLimiter;
  /** What a new identity costs (identity-cost.ts). */
  readonly identities: IdentityCost;
  /** Counters for tests and the bench. */
  stats = { violations: 0, oversize: 0, disconnectsForViolations: 0, dashboardMessages: 0 };

  constructor(http: HttpServer, opts: GatewayOptions) {
    this.run = opts.run;
    this.opts = opts;
    this.log = opts.log ?? (() => {});
    this.helloLimiter = new TokenBuckets(opts.helloPerMinute, 60_000, HELLO_ADDRESSES);
    this.validatorAuth = new AuthLimiter('validator token', this.log);
    this.identities = new IdentityCost(opts.powBits ?? 16, opts.newIslandsPerHour ?? 60);
    // Headroom over the legal frame: a somewhat oversized frame still arrives and gets E_OVERSIZE;
    // only a grossly oversized one is cut by the transport (the island learnt the limit beforehand).
    const maxFrame = this.run.maxFrameBytes();
    this.maxHttpBufferSize = maxFrame + Math.max(1 << 20, maxFrame >> 3);
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
    this.dashboard.on('connection', (s) => this.onDashboard(s));
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
        for (const s of this.socketsByIsland.get(id) ?? []) {
          s.emit('banned', { code: ErrorCode.BANNED, message: 'this island was banned by the run admin' });
          s.disconnect(true);
        }
      },
      // closing the transport (not a disconnect, which islands take as final) makes them reconnect and resume
      reset: () => {
        for (const s of this.islands.sockets.values()) s.conn.close();
      },
    });
    this.dashPeriodMs = Math.max(500, opts.dashboardPeriodMs ?? 500);
    this.dashTimer = setInterval(
      () =>
        void this.streamDashboard().catch((e: unknown) =>
          this.log(`gateway: dashboard tick failed: ${(e as Error).message}`),
        ),
      this.dashPeriodMs,
    );
    this.dashTimer.unref();
    this.heartbeatTimer = setInterval(
      () => this.run.heartbeat([...this.socketsByIsland.keys()]),
      opts.heartbeatMs ?? 10_000,
    );
    this.heartbeatTimer.unref();
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
    clearInterval(this.dashTimer);
    clearInterval(this.heartbeatTimer);
    this.opts.mix?.close();
    // No explicit disconnect: closing the transports lets islands reconnect to the next process.
    await new Promise<void>((r) => this.io.close(() => r()));
  }

  /** Island sockets connected now (for tests). */
  get islandSockets(): number {
    return this.islands.sockets.size;
  }

  // ── islands ───────────────────────────────────────────────────────────────────────────────

  private onIsland(socket: Socket): void {
    const ip = socket.handshake.address;
    const st: IslandSocketState = { islandId: null, ip, tokens: 0, refilledAt: Date.now(), violations: 0 };
    const rate = this.opts.messagesPerSecond ?? 100;
    st.tokens = 2 * rate;
    const budget = this.opts.violationBudget ?? 32;
    const wire = this.opts.wire;
    if (wire) {
      const meter = new WireMeter(wire);
      socket.conn.on('packet', (p: WirePacket) => meter.count(p, 'up'));
      socket.conn.on('packetCreate', (p: WirePacket) => meter.count(p, 'down'));
    }

    const violation = (code: string, message: string) => {
      this.stats.violations++;
      st.violations++;
      socket.emit('protocol_error', { code, message });
      if (st.violations > budget) {
        this.stats.disconnectsForViolations++;
        socket.disconnect(true);
      }
    };
    const allow = (): boolean => {
      const now = Date.now();
      st.tokens = Math.min(2 * rate, st.tokens + ((now - st.refilledAt) * rate) / 1000);
      st.refilledAt = now;
      if (st.tokens < 1) return false;
      st.tokens -= 1;
      return true;
    };
    /** Wraps a handler: ack present, rate limit, and no throw escapes. */
    const handle = (event: string, fn: (payload: unknown, ack: Ack) => Promise<void> | void) => {
      socket.on(event, (...args: unknown[]) => {
        const ack = args[args.length - 1];
        if (typeof ack !== 'function' || args.length > 2) {
          violation(ErrorCode.BAD_REQUEST, `'${event}' must be sent with one payload and an ack callback`);
          return;
        }
        const reply = ack as Ack;
        if (!allow()) {
          reply(err(GatewayError.RATE_LIMIT, 'too many messages: slow down'));
          return;
        }
        const payload = args.length === 2 ? args[0] : undefined;
        Promise.resolve()
          .then(() => fn(payload, reply))
          .catch((e: unknown) => {
            this.log(`gateway: '${event}' handler failed: ${(e as Error)?.stack ?? String(e)}`);
            try {
              reply(err(GatewayError.INTERNAL, 'internal error'));
            } catch {
              /* socket gone */
            }
          });
      });
    };
    const known = new Set<string>([...ISLAND_EVENTS, ...(this.opts.mix ? MIX_EVENTS : [])]);
    socket.onAny((event: string) => {
      if (!known.has(event)) violation(GatewayError.UNKNOWN_EVENT, `unknown event '${String(event).slice(0, 64)}'`);
    });

    // a new identity's proof of work: the challenge to solve (before hello; docs/protocol.md)
    handle('challenge', (payload, ack) => {
      if (!checkEmpty.Check(payload)) return ack(err(ErrorCode.BAD_REQUEST, 'challenge takes no payload'));
      ack(ok(this.identities.challenge()));
    });

    handle('hello', async (payload, ack) => {
      if (st.islandId) return ack(err(ErrorCode.BAD_REQUEST, 'this connection already said hello'));
      if (!this.helloLimiter.take(ip, Date.now()))
        return ack(err(GatewayError.RATE_LIMIT, 'too many hellos from this address: retry later'));
      if (!checkHello.Check(payload))
        return ack(err(ErrorCode.BAD_REQUEST, `hello: ${firstError(checkHello, payload)}`));
      const h = payload as Static<typeof HelloSchema>;
      if (h.protocolVersion !== PROTOCOL_VERSION) {
        return ack(
          err(
            ErrorCode.PROTOCOL_VERSION,
            `this server speaks protocol ${PROTOCOL_VERSION}, the island ${h.protocolVersion}: ` +
              'reload the page / update atoll',
          ),
        );
      }
      if (this.socketsByIsland.size >= this.opts.maxIslands)
        return ack(err(ErrorCode.FULL, 'the server holds its maximum number of islands: retry later'));
      // a new identity costs work (and the address's budget); a resume with its token costs nothing
      const resuming = h.resumeIslandId !== undefined && h.resumeToken !== undefined;
      let paid = false;
      if (!resuming || h.pow) {
        const p = this.identities.pay(ip, h.pow);
        if (!p.ok && !resuming) return ack(err(p.error.code, p.error.message));
        paid = p.ok;
      }
      const r = await this.run.hello({
        caps: h.caps,
        protocolVersion: h.protocolVersion,
        resumeIslandId: h.resumeIslandId,
        resumeToken: h.resumeToken,
        resumeOnly: !paid,
      });
      if (!r.ok) return ack(err(r.error.code, r.error.message));
      const id = r.value.islandId;
      if (!socket.connected) {
        // gone while joining: it must not count as online (nor hold a sync round)
        if (!this.socketsByIsland.has(id)) this.run.leave(id, 'disconnected during hello');
        return;
      }
      // bind first, so the replaced connection's disconnect does not read as the island leaving
      st.islandId = id;
      this.bind(id, socket);
      for (const old of [...(this.socketsByIsland.get(id) ?? [])]) {
        if (old === socket) continue;
        old.emit('protocol_error', { code: 'E_REPLACED', message: 'a newer connection took over this island' });
        old.disconnect(true);
      }
      if (h.push !== false) socket.join('islands');
      const d = this.run.durable();
      ack(
        ok<HelloAnswer>({
          islandId: id,
          resumeToken: r.value.resumeToken,
          assignment: r.value.assignment,
          version: d.version,
          hash: d.hash,
          protocolVersion: PROTOCOL_VERSION,
          maxFrameBytes: this.run.maxFrameBytes(),
          maxHttpBufferSize: this.maxHttpBufferSize,
          serverTime: Date.now(),
          resumed: r.value.resumed,
          mixGroup: this.opts.mix?.k ?? 0,
        }),
      );
    });

    handle('delta', async (payload, ack) => {
      const bytes =
        payload && typeof payload === 'object' && (payload as { frame?: unknown }).frame instanceof Uint8Array
          ? (payload as { frame: Uint8Array }).frame.length
          : 0;
      if (!st.islandId) return ack(err(GatewayError.NO_HELLO, 'say hello first'));
      if (!checkDelta.Check(payload)) {
        this.run.noteRejected(ErrorCode.BAD_REQUEST, bytes);
        return ack(err(ErrorCode.BAD_REQUEST, `delta: ${firstError(checkDelta, payload)}`));
      }
      const { meta: raw, frame } = payload as Static<typeof DeltaSchema>;
      const maxFrame = this.run.maxFrameBytes();
      if (frame.length > maxFrame) {
        this.stats.oversize++;
        this.run.noteRejected(GatewayError.OVERSIZE, bytes);
        return ack(
          err(
            GatewayError.OVERSIZE,
            `frame of ${frame.length} bytes exceeds the largest legal frame (${maxFrame} bytes)`,
          ),
        );
      }
      const meta: DeltaMeta = {
        ...raw,
        lossFirst: raw.lossFirst ?? NaN,
        lossLast: raw.lossLast ?? NaN,
        lossMean: raw.lossMean ?? NaN,
      };
      if (meta.islandId !== st.islandId) {
        this.run.noteRejected(ErrorCode.BAD_REQUEST, bytes);
        return ack(err(ErrorCode.BAD_REQUEST, `delta for island ${meta.islandId} on the connection of ${st.islandId}`));
      }
      const a = await this.run.submit(meta, frame);
      ack(ok(a));
    });

    handle('nextAssignment', async (payload, ack) => {
      if (!st.islandId) return ack(err(GatewayError.NO_HELLO, 'say hello first'));
      if (!checkEmpty.Check(payload)) return ack(err(ErrorCode.BAD_REQUEST, 'nextAssignment takes no payload'));
      const r = await this.run.nextAssignment(st.islandId);
      if (socket.connected) ack(r);
    });

    handle('updates', async (payload, ack) => {
      if (!st.islandId) return ack(err(GatewayError.NO_HELLO, 'say hello first'));
      if (!checkUpdates.Check(payload))
        return ack(err(ErrorCode.BAD_REQUEST, `updates: ${firstError(checkUpdates, payload)}`));
      const { fromVersion } = payload as Static<typeof UpdatesSchema>;
      this.opts.mix?.caughtUp(st.islandId, fromVersion);
      const r = await this.run.updatesSince(fromVersion);
      if (!r.ok) return ack(err(r.error.code, r.error.message));
      let bytes = 0;
      for (const u of r.value) bytes += u.frame.length + 256;
      this.run.noteBytesOut(bytes, 'catchup');
      ack(ok(r.value));
    });

    handle('fetchModel', async (payload, ack) => {
      if (!st.islandId) return ack(err(GatewayError.NO_HELLO, 'say hello first'));
      if (!checkEmpty.Check(payload)) return ack(err(ErrorCode.BAD_REQUEST, 'fetchModel takes no payload'));
      const d = await this.run.durableParams();
      const bytes = new Uint8Array(d.params.buffer, d.params.byteOffset, d.params.byteLength);
      this.run.noteBytesOut(bytes.length, 'model');
      ack(ok({ version: d.version, hash: d.hash, params: bytes }));
    });

    handle('rename', async (payload, ack) => {
      if (!st.islandId) return ack(err(GatewayError.NO_HELLO, 'say hello first'));
      if (!checkRename.Check(payload))
        return ack(err(ErrorCode.BAD_REQUEST, `rename: ${firstError(checkRename, payload)}`));
      const r = await this.run.rename(st.islandId, (payload as Static<typeof RenameSchema>).name);
      ack(r.ok ? ok({}) : err(r.error.code, r.error.message));
    });

    // verified work: a validator authenticates with the token, then takes jobs and sends verdicts
    const notValidator = () =>
      err(
        AuditError.NOT_VALIDATOR,
        "this connection is not a validator (send `validator` with the server's token first)",
      );
    handle('validator', (payload, ack) => {
      const wait = this.validatorAuth.retryAfter(ip);
      if (wait > 0)
        return ack(
          err(
            GatewayError.RATE_LIMIT,
            `too many wrong validator tokens from this address: retry in ${Math.ceil(wait / 1000)} s`,
          ),
        );
      if (!checkValidator.Check(payload))
        return ack(err(ErrorCode.BAD_REQUEST, `validator: ${firstError(checkValidator, payload)}`));
      const audits = this.run.audits;
      if (!audits) return ack(err(AuditError.NOT_VALIDATOR, 'this server runs no audits (no validator token)'));
      if (!audits.auth((payload as Static<typeof ValidatorSchema>).token)) {
        this.validatorAuth.failed(ip);
        return ack(err(AuditError.NOT_VALIDATOR, 'wrong validator token'));
      }
      this.validatorAuth.succeeded(ip);
      st.validator = true;
      ack(ok({}));
    });
    handle('auditJob', async (payload, ack) => {
      if (!st.validator || !this.run.audits) return ack(notValidator());
      if (!checkEmpty.Check(payload)) return ack(err(ErrorCode.BAD_REQUEST, 'auditJob takes no payload'));
      ack(ok(await this.run.audits.take()));
    });
    handle('verdict', async (payload, ack) => {
      if (!st.validator || !this.run.audits) return ack(notValidator());
      if (!checkVerdict.Check(payload))
        return ack(err(ErrorCode.BAD_REQUEST, `verdict: ${firstError(checkVerdict, payload)}`));
      const v = payload as Static<typeof VerdictSchema>;
      ack(await this.run.audits.verdict(v.jobId, v.cosine, v.normRatio));
    });

    this.opts.mix?.attach(socket, () => st.islandId, handle);

    handle('bye', async (payload, ack) => {
      if (!checkBye.Check(payload ?? {}))
        return ack(err(ErrorCode.BAD_REQUEST, `bye: ${firstError(checkBye, payload)}`));
      const reason = (payload as Static<typeof ByeSchema> | undefined)?.reason ?? 'bye';
      if (st.islandId) {
        const id = st.islandId;
        this.unbind(id, socket);
        this.opts.mix?.left(id, socket);
        st.islandId = null;
        if (!this.socketsByIsland.has(id)) this.run.leave(id, reason.slice(0, 256));
      }
      ack(ok({}));
      setTimeout(() => socket.disconnect(true), 50);
    });

    socket.on('disconnect', (reason) => {
      const id = st.islandId;
      if (!id) return;
      st.islandId = null;
      this.unbind(id, socket);
      this.opts.mix?.left(id, socket);
      if (!this.socketsByIsland.has(id)) {
        this.run.forgetWaiters(id);
        this.run.leave(id, `disconnected: ${reason}`);
      }
    });
  }

  private bind(id: string, socket: Socket): void {
    let set = this.socketsByIsland.get(id);
    if (!set) {
      set = new Set();
      this.socketsByIsland.set(id, set);
    }
    set.add(socket);
    this.run.setConnected(id, set.size);
  }

  private unbind(id: string, socket: Socket): void {
    const set = this.socketsByIsland.get(id);
    if (!set) return;
    set.delete(socket);
    if (set.size === 0) this.socketsByIsland.delete(id);
    this.run.setConnected(id, set.size);
  }

  // ── dashboard ─────────────────────────────────────────────────────────────────────────────

  private onDashboard(socket: Socket): void {
    // Read-only: nothing a dashboard sends is handled. First message: the status, so the page is
    // live before the next tick; it loads islands and history over REST.
    socket.onAny(() => {
      /* ignored: the stream is read-only */
    });
    this.run.status().then(
      (status) => {
        const tick: DashboardTick = { status, periodMs: this.dashPeriodMs };
        socket.emit('tick', tick);
      },
      (e: unknown) => this.log(`gateway: dashboard status failed: ${(e as Error).message}`),
    );
  }

  /** One message per period at most: status, changed islands, new or changed history points. */
  private async streamDashboard(): Promise<void> {
    const feed = await this.run.dashboardFeed(this.dashboard.sockets.size > 0);
    if (!feed || this.dashboard.sockets.size === 0) {
      this.islandJson.clear();
      return;
    }
    const changed: IslandView[] = [];
    for (const isl of feed.islands) {
      const j = JSON.stringify(isl);
      if (this.islandJson.get(isl.id) === j) continue;
      this.islandJson.set(isl.id, j);
      changed.push(isl);
    }
    const tick: DashboardTick = {
      status: feed.status,
      periodMs: this.dashPeriodMs,
      islands: { changed, removed: [] },
      history: feed.history,
    };
    this.dashboard.emit('tick', tick);
    this.stats.dashboardMessages++;
  }
}
