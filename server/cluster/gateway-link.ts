// The gateway role's side of Redis: append a validated delta and resolve when the aggregator has
// settled it (durable in a version, or rejected), and relay the aggregator's update broadcasts.
// A retry of the same island+seq (the island reconnected through another gateway) is answered
// from the islands hash, never appended twice.

import type { Redis } from 'ioredis';
import { type RunKeys, runKeys } from './keys.ts';
import { SettleFeed } from './settle-feed.ts';
import { type SettleMessage, appendDelta } from './stream.ts';

export class GatewayLink {
  readonly keys: RunKeys;
  private readonly feed: SettleFeed;
  private readonly sub: Redis;
  private readonly updateListeners: Array<(payload: Buffer) => void> = [];

  constructor(
    private readonly redis: Redis,
    run: string,
    o: { recheckMs?: number } = {},
  ) {
    this.keys = runKeys(run);
    this.feed = new SettleFeed(redis, this.keys, o);
    this.sub = redis.duplicate();
    this.sub.on('error', () => {});
    this.sub.on('messageBuffer', (_ch: Buffer, payload: Buffer) => {
      for (const fn of this.updateListeners) fn(payload);
    });
  }

  async start(): Promise<void> {
    await this.feed.start();
    await this.sub.subscribe(this.keys.updateChannel);
  }

  /**
   * Appends the delta and resolves with its final state: `v:N` (durable in version N: ack it) or
   * `r:CODE` (rejected), or `stale:S` when the island already sent a later seq S.
   */
  async submit(island: string, seq: number, meta: string, frame: Uint8Array): Promise<string> {
    const settled = this.feed.wait(island, seq);
    const a = await appendDelta(this.redis, this.keys, island, seq, meta, frame);
    if (a.kind === 'stale') {
      this.feed.cancel(island);
      return `stale:${a.latestSeq}`;
    }
    if (a.kind === 'duplicate') this.feed.settleNow(island, seq, a.state);
    return settled;
  }

  /** Each update the aggregator broadcasts (the downlink frame). */
  onUpdate(fn: (payload: Buffer) => void): void {
    this.updateListeners.push(fn);
  }

  /** Each durable version announced, with the deltas it settled. */
  onDurable(fn: (m: SettleMessage) => void): void {
    this.feed.onDurable(fn);
  }

  get durableVersion(): number {
    return this.feed.durableVersion;
  }

  close(): void {
    this.feed.close();
    this.sub.disconnect();
  }
}
