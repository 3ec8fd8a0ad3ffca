// Requests from gateways to the active aggregator over Redis, with correlation ids.
//
//   gateway     LPUSH rpc  v8(id, gateway, method, args, expiry)   (id 0: no answer wanted)
//   aggregator  BRPOP rpc → runs the method → PUBLISH reply-ch:<gateway> v8(id, ok, value | error)
//
// A list, not a channel: requests queued while no aggregator is active (a failover) wait for the
// next one, which drops those past their expiry. v8 serialization keeps typed arrays (θ, frames)
// binary. One answer per request; a gateway fails its calls still open when a new aggregator
// announces itself (their answers died with the old one).

import { serialize, deserialize } from 'node:v8';
import type { Redis } from 'ioredis';
import type { RunKeys } from './keys.ts';

interface Request {
  id: number;
  gw: string;
  m: string;
  a: unknown[];
  exp: number;
}
interface Reply {
  id: number;
  ok: boolean;
  v?: unknown;
  e?: string;
}

export class RpcClient {
  private seq = 0;
  private readonly open = new Map<
    number,
    { resolve: (v: unknown) => void; reject: (e: Error) => void; timer: NodeJS.Timeout | null; tag: string }
  >();

  constructor(
    private readonly redis: Redis,
    private readonly keys: RunKeys,
    readonly gateway: string,
  ) {}

  /** The channel this gateway's answers come on. */
  get channel(): string {
    return this.keys.replyChannel + this.gateway;
  }

  /** Calls `method`; rejects after `timeoutMs` (0: never, until `failOpen` or `failTagged(tag)`). */
  call<T>(method: string, args: unknown[], timeoutMs: number, tag = ''): Promise<T> {
    const id = ++this.seq;
    return new Promise<T>((resolve, reject) => {
      const timer =
        timeoutMs > 0
          ? setTimeout(
              () => this.settle(id, { id, ok: false, e: `E_TRANSPORT: no answer to ${method} within ${timeoutMs} ms` }),
              timeoutMs,
            )
          : null;
      timer?.unref();
      this.open.set(id, { resolve: resolve as (v: unknown) => void, reject, timer, tag });
      this.push({ id, gw: this.gateway, m: method, a: args, exp: Date.now() + (timeoutMs || 3_600_000) }).catch(
        (e: unknown) => this.settle(id, { id, ok: false, e: `E_TRANSPORT: ${(e as Error).message}` }),
      );
    });
  }

  /** Sends `method` without waiting for an answer. */
  cast(method: string, args: unknown[]): void {
    this.push({ id: 0, gw: this.gateway, m: method, a: args, exp: Date.now() + 60_000 }).catch(() => {
      /* Redis down: the next heartbeat repeats */
    });
  }

  /** An answer from this gateway's reply channel. */
  onReply(payload: Buffer): void {
    let r: Reply;
    try {
      r = deserialize(payload) as Reply;
    } catch {
      return;
    }
    this.settle(r.id, r);
  }

  /** Fails every open call (the aggregator that held them is gone). */
  failOpen(why: string): void {
    for (const id of [...this.open.keys()]) this.settle(id, { id, ok: false, e: `E_TRANSPORT: ${why}` });
  }

  /** Fails the open calls made with `tag` (whose answer nobody waits for any more). */
  failTagged(tag: string, why: string): void {
    for (const [id, w] of this.open) if (w.tag === tag) this.settle(id, { id, ok: false, e: `E_TRANSPORT: ${why}` });
  }

  private settle(id: number, r: Reply): void {
    const w = this.open.get(id);
    if (!w) return;
    this.open.delete(id);
    if (w.timer) clearTimeout(w.timer);
    if (r.ok) w.resolve(r.v);
    else
      w.reject(
        Object.assign(new Error(r.e ?? 'E_TRANSPORT'), { code: /^(E_[A-Z_]+)/.exec(r.e ?? '')?.[1] ?? 'E_TRANSPORT' }),
      );
  }

  private async push(req: Request): Promise<void> {
    await this.redis.lpush(this.keys.rpc, serialize(req));
  }
}

/** Requests taken per round trip at most. */
const BATCH = 256;

export type RpcHandler = (method: string, args: unknown[], gateway: string) => unknown;

/** The aggregator's side: pops requests one at a time and answers each when its handler settles. */
export class RpcServer {
  private readonly blocker: Redis;
  private stopped = false;

  constructor(
    private readonly redis: Redis,
    private readonly keys: RunKeys,
    private readonly handle: RpcHandler,
  ) {
    this.blocker = redis.duplicate();
    this.blocker.on('error', () => {});
  }

  /** Serves until `stop`; handlers start in the order their requests were pushed. */
  async serve(): Promise<void> {
    while (!this.stopped) {
      let got: Buffer[] = [];
      try {
        // wait for one, then take what queued up behind it in the same round trip
        const first = await this.blocker.brpopBuffer(this.keys.rpc, 1);
        if (first) got = [first[1], ...((await this.blocker.rpopBuffer(this.keys.rpc, BATCH)) ?? [])];
      } catch {
        if (!this.stopped) await new Promise((r) => setTimeout(r, 200));
      }
      for (const raw of got) this.start(raw);
    }
  }

  private start(raw: Buffer): void {
    let req: Request;
    try {
      req = deserialize(raw) as Request;
    } catch {
      return;
    }
    if (req.exp < Date.now()) return;
    Promise.resolve()
      .then(() => this.handle(req.m, req.a, req.gw))
      .then(
        (v) => this.reply(req, { id: req.id, ok: true, v }),
        (e: unknown) => this.reply(req, { id: req.id, ok: false, e: (e as Error)?.message ?? String(e) }),
      );
  }

  private reply(req: Request, r: Reply): void {
    if (req.id === 0 || this.stopped) return;
    this.redis.publish(this.keys.replyChannel + req.gw, serialize(r)).catch(() => {
      /* the gateway times out and the island retries */
    });
  }

  stop(): void {
    this.stopped = true;
    this.blocker.disconnect();
  }
}
