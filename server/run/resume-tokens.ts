// Resume tokens: an island that reconnects (or restarts) rejoins under its old id only with the
// token the server gave it in its first hello. A token is an HMAC of the id under the run's secret,
// so it survives server restarts without being stored; the secret lives in the run folder.

import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';

export class ResumeTokens {
  private readonly secret: Buffer;

  /** Loads the run's secret from `p` (store.ts runPaths: secret.key), creating it (mode 0600) on first use. */
  constructor(p: string) {
    if (existsSync(p)) this.secret = Buffer.from(readFileSync(p, 'utf8').trim(), 'hex');
    else {
      this.secret = randomBytes(32);
      writeFileSync(p, this.secret.toString('hex') + '\n', { mode: 0o600 });
    }
  }

  /** The token for an island id (32 base64url characters). */
  token(islandId: string): string {
    return createHmac('sha256', this.secret).update(islandId).digest('base64url').slice(0, 32);
  }

  /** Constant-time check of a presented token. */
  check(islandId: string, token: unknown): boolean {
    if (typeof token !== 'string') return false;
    const want = Buffer.from(this.token(islandId));
    const got = Buffer.from(token);
    return got.length === want.length && timingSafeEqual(got, want);
  }
}
