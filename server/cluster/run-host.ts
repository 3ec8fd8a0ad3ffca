// The aggregator role: the single writer of a run. It waits as a standby for the Redis lease, then
// opens the real Run (coordinator, run folder, eval) and serves the gateways:
//
//   deltas    read from the stream in the consumer group (fenced), each submitted to the Run as the
//             embedded gateway would; settled (fenced) with the Run's ack, so a gateway acks an
//             island only once the version holding its delta is durable in the run folder. After a
//             takeover the predecessor's unsettled deltas (the pending list) go first: the Run,
//             restored from the run folder, answers a resend of an applied one from its log;
//   requests  the rpc list (rpc.ts) against localPort(run); REST calls by Fastify's inject;
//   updates   published (fenced) to every gateway; bans and "I am active" on the event channel.
// Losing the lease (a renewal found it taken, or any fenced write refused) calls `onFenced`: the
// process must stop writing at once (the CLI exits), never flush.

import { createHash } from 'node:crypto';
import { serialize } from 'node:v8';
import { AuditError } from '../../core/coord/audit.ts';
import { err } from '../../core/result.ts';
import type { Redis } from 'ioredis';
import type { DeltaMeta } from '../../core/protocol.ts';
import type { HistoryPoint } from '../../core/api.ts';
import type { RunApp } from '../app.ts';
import { bytesOutKind } from '../metrics.ts';
import { type RunPort, localPort } from '../gateway/run-port.ts';
import { type RunKeys, runKeys, scriptErrorCode } from './keys.ts';
import { AggregatorLease } from './lease.ts';
import type { Forwarded, ForwardedReply, RunDescription, RunEvent } from './remote-port.ts';
import { RpcServer } from './rpc.ts';
import { type Settled, type StreamDelta, DeltaConsumer } from './stream.ts';

export interface RunHostOptions {
  redis: Redis;
  /** The run's name: its Redis keys. */
  run: string;
  owner: string;
  ttlMs: number;
  /** Opens the run (once the lease is ours). */
  open: () => Promise<RunApp>;
  /** A gateway unheard of this long is gone: its islands no longer count as connected. */
  gatewayTimeoutMs?: number;
  log?: (line: string) => void;
  /** The lease is lost: stop writing at once. */
  onFenced: (why: string) => void;
  /** The validators' token, when the run holds audits (gateways get its hash). */
  validatorToken?: string;
}

/**
 * Headers of an API answer that travel back through the gateway: these, and every x-atoll-* (GET /api/model's version
 * and hash).
 */
const FORWARDED_HEADERS = [
  'content-type',
  'content-disposition',
  'cache-control',
  'etag',
  'content-range',
  'accept-ranges',
  'retry-after',
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
];
const forwarded = (h: string) => FORWARDED_HEADERS.includes(h) || h.startsWith('x-atoll-');

export class RunHost {
  token = 0;
  core: RunApp | null = null;
  private readonly keys: RunKeys;
  private readonly lease: AggregatorLease;
  private readonly consumer: DeltaConsumer;
  private port: RunPort | null = null;
  private rpc: RpcServer | null = null;
  private stopped = false;
  private consuming: Promise<void> | null = null;
  private sweep: NodeJS.Timeout | null = null;
  /** Per gateway: when last heard of, its sockets per island, its undelivered history points. */
  private readonly gateways = new Map<
    string,
    { seen: number; sockets: Map<string, number>; history: Map<number, HistoryPoint> }
  >();
  private readonly log: (line: string) => void;
  /** Deltas answered by the Run, settled together at the end of the tick. */
  private settling: Settled[] = [];

  constructor(private readonly o: RunHostOptions) {
    this.keys = runKeys(o.run);
    this.log = o.log ?? (() => {});
    this.lease = new AggregatorLease(o.redis, this.keys, {
      owner: o.owner,
      ttlMs: o.ttlMs,
      onLost: () => this.fenced('the lease lapsed or was taken'),
    });
    this.consumer = new DeltaConsumer(o.redis, this.keys);
  }

