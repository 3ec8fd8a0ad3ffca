// hashParams: a fast 64-bit fingerprint of a parameter array, sent with every version so a replica
// can prove it holds exactly the server's θ.
//
// FNV-1a-64 over the array's little-endian 32-bit words (one xor + one 64-bit multiply per word,
// not per byte: ~4× faster than byte-wise FNV and still sensitive to every bit). The 64-bit
// product is computed on four 16-bit limbs so it stays exact in doubles. Not cryptographic: it
// detects divergence, it does not authenticate.

const PRIME_LO = 0x01b3; // FNV-64 prime 0x00000100_000001b3 = 2^40 + 0x1b3
const PRIME_40 = 0x0100; // 2^40 = limb 2 × 0x100

/** 16 hex digits. Equal arrays (bitwise, including NaN payloads and -0) give equal hashes. */
export function hashParams(x: Float32Array | Uint8Array): string {
  const words = x instanceof Float32Array
    ? new Uint32Array(x.buffer, x.byteOffset, x.length)
    : null;
  // offset basis 0xcbf29ce484222325 as little-endian 16-bit limbs
  let h0 = 0x2325, h1 = 0x8422, h2 = 0x9ce4, h3 = 0xcbf2;
  const n = words ? words.length : Math.ceil((x as Uint8Array).length / 4);
  for (let i = 0; i < n; i++) {
    let v: number;
    if (words) v = words[i];
    else {
      const b = x as Uint8Array, o = 4 * i;
      v = (b[o] | ((b[o + 1] ?? 0) << 8) | ((b[o + 2] ?? 0) << 16) | ((b[o + 3] ?? 0) << 24)) >>> 0;
    }
    h0 ^= v & 0xffff;
    h1 ^= v >>> 16;
    // (h3:h2:h1:h0) × (2^40 + 0x1b3) mod 2^64, limb by limb with carries
    const t0 = h0 * PRIME_LO;
    const t1 = h1 * PRIME_LO + (t0 >>> 16);
    const t2 = h2 * PRIME_LO + h0 * PRIME_40 + (t1 >>> 16);
    const t3 = h3 * PRIME_LO + h1 * PRIME_40 + (t2 >>> 16);
    h0 = t0 & 0xffff; h1 = t1 & 0xffff; h2 = t2 & 0xffff; h3 = t3 & 0xffff;
  }
  const hex = (v: number) => v.toString(16).padStart(4, '0');
  return hex(h3) + hex(h2) + hex(h1) + hex(h0);
}
