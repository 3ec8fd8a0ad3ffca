// Redis key names of one run. The braces are a hash tag: every key of a run lands in one slot, so
// the Lua scripts that touch several of them stay valid on a Redis Cluster too.

import { Redis } from 'ioredis';

export interface RunKeys {
  /** `owner:token` of the active aggregator, with a TTL (the lease). */
  lease: string;
  /** INCR counter: the fencing token of the latest lease holder. */
  fence: string;
  /** Stream of validated deltas, appended by gateways. */
  deltas: string;
  /** Hash island → `seq|state` of its latest delta (p: pending, v:N durable in N, r:CODE rejected). */
  islands: string;
  /** `version|hash|token` of the latest durable version. */
  durable: string;
  /** Pub/sub channel: durable versions and the deltas they settle (JSON). */
  durableChannel: string;
  /** Pub/sub channel: update broadcasts (binary). */
  updateChannel: string;
  /** Consumer group of the aggregators on `deltas`. */
  group: string;
  /** List of gateway → aggregator requests (server/cluster/rpc.ts). */
  rpc: string;
  /** Pub/sub channel: aggregator events (a new active aggregator, bans). */
  eventChannel: string;
  /** Pub/sub channel prefix of the replies to one gateway. */
  replyChannel: string;
}

export function runKeys(run: string): RunKeys {
  const p = `atoll:{${run}}:`;
  return {
    lease: p + 'lease',
    fence: p + 'fence',
    deltas: p + 'deltas',
    islands: p + 'islands',
    durable: p + 'durable',
    durableChannel: p + 'durable-ch',
    updateChannel: p + 'update-ch',
    group: 'aggregators',
    rpc: p + 'rpc',
    eventChannel: p + 'event-ch',
    replyChannel: p + 'reply-ch:',
  };
}

/** A client that reconnects forever and never throws an unhandled 'error' event. */
export function connectRedis(url: string, onError: (e: Error) => void = () => {}): Redis {
  const c = new Redis(url, {
    maxRetriesPerRequest: 2,
    retryStrategy: (n) => Math.min(50 * n, 1000),
    lazyConnect: false,
  });
  c.on('error', onError);
  return c;
}

/** The code of a Redis error reply raised by our scripts (`E_FENCED …` → E_FENCED). */
export function scriptErrorCode(e: unknown): string {
  return /\b(E_[A-Z_]+)/.exec((e as Error)?.message ?? '')?.[1] ?? 'E_REDIS';
}
