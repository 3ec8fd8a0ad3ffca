// Failed authentication (the admin token over REST, the validator token over socket.io) is
// counted per address. The first FREE_FAILURES cost nothing; each one after that locks the address
// out for twice as long as the last (1 s, 2 s, 4 s, … up to MAX_LOCK_MS), during which every try
// from it, right token or wrong, is answered E_RATE_LIMIT without a comparison. Other addresses
// are not touched, so an operator can always act from another one. A success clears the address.
// Each checked failure and each lock is logged.

/** Failures an address may make before the back-off starts. */
export const FREE_FAILURES = 5;
export const FIRST_LOCK_MS = 1000;
export const MAX_LOCK_MS = 5 * 60_000;
/** Addresses remembered (the stalest goes first). */
const ADDRESSES = 10_000;

interface Entry {
  failures: number;
  lockedUntil: number;
  lockMs: number;
}

export class AuthLimiter {
  private readonly byAddress = new Map<string, Entry>();
  /** Counters (tests, metrics): failures checked, tries refused while locked. */
  readonly stats = { failures: 0, refused: 0 };
  /** The last lines logged (the operator's log has them all). */
  readonly recent: string[] = [];

  constructor(
    private readonly what: string,
    private readonly log: (line: string) => void,
  ) {}

  /** ms the address must wait before its token is checked again (0: check it now). */
  retryAfter(address: string, now = Date.now()): number {
    const e = this.byAddress.get(address);
    const wait = e ? Math.max(0, e.lockedUntil - now) : 0;
    if (wait > 0) this.stats.refused++;
    return wait;
  }

  failed(address: string, now = Date.now()): void {
    this.stats.failures++;
    let e = this.byAddress.get(address);
    if (!e) {
      e = { failures: 0, lockedUntil: 0, lockMs: 0 };
      if (this.byAddress.size >= ADDRESSES) this.byAddress.delete(this.byAddress.keys().next().value!);
    }
    this.byAddress.delete(address);
    this.byAddress.set(address, e);
    e.failures++;
    let line = `auth: wrong ${this.what} from ${address} (${e.failures} failed)`;
    if (e.failures > FREE_FAILURES) {
      e.lockMs = Math.min(MAX_LOCK_MS, e.lockMs ? 2 * e.lockMs : FIRST_LOCK_MS);
      e.lockedUntil = now + e.lockMs;
      line += `: locked out for ${e.lockMs} ms`;
    }
    this.log(line);
    this.recent.push(line);
    if (this.recent.length > 100) this.recent.shift();
  }

  succeeded(address: string): void {
    this.byAddress.delete(address);
  }
}
