// Gateway side of the durable channel: waits for the aggregator to settle a delta (durable in a
// version, or rejected) before the gateway acks the island. Messages missed while the subscriber
// was reconnecting, or published before a waiter existed, are caught by re-reading the islands
// hash: on every (re)subscribe and, for waiters older than `recheckMs`, on a timer.

import type { Redis } from 'ioredis';
import type { RunKeys } from './keys.ts';
import type { SettleMessage } from './stream.ts';

type Waiter = { seq: number; since: number; resolve: (state: string) => void };

export class SettleFeed {
  private readonly waiters = new Map<string, Waiter>();
  private readonly sub: Redis;
  private readonly timer: NodeJS.Timeout;
  private readonly durableListeners: Array<(m: SettleMessage) => void> = [];
  /** Highest durable version announced. */
  durableVersion = -1;

  constructor(
    private readonly redis: Redis,
    private readonly keys: RunKeys,
    readonly o: { recheckMs?: number } = {},
  ) {
    this.sub = redis.duplicate();
    this.sub.on('error', () => {});
    this.sub.on('message', (_ch: string, text: string) => this.onMessage(text));
    this.sub.on('ready', () => void this.recheck(0));
    const every = o.recheckMs ?? 2000;
    this.timer = setInterval(() => void this.recheck(every), every);
    this.timer.unref();
  }

  async start(): Promise<void> {
    await this.sub.subscribe(this.keys.durableChannel);
  }

  /** Called with each announced durable version. */
  onDurable(fn: (m: SettleMessage) => void): void {
    this.durableListeners.push(fn);
  }

  /** Resolves with the delta's final state (`v:N` or `r:CODE`). Register before appending. */
  wait(island: string, seq: number): Promise<string> {
    return new Promise((resolve) => {
      const prev = this.waiters.get(island);
      if (prev && prev.seq === seq) {
        // a retry of the same delta: both callers get the answer
        const first = prev.resolve;
        prev.resolve = (s) => {
          first(s);
          resolve(s);
        };
        return;
      }
      this.waiters.set(island, { seq, since: performance.now(), resolve });
    });
  }

  /** Settles a waiter from a known state (a duplicate append that was already settled). */
  settleNow(island: string, seq: number, state: string): void {
    const w = this.waiters.get(island);
    if (!w || w.seq !== seq || state === 'p') return;
    this.waiters.delete(island);
    w.resolve(state);
  }

  /** Forgets a waiter (its island left). */
  cancel(island: string): void {
    this.waiters.delete(island);
  }

  get pending(): number {
    return this.waiters.size;
  }

  private onMessage(text: string): void {
    let m: SettleMessage;
    try {
      m = JSON.parse(text) as SettleMessage;
    } catch {
      return;
    }
    for (const [island, seq, state] of m.settled) this.settleNow(island, seq, state);
    if (m.version !== undefined && m.version > this.durableVersion) {
      this.durableVersion = m.version;
      for (const fn of this.durableListeners) fn(m);
    }
  }

  private async recheck(olderThanMs: number): Promise<void> {
    const now = performance.now();
    const due = [...this.waiters.entries()].filter(([, w]) => now - w.since >= olderThanMs);
    if (due.length === 0) return;
    try {
      const states = await this.redis.hmget(this.keys.islands, ...due.map(([island]) => island));
      due.forEach(([island, w], i) => {
        const m = /^(\d+)\|(.*)$/.exec(states[i] ?? '');
        if (m && Number(m[1]) === w.seq) this.settleNow(island, w.seq, m[2]);
      });
    } catch {
      /* Redis unreachable: the next tick tries again */
    }
  }

  close(): void {
    clearInterval(this.timer);
    this.sub.disconnect();
  }
}
