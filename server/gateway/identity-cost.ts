// A new island identity costs something (docs/protocol.md, "A new identity costs work"): a small
// proof of work on a challenge this server handed out (core/pow.ts), and a budget of new identities
// per address per hour. Challenges are stateless to hand out (an HMAC under a per-process secret,
// with their expiry) and single-use (the ones spent are remembered until they expire).

import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { leadingZeroBits } from '../../core/pow.ts';
import { type Result, err, ok } from '../../core/result.ts';
import { TokenBuckets } from './token-buckets.ts';

/** A challenge is good this long after it was handed out. */
export const CHALLENGE_TTL_MS = 5 * 60_000;
/** Spent challenges remembered at most (a flood of them makes room by expiry, then refuses). */
const SPENT_MAX = 200_000;
/** Addresses whose budget is remembered. */
const ADDRESSES = 100_000;

export const IdentityError = {
  /** hello for a new identity without a valid proof of work. */
  POW: 'E_POW',
} as const;

export interface Challenge {
  challenge: string;
  bits: number;
  expiresAt: number;
}

export class IdentityCost {
  private readonly secret = randomBytes(32);
  private readonly spent = new Map<string, number>();
  private readonly budgets: TokenBuckets;

  /** `bits` 0: no proof of work is asked. `perHour`: new identities per address per hour. */
  constructor(
    readonly bits: number,
    perHour: number,
  ) {
    this.budgets = new TokenBuckets(perHour, 3_600_000, ADDRESSES);
  }

  get required(): boolean {
    return this.bits > 0;
  }

  challenge(now = Date.now()): Challenge {
    const expiresAt = now + CHALLENGE_TTL_MS;
    const body = `${expiresAt}.${randomBytes(12).toString('base64url')}`;
    return { challenge: `${body}.${this.mac(body)}`, bits: this.bits, expiresAt };
  }

  /**
   * Whether `pow` pays for a new identity from `address`: E_POW when it does not (missing, forged,
   * expired, spent, too few zero bits), E_RATE_LIMIT past the address's budget. Spends the challenge.
   */
  pay(address: string, pow: { challenge: string; nonce: string } | undefined, now = Date.now()): Result<void> {
    if (!this.required) return this.take(address, now);
    if (!pow)
      return err(
        IdentityError.POW,
        `a new identity needs a proof of work: ask \`challenge\`, then send hello with pow { challenge, nonce } ` +
          `(${this.bits} bits)`,
      );
    const parts = pow.challenge.split('.');
    if (parts.length !== 3) return err(IdentityError.POW, 'not a challenge of this server');
    const body = `${parts[0]}.${parts[1]}`;
    const want = Buffer.from(this.mac(body)),
      got = Buffer.from(parts[2]);
    if (want.length !== got.length || !timingSafeEqual(want, got))
      return err(IdentityError.POW, 'not a challenge of this server');
    const expiresAt = Number(parts[0]);
    if (!(expiresAt > now)) return err(IdentityError.POW, 'the challenge expired: ask for a new one');
    if (this.spent.has(pow.challenge))
      return err(IdentityError.POW, 'the challenge was already used: ask for a new one');
    const d = createHash('sha256').update(`${pow.challenge}:${pow.nonce}`).digest();
    if (leadingZeroBits(d) < this.bits)
      return err(IdentityError.POW, `SHA-256(challenge:nonce) has fewer than ${this.bits} leading zero bits`);
    const budget = this.take(address, now);
    if (!budget.ok) return budget;
    this.spend(pow.challenge, expiresAt, now);
    return ok(undefined);
  }

  private mac(body: string): string {
    return createHmac('sha256', this.secret).update(body).digest('base64url').slice(0, 22);
  }

  private spend(challenge: string, expiresAt: number, now: number): void {
    if (this.spent.size >= SPENT_MAX) for (const [c, t] of this.spent) if (t <= now) this.spent.delete(c);
    this.spent.set(challenge, expiresAt);
  }

  /** One new identity from the address's hourly budget. */
  private take(address: string, now: number): Result<void> {
    if (!this.budgets.take(address, now))
      return err(
        'E_RATE_LIMIT',
        `this address made its ${this.budgets.cap} new identities this hour: resume an identity (resumeToken), ` +
          `or retry later`,
      );
    return ok(undefined);
  }
}
