// Hash commitments of butterfly mixing: SHA-256 (FIPS 180-4), synchronous and in plain TypeScript,
// so the browser (any context, secure or not), the Node island, the server and the simulator's
// virtual clock (which cannot wait on WebCrypto's thread pool) compute the same digest. Checked
// against node:crypto in test/mix.test.ts.

const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
  0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
  0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
  0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
  0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
  0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
  0xc67178f2,
]);

const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'));
const W = new Uint32Array(64);

const rotr = (x: number, n: number) => (x >>> n) | (x << (32 - n));

/** Compresses the 64-byte block at `o` of `b` into the state h. */
function block(h: Uint32Array, b: Uint8Array, o: number): void {
  for (let t = 0; t < 16; t++)
    W[t] = (b[o + 4 * t] << 24) | (b[o + 4 * t + 1] << 16) | (b[o + 4 * t + 2] << 8) | b[o + 4 * t + 3];
  for (let t = 16; t < 64; t++) {
    const w15 = W[t - 15],
      w2 = W[t - 2];
    const s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >>> 3);
    const s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >>> 10);
    W[t] = (W[t - 16] + s0 + W[t - 7] + s1) | 0;
  }
  let a = h[0],
    bb = h[1],
    c = h[2],
    d = h[3],
    e = h[4],
    f = h[5],
    g = h[6],
    hh = h[7];
  for (let t = 0; t < 64; t++) {
    const S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const t1 = (hh + S1 + ((e & f) ^ (~e & g)) + K[t] + W[t]) | 0;
    const S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    const t2 = (S0 + ((a & bb) ^ (a & c) ^ (bb & c))) | 0;
    hh = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = bb;
    bb = a;
    a = (t1 + t2) | 0;
  }
  h[0] += a;
  h[1] += bb;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += hh;
}

/** SHA-256 of bytes (or of an f32 array's bytes, little-endian as every platform lays them), 64 hex digits. */
export function sha256Hex(data: Uint8Array | Float32Array): string {
  const bytes = data instanceof Uint8Array ? data : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const h = Uint32Array.of(
    0x6a09e667,
    0xbb67ae85,
    0x3c6ef372,
    0xa54ff53a,
    0x510e527f,
    0x9b05688c,
    0x1f83d9ab,
    0x5be0cd19,
  );
  const n = bytes.length;
  const whole = n - (n % 64);
  for (let o = 0; o < whole; o += 64) block(h, bytes, o);
  // the tail, 0x80, zeros, and the bit length (big-endian 64-bit) in one or two blocks
  const tail = new Uint8Array(n % 64 < 56 ? 64 : 128);
  tail.set(bytes.subarray(whole));
  tail[n % 64] = 0x80;
  const bits = n * 8;
  const view = new DataView(tail.buffer);
  view.setUint32(tail.length - 8, Math.floor(bits / 2 ** 32));
  view.setUint32(tail.length - 4, bits >>> 0);
  for (let o = 0; o < tail.length; o += 64) block(h, tail, o);
  let s = '';
  for (let i = 0; i < 8; i++)
    s += HEX[h[i] >>> 24] + HEX[(h[i] >>> 16) & 255] + HEX[(h[i] >>> 8) & 255] + HEX[h[i] & 255];
  return s;
}