  /** Waits for the lease (a standby until then), opens the run and serves; false if stopped first. */
  async start(): Promise<boolean> {
    const token = await this.lease.acquire();
    if (token === 0 || this.stopped) return false;
    this.token = token;
    const core = await this.o.open();
    this.core = core;
    // paused past the lease by our own clock: not one more byte in the run folder (Redis fences the rest)
    core.run.store.fence(() => {
      if (this.lease.held()) return null;
      this.fenced('the lease lapsed before a run folder commit');
      return 'E_FENCED: this aggregator no longer holds the lease';
    });
    const port = localPort(core.run);
    this.port = port;
    await this.consumer.ensureGroup();
    port.listen({
      update: (u) => void this.consumer.publishUpdate(token, serialize(u)).catch((e: unknown) => this.failed(e)),
      ban: (islandId) => void this.event({ kind: 'ban', islandId }),
      reset: () => {},
    });
    this.rpc = new RpcServer(this.o.redis, this.keys, (m, a, gw) => this.handle(m, a, gw));
    void this.rpc.serve();
    this.consuming = this.consume();
    const every = this.o.gatewayTimeoutMs ?? 30_000;
    this.sweep = setInterval(() => this.forgetGateways(every), Math.max(1000, every / 3));
    this.sweep.unref();
    await this.event({ kind: 'active', token });
    return true;
  }

  private event(ev: RunEvent): Promise<unknown> {
    return this.o.redis.publish(this.keys.eventChannel, serialize(ev)).catch(() => 0);
  }

  private failed(e: unknown): void {
    if (scriptErrorCode(e) === 'E_FENCED') this.fenced((e as Error).message);
    else this.log(`aggregator: ${(e as Error)?.message ?? String(e)}`);
  }

  private fenced(why: string): void {
    if (this.stopped) return;
    this.stopped = true;
    this.rpc?.stop();
    this.o.onFenced(why);
  }

  // ── deltas ─────────────────────────────────

  private async consume(): Promise<void> {
    try {
      for (const d of await this.consumer.readPending(this.token)) this.take(d);
      while (!this.stopped) for (const d of await this.consumer.readNew(this.token, 256, 500)) this.take(d);
    } catch (e) {
      if (!this.stopped) this.failed(e);
    }
  }

  /** Submits one delta to the Run; settles it with the Run's ack (durable, or rejected). */
  private take(d: StreamDelta): void {
    let meta: DeltaMeta;
    try {
      meta = JSON.parse(d.meta) as DeltaMeta;
      // JSON has no NaN: the gateway's NaN losses arrive as null
      for (const k of ['lossFirst', 'lossLast', 'lossMean'] as const) meta[k] ??= NaN;
    } catch {
      this.settle({ id: d.id, island: d.island, seq: d.seq, state: 'r:E_BAD_REQUEST:unreadable meta' });
      return;
    }
    void this.port!.submit({ ...meta, islandId: d.island, seq: d.seq }, d.frame).then(
      (ack) => {
        this.settle({
          id: d.id,
          island: d.island,
          seq: d.seq,
          state:
            ack.status === 'applied'
              ? `v:${ack.version}`
              : `r:${ack.error?.code ?? 'E_REJECTED'}:${(ack.error?.message ?? '').slice(0, 200)}`,
        });
      },
      (e: unknown) => this.failed(e),
    );
  }

  /** One fenced settle for every delta answered in this tick (a durable version answers many at once). */
  private settle(s: Settled): void {
    this.settling.push(s);
    if (this.settling.length > 1) return;
    setImmediate(() => {
      const batch = this.settling;
      this.settling = [];
      this.consumer.settle(this.token, batch).catch((e: unknown) => this.failed(e));
    });
  }

  // ── requests ─────────────────────────────────

  private gateway(gw: string) {
    let g = this.gateways.get(gw);
    if (!g) {
      g = { seen: 0, sockets: new Map(), history: new Map() };
      this.gateways.set(gw, g);
    }
    g.seen = Date.now();
    return g;
  }

  /** An island's sockets over every gateway. */
  private connectedAnywhere(islandId: string): number {
    let n = 0;
    for (const g of this.gateways.values()) n += g.sockets.get(islandId) ?? 0;
    return n;
  }

  private forgetGateways(olderThanMs: number): void {
    const now = Date.now();
    for (const [gw, g] of this.gateways) {
      if (now - g.seen < olderThanMs) continue;
      this.gateways.delete(gw);
      for (const id of g.sockets.keys()) this.port?.setConnected(id, this.connectedAnywhere(id));
    }
  }

