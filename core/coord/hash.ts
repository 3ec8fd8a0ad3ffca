// hashParams: a fast 64-bit fingerprint of a parameter array, sent with every version so a replica
// can prove it holds exactly the server's θ.
//
// FNV-1a-64 over the array's little-endian 32-bit words (one xor + one 64-bit multiply per word,
// not per byte), in chunks of 65,536 words: each chunk is hashed alone, then the chunks' hashes
// (each as its low and high 32-bit word) are hashed the same way. Chunks let the server hash its
// fragments of θ on several threads at once (server/outer/worker.ts); a replica hashes
// them one after the other. The 64-bit product is computed on four 16-bit limbs so it stays exact
// in doubles. Not cryptographic: it detects divergence, it does not authenticate.

/** Words per chunk; the server's θ fragments start on chunk boundaries. */
export const HASH_CHUNK_WORDS = 65536;

const PRIME_LO = 0x01b3; // FNV-64 prime 0x00000100_000001b3 = 2^40 + 0x1b3
const PRIME_40 = 0x0100; // 2^40 = limb 2 × 0x100

/**
 * FNV-1a-64 of words[a, b) from the offset basis; the result as its low and high 32-bit words in
 * out[o], out[o + 1].
 */
function fnvWords(words: Uint32Array, a: number, b: number, out: Uint32Array, o: number): void {
  // offset basis 0xcbf29ce484222325 as little-endian 16-bit limbs
  let h0 = 0x2325,
    h1 = 0x8422,
    h2 = 0x9ce4,
    h3 = 0xcbf2;
  for (let i = a; i < b; i++) {
    const v = words[i];
    h0 ^= v & 0xffff;
    h1 ^= v >>> 16;
    // (h3:h2:h1:h0) × (2^40 + 0x1b3) mod 2^64, limb by limb with carries
    const t0 = h0 * PRIME_LO;
    const t1 = h1 * PRIME_LO + (t0 >>> 16);
    const t2 = h2 * PRIME_LO + h0 * PRIME_40 + (t1 >>> 16);
    const t3 = h3 * PRIME_LO + h1 * PRIME_40 + (t2 >>> 16);
    h0 = t0 & 0xffff;
    h1 = t1 & 0xffff;
    h2 = t2 & 0xffff;
    h3 = t3 & 0xffff;
  }
  out[o] = (h0 | (h1 << 16)) >>> 0;
  out[o + 1] = (h2 | (h3 << 16)) >>> 0;
}

/** The number of chunks of an n-word array. */
export function hashChunkCount(n: number): number {
  return Math.ceil(n / HASH_CHUNK_WORDS);
}

/**
 * Hashes the chunks of `words` that start in [a, b) (a on a chunk boundary) into `out`: chunk c's
 * hash at out[2c], out[2c + 1]. The chunk that holds b − 1 ends at min(its end, words.length).
 */
export function hashChunks(words: Uint32Array, a: number, b: number, out: Uint32Array): void {
  for (let s = a; s < b; s += HASH_CHUNK_WORDS) {
    const c = s / HASH_CHUNK_WORDS;
    fnvWords(words, s, Math.min(s + HASH_CHUNK_WORDS, words.length), out, 2 * c);
  }
}

/** The hash of an array whose chunk hashes are `chunks` (2 words per chunk), as 16 hex digits. */
export function combineChunkHashes(chunks: Uint32Array): string {
  const h = new Uint32Array(2);
  fnvWords(chunks, 0, chunks.length, h, 0);
  return h[1].toString(16).padStart(8, '0') + h[0].toString(16).padStart(8, '0');
}

/** 16 hex digits. Equal arrays (bitwise, including NaN payloads and -0) give equal hashes. */
export function hashParams(x: Float32Array | Uint8Array): string {
  const words = x instanceof Float32Array ? new Uint32Array(x.buffer, x.byteOffset, x.length) : bytesAsWords(x);
  const chunks = new Uint32Array(2 * hashChunkCount(words.length));
  hashChunks(words, 0, words.length, chunks);
  return combineChunkHashes(chunks);
}

/** Bytes as little-endian 32-bit words, the last one padded with zero bytes. */
function bytesAsWords(b: Uint8Array): Uint32Array {
  const n = Math.ceil(b.length / 4);
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const o = 4 * i;
    out[i] = (b[o] | ((b[o + 1] ?? 0) << 8) | ((b[o + 2] ?? 0) << 16) | ((b[o + 3] ?? 0) << 24)) >>> 0;
  }
  return out;
}
