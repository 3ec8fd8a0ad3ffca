// The 'sparse' payload (SparseLoCo-style): chunk-wise top-k with 2-bit values.
//
// The flat vector is cut into chunks of C = blockSize entries (the last one may be shorter); each
// chunk keeps its k largest magnitudes (k from the header; a short last chunk keeps min(k, len)).
// A kept value is sent as 2 bits: its sign, and whether its magnitude is in the chunk's upper or
// lower half (split at the median kept magnitude); each half is decoded as its mean magnitude.
//
// Raw payload, with nc = ceil(n / C) chunks and K kept entries in all:
//   nc × 2 × f32   per chunk: the lower and the upper half's mean magnitude
//   ceil(K·b / 8)  the K in-chunk offsets, b = bits(C − 1) bits each, packed LSB first, ascending
//                  within each chunk, chunks in order
//   ceil(K / 4)    the K 2-bit codes, packed LSB first: bit 0 = negative, bit 1 = upper half
// Non-finite input writes NaN scales, which decode rejects with E_NON_FINITE.

import { type Result, err, ok } from '../result.ts';

/** Bits per in-chunk offset for chunks of C entries. */
export const offsetBits = (C: number): number => Math.max(1, Math.ceil(Math.log2(C)));

/** Entries kept over n elements in chunks of C keeping k each. */
export function sparseKept(n: number, C: number, k: number): number {
  const full = Math.floor(n / C), tail = n - full * C;
  return full * Math.min(k, C) + Math.min(k, tail);
}

export function sparsePayloadBytes(n: number, C: number, k: number): number {
  const K = sparseKept(n, C, k);
  return 8 * Math.ceil(n / C) + Math.ceil((K * offsetBits(C)) / 8) + Math.ceil(K / 4);
}

/** The k-th largest of mag[0..m) (1-based k), by quickselect in place (mag is scratch). */
function kthLargest(mag: Float32Array, m: number, k: number): number {
  let lo = 0, hi = m - 1;
  const want = k - 1;
  while (lo < hi) {
    const pivot = mag[(lo + hi) >> 1];
    let i = lo, j = hi;
    while (i <= j) {
      while (mag[i] > pivot) i++;
      while (mag[j] < pivot) j--;
      if (i <= j) { const t = mag[i]; mag[i] = mag[j]; mag[j] = t; i++; j--; }
    }
    if (want <= j) hi = j; else if (want >= i) lo = i; else break;
  }
  return mag[want];
}

class BitWriter {
  private pos = 0;
  constructor(private readonly dst: Uint8Array, private readonly base: number) {}
  put(v: number, bits: number): void {
    for (let b = 0; b < bits; b++, this.pos++) if ((v >>> b) & 1) this.dst[this.base + (this.pos >>> 3)] |= 1 << (this.pos & 7);
  }
}

class BitReader {
  private pos = 0;
  constructor(private readonly src: Uint8Array, private readonly base: number) {}
  get(bits: number): number {
    let v = 0;
    for (let b = 0; b < bits; b++, this.pos++) v |= ((this.src[this.base + (this.pos >>> 3)] >>> (this.pos & 7)) & 1) << b;
    return v;
  }
}

/** Writes the sparse payload of src into dst (zeroed, sparsePayloadBytes long). */
export function writeSparse(src: Float32Array, C: number, k: number, dst: Uint8Array): void {
  const n = src.length, nc = Math.ceil(n / C), bits = offsetBits(C);
  const K = sparseKept(n, C, k);
  dst.fill(0);
  const scales = new DataView(dst.buffer, dst.byteOffset, 8 * nc);
  const offsets = new BitWriter(dst, 8 * nc);
  const codes = new BitWriter(dst, 8 * nc + Math.ceil((K * bits) / 8));
  const mag = new Float32Array(Math.min(C, n));
  const kept = new Float32Array(Math.min(C, n));
  for (let c = 0; c < nc; c++) {
    const start = c * C, len = Math.min(C, n - start), kc = Math.min(k, len);
    let finite = true;
    for (let i = 0; i < len; i++) { const a = Math.abs(src[start + i]); mag[i] = a; if (!(a < Infinity)) finite = false; }
    if (!finite) {
      scales.setFloat32(8 * c, NaN, true);
      scales.setFloat32(8 * c + 4, NaN, true);
      for (let j = 0; j < kc; j++) { offsets.put(j, bits); codes.put(0, 2); }
      continue;
    }
    const T = kthLargest(mag, len, kc);
    // kept offsets: |x| > T, then ties |x| == T in index order, until kc
    let above = 0;
    for (let i = 0; i < len; i++) if (Math.abs(src[start + i]) > T) above++;
    let ties = kc - above, m = 0;
    const idx: number[] = [];
    for (let i = 0; i < len && m < kc; i++) {
      const a = Math.abs(src[start + i]);
      if (a > T || (a === T && ties-- > 0)) { idx.push(i); kept[m++] = a; }
    }
    const split = m > 1 ? kthLargest(kept.slice(0, m), m, Math.ceil(m / 2)) : Infinity; // upper half: |x| >= split
    let hiSum = 0, hiN = 0, loSum = 0, loN = 0;
    for (const i of idx) { const a = Math.abs(src[start + i]); if (a >= split) { hiSum += a; hiN++; } else { loSum += a; loN++; } }
    const hi = hiN ? Math.fround(hiSum / hiN) : 0, lo = loN ? Math.fround(loSum / loN) : 0;
    scales.setFloat32(8 * c, lo, true);
    scales.setFloat32(8 * c + 4, hi, true);
    for (const i of idx) {
      const x = src[start + i];
      offsets.put(i, bits);
      codes.put((x < 0 ? 1 : 0) | (Math.abs(x) >= split ? 2 : 0), 2);
    }
  }
}

/** Decodes a sparse payload into dst (length n); checks offsets ascend within each chunk. */
export function readSparse(payload: Uint8Array, C: number, k: number, dst: Float32Array): Result<Float32Array> {
  const n = dst.length, nc = Math.ceil(n / C), bits = offsetBits(C);
  const K = sparseKept(n, C, k);
  const scales = new DataView(payload.buffer, payload.byteOffset, 8 * nc);
  const offsets = new BitReader(payload, 8 * nc);
  const codes = new BitReader(payload, 8 * nc + Math.ceil((K * bits) / 8));
  dst.fill(0);
  for (let c = 0; c < nc; c++) {
    const start = c * C, len = Math.min(C, n - start), kc = Math.min(k, len);
    const lo = scales.getFloat32(8 * c, true), hi = scales.getFloat32(8 * c + 4, true);
    if (!(Math.abs(lo) < Infinity && Math.abs(hi) < Infinity)) return err('E_NON_FINITE', 'frame holds a non-finite value');
    let prev = -1;
    for (let j = 0; j < kc; j++) {
      const off = offsets.get(bits);
      if (off <= prev || off >= len) return err('E_CORRUPT', `sparse offset ${off} in chunk ${c} is out of order or range`);
      prev = off;
      const code = codes.get(2);
      const a = code & 2 ? hi : lo;
      dst[start + off] = code & 1 ? -a : a;
    }
  }
  return ok(dst);
}
