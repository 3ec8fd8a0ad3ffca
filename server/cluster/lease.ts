// The aggregator lease: exactly one active aggregator, fenced.
//
// Acquire is one script: if no lease exists, INCR the fence counter and SET lease = owner:token
// with a TTL. The holder renews every ttl/3; a standby polls acquire and takes over once the lease
// lapses. The token only grows, so `GET fence == token` is true for the latest holder alone: every
// write an aggregator makes (checkpoint commit, stream ack, update publish) runs in a script that
// checks it first and fails with E_FENCED otherwise. A deposed aggregator (paused past its lease,
// then woken) therefore writes nothing, whatever its own clock believes.

import type { Redis } from 'ioredis';
import type { RunKeys } from './keys.ts';

const ACQUIRE = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'PX', ARGV[2])
return t`;
const RENEW = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`;
const RELEASE = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])`;

/** The Lua prologue of every fenced write: KEYS[1] is the fence counter, ARGV[1] the token. */
export const FENCE_CHECK = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('E_FENCED: token ' .. ARGV[1] .. ' is not the latest ('
    .. tostring(redis.call('GET', KEYS[1])) .. ')')
end`;

export interface LeaseOptions {
  /** This process's name in the lease value (host:pid, say). */
  owner: string;
  ttlMs: number;
  /** Called once when a renewal finds the lease gone or taken (then `token` is 0). */
  onLost?: () => void;
}

export class AggregatorLease {
  /** The fencing token while held; 0 otherwise. */
  token = 0;
  private validUntil = 0;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly redis: Redis,
    private readonly keys: RunKeys,
    private readonly o: LeaseOptions,
  ) {}

  /** One attempt: the new token, or 0 when another aggregator holds the lease. */
  async tryAcquire(): Promise<number> {
    const t0 = performance.now();
    const t = Number(await this.redis.eval(ACQUIRE, 2, this.keys.lease, this.keys.fence, this.o.owner, this.o.ttlMs));
    if (t > 0) {
      this.token = t;
      this.validUntil = t0 + this.o.ttlMs;
      this.scheduleRenew();
    }
    return t;
  }

  /** Waits as a standby until the lease is ours (polls every ttl/4); 0 if `stop` came first. */
  async acquire(): Promise<number> {
    while (!this.stopped) {
      try {
        const t = await this.tryAcquire();
        if (t > 0) return t;
      } catch {
        /* Redis unreachable: keep polling */
      }
      await new Promise((r) => setTimeout(r, Math.max(20, this.o.ttlMs / 4)));
    }
    return 0;
  }

  /** True while the token is held and its lease cannot have lapsed by this process's clock. */
  held(): boolean {
    return this.token > 0 && performance.now() < this.validUntil;
  }

  private scheduleRenew(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.renew(), Math.max(10, this.o.ttlMs / 3));
    this.timer.unref();
  }

  private async renew(): Promise<void> {
    if (this.token === 0 || this.stopped) return;
    const t0 = performance.now();
    let kept = false;
    try {
      kept =
        Number(await this.redis.eval(RENEW, 1, this.keys.lease, `${this.o.owner}:${this.token}`, this.o.ttlMs)) === 1;
    } catch {
      // Redis unreachable: keep trying until our own clock says the lease has lapsed
      kept = performance.now() < this.validUntil;
      if (kept) {
        this.scheduleRenew();
        return;
      }
    }
    if (kept) {
      this.validUntil = t0 + this.o.ttlMs;
      this.scheduleRenew();
    } else this.lose();
  }

  private lose(): void {
    if (this.token === 0) return;
    this.token = 0;
    this.validUntil = 0;
    this.o.onLost?.();
  }

  /** Stops renewing and deletes the lease if still ours, so a standby takes over at once. */
  async release(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    const t = this.token;
    this.token = 0;
    if (t > 0) await this.redis.eval(RELEASE, 1, this.keys.lease, `${this.o.owner}:${t}`).catch(() => {});
  }
}