  private async handle(method: string, a: unknown[], gw: string): Promise<unknown> {
    const port = this.port!;
    const g = this.gateway(gw);
    switch (method) {
      case 'describe': {
        const run = this.core!.run;
        const validatorHash = this.o.validatorToken
          ? createHash('sha256').update(this.o.validatorToken).digest('hex')
          : null;
        return {
          token: this.token,
          maxFrameBytes: run.maxFrameBytes,
          version: run.version,
          hash: run.hash,
          limits: run.config.limits,
          allowOrigins: run.config.allowOrigins,
          dataUrl: run.config.dataUrl,
          validatorHash,
        } satisfies RunDescription;
      }
      case 'hello':
        return port.hello(a[0] as Parameters<RunPort['hello']>[0]);
      case 'nextAssignment':
        return port.nextAssignment(String(a[0]));
      case 'updatesSince':
        return port.updatesSince(Number(a[0]));
      case 'rename':
        return port.rename(String(a[0]), String(a[1]));
      case 'durableParams':
        return port.durableParams();
      case 'status':
        return port.status();
      // a gateway that lost an island late (it noticed after the island had moved to another gateway)
      // must not take it out of the run, nor drop the waits it now has there
      case 'leave':
        return this.connectedAnywhere(String(a[0])) > 0 ? undefined : port.leave(String(a[0]), String(a[1]));
      case 'forgetWaiters':
        return this.connectedAnywhere(String(a[0])) > 0 ? undefined : port.forgetWaiters(String(a[0]));
      case 'noteRejected':
        return port.noteRejected(String(a[0]), Number(a[1]));
      case 'noteBytesOut':
        return port.noteBytesOut(Number(a[0]), bytesOutKind(a[1]));
      case 'heartbeat':
        return port.heartbeat(a[0] as string[]);
      case 'setConnected': {
        const [id, n] = [String(a[0]), Number(a[1])];
        if (n > 0) g.sockets.set(id, n);
        else g.sockets.delete(id);
        return port.setConnected(id, this.connectedAnywhere(id));
      }
      case 'dashboardFeed': {
        // one taker of the Run's changed points; each gateway gets them all, once
        const feed = await port.dashboardFeed(Boolean(a[0]));
        const fresh = feed?.history ?? [];
        for (const other of this.gateways.values()) for (const p of fresh) other.history.set(p.version, p);
        const history = [...g.history.values()].sort((x, y) => x.version - y.version);
        g.history.clear();
        return feed ? { ...feed, history } : null;
      }
      case 'forward':
        return this.forward(a[0] as Forwarded);
      // the gateway checked the validator's token against the hash `describe` gave it
      case 'auditTake':
        return port.audits ? port.audits.take() : null;
      case 'auditVerdict':
        return port.audits
          ? port.audits.verdict(Number(a[0]), a[1] as number | null, a[2] as number | null)
          : err(AuditError.NOT_VALIDATOR, 'this run holds no audits');
      default:
        throw new Error(`E_BAD_REQUEST: no method ${method}`);
    }
  }

  /** A REST request through the run's own API (rate limit, admin token and all). */
  private async forward(req: Forwarded): Promise<ForwardedReply> {
    const res = await this.core!.app.inject({
      method: req.method as 'GET',
      url: req.url,
      headers: req.headers,
      payload: req.body,
      remoteAddress: req.remoteAddress,
    });
    const headers: Record<string, string> = {};
    for (const [h, v] of Object.entries(res.headers)) if (v !== undefined && forwarded(h)) headers[h] = String(v);
    // a new codec changes the largest legal frame every gateway checks
    if (req.url.startsWith('/api/admin/config') && res.statusCode === 200)
      await this.event({ kind: 'limits', maxFrameBytes: this.core!.run.maxFrameBytes });
    return { statusCode: res.statusCode, headers, body: res.rawPayload };
  }

  /** Stops serving, flushes the run folder, then hands the lease over. */
  async stop(): Promise<void> {
    const wasActive = !this.stopped && this.token > 0;
    this.stopped = true;
    if (this.sweep) clearInterval(this.sweep);
    this.rpc?.stop();
    this.consumer.close();
    await this.consuming;
    if (wasActive) await this.core?.close();
    await this.lease.release();
  }
}
