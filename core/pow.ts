// The proof of work a new island identity costs (docs/protocol.md, "A new identity costs work"):
// find a nonce such that SHA-256(challenge + ":" + nonce), as bytes, starts with `bits` zero bits.
// A browser tab pays it once (it keeps its identity with the resume token); a farm of identities
// pays it for each. Web Crypto only (browsers, workers and Node ≥ 20 alike): no node: import.

/** Leading zero bits of a digest. */
export function leadingZeroBits(d: Uint8Array): number {
  let n = 0;
  for (const byte of d) {
    if (byte === 0) {
      n += 8;
      continue;
    }
    return n + Math.clz32(byte) - 24;
  }
  return n;
}

/** The nonces are decimal strings; this many are hashed per await. */
const BATCH = 256;

/**
 * A nonce for `challenge` at `bits` (expected 2^bits hashes: 16 bits ≈ 65,000, about 0.1–0.5 s).
 * `signal` stops the search (null is returned).
 */
export async function solvePow(challenge: string, bits: number, signal?: { aborted: boolean }): Promise<string | null> {
  const enc = new TextEncoder();
  for (let base = 0; base < 2 ** 40; base += BATCH) {
    if (signal?.aborted) return null;
    const tries = Array.from({ length: BATCH }, (_, i) => String(base + i));
    const digests = await Promise.all(
      tries.map((n) => crypto.subtle.digest('SHA-256', enc.encode(`${challenge}:${n}`))),
    );
    for (let i = 0; i < BATCH; i++) if (leadingZeroBits(new Uint8Array(digests[i])) >= bits) return tries[i];
  }
  return null;
}
