// Token buckets keyed by address: `perWindow` takes a window, refilled continuously. At most
// `maxKeys` addresses are remembered; under a flood of addresses the least recently seen one is
// forgotten first (never all at once). The gateway's hello rate (per minute) and the budget of new
// identities (per hour, identity-cost.ts) are two of them.

export class TokenBuckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    private readonly perWindow: number,
    private readonly windowMs: number,
    private readonly maxKeys: number,
  ) {}

  /** What a bucket holds when full (at least 1). */
  get cap(): number {
    return Math.max(1, this.perWindow);
  }

  /** Takes one token from `key`'s bucket; false when it has none left. */
  take(key: string, now: number): boolean {
    const cap = this.cap;
    const b = this.buckets.get(key) ?? { tokens: cap, at: now };
    b.tokens = Math.min(cap, b.tokens + ((now - b.at) * cap) / this.windowMs);
    b.at = now;
    // most recently seen last, so the first is the stalest
    this.buckets.delete(key);
    this.buckets.set(key, b);
    if (this.buckets.size > this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }
}
