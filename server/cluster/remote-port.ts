// The gateway role's RunPort: the run is the active aggregator's, reached over Redis.
//
//   deltas        the delta stream (gateway-link.ts): appended once per island+seq, acked when the
//                 aggregator settles it (durable in version N, or rejected);
//   updates       the aggregator's fenced update channel, relayed to this gateway's sockets;
//   the rest      requests on the rpc list (rpc.ts), answered on this gateway's reply channel;
//   events        a new active aggregator (open calls fail: the island retries), bans.

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { deserialize } from 'node:v8';
import type { Redis } from 'ioredis';
import type { RunStatus } from '../../core/api.ts';
import { type AckMsg, type Assignment, type DeltaMeta, ErrorCode, type UpdateMsg } from '../../core/protocol.ts';
import { type Result, err } from '../../core/result.ts';
import type { AuditPort, DashboardFeed, HelloGrant, HelloRequest, RunListener, RunPort } from '../gateway/run-port.ts';
import type { AuditJobWire, VerdictAnswer } from '../run/audit.ts';
import type { BytesOutKind } from '../metrics.ts';
import type { RunConfig } from '../run/config.ts';
import { GatewayLink } from './gateway-link.ts';
import { type RunKeys, runKeys } from './keys.ts';
import { RpcClient } from './rpc.ts';

/** What the aggregator tells a gateway at start (`describe`). */
export interface RunDescription {
  /** The fencing token of the aggregator that answered. */
  token: number;
  maxFrameBytes: number;
  version: number;
  hash: string;
  limits: RunConfig['limits'];
  allowOrigins: string[];
  /** A shard run's --data-url (the pages' CSP names its origin). */
  dataUrl?: string;
  /** sha256 of the validators' token (hex), or null: the run holds no audits. */
  validatorHash: string | null;
}

/** Events the aggregator publishes on the event channel. */
export type RunEvent =
  | { kind: 'active'; token: number }
  | { kind: 'ban'; islandId: string }
  | { kind: 'limits'; maxFrameBytes: number };

/** A REST request forwarded to the aggregator's API, and its answer. */
export interface Forwarded {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: Buffer;
  remoteAddress: string;
}
export interface ForwardedReply {
  statusCode: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** Calls that wait on the run (a sync round, a durable version) have no timeout; the rest this one. */
const CALL_TIMEOUT_MS = 30_000;

export class RemotePort implements RunPort {
  readonly keys: RunKeys;
  readonly rpc: RpcClient;
  private readonly link: GatewayLink;
  private readonly sub: Redis;
  private listener: RunListener | null = null;
  private desc: RunDescription | null = null;
  private dur = { version: -1, hash: '' };
  private aggregatorToken = 0;

  constructor(
    readonly redis: Redis,
    run: string,
    private readonly log: (line: string) => void = () => {},
  ) {
    this.keys = runKeys(run);
    this.rpc = new RpcClient(redis, this.keys, `gw-${process.pid}-${randomBytes(4).toString('hex')}`);
    this.link = new GatewayLink(redis, run, { recheckMs: 1000 });
    this.sub = redis.duplicate();
    this.sub.on('error', () => {});
    this.sub.on('messageBuffer', (ch: Buffer, payload: Buffer) => {
      const c = ch.toString();
      if (c === this.rpc.channel) this.rpc.onReply(payload);
      else if (c === this.keys.eventChannel) this.onEvent(payload);
    });
    this.link.onUpdate((payload) => {
      let u: UpdateMsg;
      try {
        u = deserialize(payload) as UpdateMsg;
      } catch {
        return;
      }
      if (u.version > this.dur.version) this.dur = { version: u.version, hash: u.hash };
      this.listener?.update(u);
    });
  }

  /** Subscribes, then waits for an active aggregator to describe the run. */
  async start(timeoutMs = 120_000): Promise<RunDescription> {
    await this.link.start();
    await this.sub.subscribe(this.rpc.channel, this.keys.eventChannel);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        const d = await this.rpc.call<RunDescription>('describe', [], 2000);
        this.desc = d;
        this.aggregatorToken ||= d.token;
        if (d.version > this.dur.version) this.dur = { version: d.version, hash: d.hash };
        return d;
      } catch (e) {
        if (Date.now() > deadline)
          throw new Error(
            `E_NO_AGGREGATOR: no aggregator answered on ${this.keys.rpc} within ${timeoutMs} ms ` +
              `(${(e as Error).message})`,
          );
      }
    }
  }

  private onEvent(payload: Buffer): void {
    let ev: RunEvent;
    try {
      ev = deserialize(payload) as RunEvent;
    } catch {
      return;
    }
    if (ev.kind === 'ban') this.listener?.ban(ev.islandId);
    else if (ev.kind === 'limits' && this.desc) this.desc.maxFrameBytes = ev.maxFrameBytes;
    else if (ev.kind === 'active' && ev.token !== this.aggregatorToken) {
      const first = this.aggregatorToken === 0;
      this.aggregatorToken = ev.token;
      if (first) return;
      this.log(`gateway: aggregator ${ev.token} took over`);
      // the old one's answers died with it; the new one reopened the run at its last durable version
      this.rpc.failOpen('the aggregator changed');
      this.rpc.call<RunDescription>('describe', [], CALL_TIMEOUT_MS).then(
        (d) => {
          this.desc = d;
          this.dur = { version: d.version, hash: d.hash };
          this.listener?.reset();
        },
        () => this.listener?.reset(),
      );
    }
  }

  /** A call whose answer is a Result: a transport failure is E_TRANSPORT (the island retries). */
  private async result<T>(method: string, args: unknown[], timeoutMs = CALL_TIMEOUT_MS, tag = ''): Promise<Result<T>> {
    try {
      return await this.rpc.call<Result<T>>(method, args, timeoutMs, tag);
    } catch (e) {
      return err(ErrorCode.TRANSPORT, (e as Error).message);
    }
  }

  /** Verified work through the aggregator's audits; the token is checked here against its hash. */
  get audits(): AuditPort | undefined {
    const hash = this.desc?.validatorHash;
    if (!hash) return undefined;
    return {
      auth: (token) => timingSafeEqual(createHash('sha256').update(token).digest(), Buffer.from(hash, 'hex')),
      take: () => this.rpc.call<AuditJobWire | null>('auditTake', [], CALL_TIMEOUT_MS),
      verdict: (jobId, cosine, normRatio) => this.result<VerdictAnswer>('auditVerdict', [jobId, cosine, normRatio]),
    };
  }

  maxFrameBytes(): number {
    return this.desc?.maxFrameBytes ?? 0;
  }
  durable(): { version: number; hash: string } {
    return this.dur;
  }
  listen(l: RunListener): void {
    this.listener = l;
  }
  hello(req: HelloRequest): Promise<Result<HelloGrant>> {
    return this.result('hello', [req], 0);
  }
  /** Waits for the round; tagged with the island, so that its socket closing ends the wait here too. */
  nextAssignment(islandId: string): Promise<Result<Assignment>> {
    return this.result('nextAssignment', [islandId], 0, islandId);
  }
  updatesSince(fromVersion: number): Promise<Result<UpdateMsg[]>> {
    return this.result('updatesSince', [fromVersion]);
  }
  rename(islandId: string, name: string): Promise<Result<void>> {
    return this.result('rename', [islandId, name]);
  }
  durableParams(): Promise<{ version: number; hash: string; params: Float32Array }> {
    return this.rpc.call('durableParams', [], CALL_TIMEOUT_MS);
  }
  status(): Promise<RunStatus> {
    return this.rpc.call('status', [], CALL_TIMEOUT_MS);
  }
  dashboardFeed(watching: boolean): Promise<DashboardFeed | null> {
    return this.rpc.call('dashboardFeed', [watching], CALL_TIMEOUT_MS);
  }
  forward(req: Forwarded): Promise<ForwardedReply> {
    return this.rpc.call('forward', [req], CALL_TIMEOUT_MS);
  }
  leave(islandId: string, reason: string): void {
    this.rpc.cast('leave', [islandId, reason]);
  }
  heartbeat(islandIds: string[]): void {
    this.rpc.cast('heartbeat', [islandIds]);
  }
  setConnected(islandId: string, sockets: number): void {
    this.rpc.cast('setConnected', [islandId, sockets]);
  }
  forgetWaiters(islandId: string): void {
    // the Run drops the island's waits unanswered: drop ours too, or they would stay open for good
    this.rpc.cast('forgetWaiters', [islandId]);
    this.rpc.failTagged(islandId, 'the island left');
  }
  noteRejected(code: string, bytes: number): void {
    this.rpc.cast('noteRejected', [code, bytes]);
  }
  noteBytesOut(bytes: number, kind: BytesOutKind): void {
    this.rpc.cast('noteBytesOut', [bytes, kind]);
  }

  /** Appends the delta to the stream; the ack comes when the aggregator settles it. */
  async submit(meta: DeltaMeta, frame: Uint8Array): Promise<AckMsg> {
    const state = await this.link.submit(meta.islandId, meta.seq, JSON.stringify(meta), frame);
    const base = { islandId: meta.islandId, seq: meta.seq, roundId: meta.roundId };
    if (state.startsWith('v:')) return { ...base, status: 'applied', version: Number(state.slice(2)) };
    const [code, message] = state.startsWith('r:')
      ? [state.slice(2).split(':')[0], state.slice(2).split(':').slice(1).join(':') || 'rejected by the aggregator']
      : [ErrorCode.DUPLICATE, `the island already sent a later delta (seq ${state.slice(6)})`];
    return { ...base, status: 'rejected', version: this.dur.version, error: { code, message } };
  }

  close(): void {
    this.rpc.failOpen('the gateway is closing');
    this.link.close();
    this.sub.disconnect();
  }
}
