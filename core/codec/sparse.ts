// The 'sparse' payload (SparseLoCo-style): chunk-wise top-k, or a strided share, with 2-bit or 1-bit values.
//
// The flat vector is cut into chunks of C = blockSize entries (the last, of len < C, may be
// shorter); each chunk keeps kc = k entries (k from the header), a short one min(k, len) (top-k) or
// the same share ⌊len·k / C⌋, at least 1 (strided):
//   top-k    its kc largest magnitudes, at offsets sent with the frame;
//   strided  (header flag) every s-th entry from a phase p: offsets p, p + s, …, p + (kc − 1)·s with
//            s = ⌊len / kc⌋, the phase p ∈ [0, s) whose entries hold the most energy Σx². Only p is
//            sent, so an entry costs its value bits alone (top-k's offsets: 12 bits at C = 4096);
//            with error feedback the phases left out grow until they are sent.
// A kept value is sent as v = 2 bits: its sign, and whether its magnitude is in the chunk's upper or
// lower half (split at the median kept magnitude), each half decoded as its mean magnitude; or as
// v = 1 bit (header flag): its sign, decoded as the chunk's mean kept magnitude.
//
// Raw payload, with nc = ceil(n / C) chunks and K kept entries in all:
//   nc × v × f32   per chunk: v = 2: the lower and the upper half's mean magnitude; v = 1: the mean
//   top-k:    ceil(K·b / 8)  the K in-chunk offsets, b = bits(C − 1) bits each, packed LSB first,
//                            ascending within each chunk, chunks in order
//   strided:  nc × u16       each chunk's phase p
//   ceil(K·v / 8)  the K codes, packed LSB first: bit 0 = negative, (v = 2) bit 1 = upper half
// Non-finite input writes NaN scales, which decode rejects with E_NON_FINITE.

import { type Result, err, ok } from '../result.ts';

/** Bits per in-chunk offset for chunks of C entries. */
export const offsetBits = (C: number): number => Math.max(1, Math.ceil(Math.log2(C)));

/**
 * Entries a chunk of len (of C) keeps: top-k min(k, len); strided the same share of a short chunk, ⌊len·k / C⌋ (at
 * least 1).
 */
export function chunkKept(len: number, C: number, k: number, strided: boolean): number {
  return strided && len < C ? Math.max(1, Math.floor((len * k) / C)) : Math.min(k, len);
}

/** Entries kept over n elements in chunks of C keeping k each. */
export function sparseKept(n: number, C: number, k: number, strided = false): number {
  const full = Math.floor(n / C),
    tail = n - full * C;
  return full * Math.min(k, C) + (tail ? chunkKept(tail, C, k, strided) : 0);
}

/** How a sparse frame places and codes its entries (header flags). */
export interface SparseLayout {
  /** Entries at a stride from a phase per chunk, instead of the top k at sent offsets. */
  strided: boolean;
  /** Bits per value: 2 (sign, upper or lower half) or 1 (sign). */
  valueBits: 1 | 2;
}

export const TOPK_2BIT: SparseLayout = { strided: false, valueBits: 2 };

/**
 * Byte offsets of the places (offsets or phases) and of the codes, and the payload's length (the scales are at 0).
 * Chunk c's scales, phase and codes start at 4·v·c, places + 2·c and codes + c·k·v / 8 (offsets: c·k·bits / 8):
 * a frame cut where those are whole bytes is the frames of its parts (core/coord/outer-fragment.ts).
 */
export function sparseSections(
  n: number,
  C: number,
  k: number,
  { strided, valueBits }: SparseLayout,
): { places: number; codes: number; end: number } {
  const nc = Math.ceil(n / C),
    K = sparseKept(n, C, k, strided);
  const places = 4 * valueBits * nc;
  const codes = places + (strided ? 2 * nc : Math.ceil((K * offsetBits(C)) / 8));
  return { places, codes, end: codes + Math.ceil((K * valueBits) / 8) };
}

export function sparsePayloadBytes(n: number, C: number, k: number, layout: SparseLayout = TOPK_2BIT): number {
  return sparseSections(n, C, k, layout).end;
}

/** The k-th largest of mag[0..m) (1-based k), by quickselect in place (mag is scratch). */
function kthLargest(mag: Float32Array, m: number, k: number): number {
  let lo = 0,
    hi = m - 1;
  const want = k - 1;
  while (lo < hi) {
    const pivot = mag[(lo + hi) >> 1];
    let i = lo,
      j = hi;
    while (i <= j) {
      while (mag[i] > pivot) i++;
      while (mag[j] < pivot) j--;
      if (i <= j) {
        const t = mag[i];
        mag[i] = mag[j];
        mag[j] = t;
        i++;
        j--;
      }
    }
    if (want <= j) hi = j;
    else if (want >= i) lo = i;
    else break;
  }
  return mag[want];
}

class BitWriter {
  private pos = 0;
  constructor(
    private readonly dst: Uint8Array,
    private readonly base: number,
  ) {}
  put(v: number, bits: number): void {
    for (let b = 0; b < bits; b++, this.pos++)
      if ((v >>> b) & 1) this.dst[this.base + (this.pos >>> 3)] |= 1 << (this.pos & 7);
  }
}

class BitReader {
  private pos = 0;
  constructor(
    private readonly src: Uint8Array,
    private readonly base: number,
  ) {}
  get(bits: number): number {
    let v = 0;
    for (let b = 0; b < bits; b++, this.pos++)
      v |= ((this.src[this.base + (this.pos >>> 3)] >>> (this.pos & 7)) & 1) << b;
    return v;
  }
}

/** In a chunk x of len entries keeping kc: the kept offsets into idx (ascending), their count. */
function selectTopKChunk(x: Float32Array, len: number, kc: number, mag: Float32Array, idx: Int32Array): void {
  for (let i = 0; i < len; i++) mag[i] = Math.abs(x[i]);
  const T = kthLargest(mag, len, kc);
  // kept offsets: |x| > T, then ties |x| == T in index order, until kc
  let above = 0;
  for (let i = 0; i < len; i++) if (Math.abs(x[i]) > T) above++;
  let ties = kc - above,
    m = 0;
  for (let i = 0; i < len && m < kc; i++) {
    const a = Math.abs(x[i]);
    if (a > T || (a === T && ties-- > 0)) idx[m++] = i;
  }
}

/** The phase p ∈ [0, s) whose kc entries p + j·s hold the most energy (the lowest p on ties). */
function bestPhase(x: Float32Array, s: number, kc: number): number {
  let best = -1,
    phase = 0;
  for (let p = 0; p < s; p++) {
    let e = 0;
    for (let j = 0, i = p; j < kc; j++, i += s) e += x[i] * x[i];
    if (e > best) {
      best = e;
      phase = p;
    }
  }
  return phase;
}

/** Writes the sparse payload of src into dst (zeroed, sparsePayloadBytes long). */
export function writeSparse(
  src: Float32Array,
  C: number,
  k: number,
  dst: Uint8Array,
  layout: SparseLayout = TOPK_2BIT,
): void {
  const { strided, valueBits: v } = layout;
  const n = src.length,
    nc = Math.ceil(n / C),
    bits = offsetBits(C);
  const at = sparseSections(n, C, k, layout);
  dst.fill(0);
  const scales = new DataView(dst.buffer, dst.byteOffset, at.places);
  const offsets = new BitWriter(dst, at.places);
  const phases = new DataView(dst.buffer, dst.byteOffset + at.places, strided ? 2 * nc : 0);
  const codes = new BitWriter(dst, at.codes);
  const mag = new Float32Array(Math.min(C, n));
  const idx = new Int32Array(Math.min(C, n));
  for (let c = 0; c < nc; c++) {
    const start = c * C,
      len = Math.min(C, n - start),
      kc = chunkKept(len, C, k, strided);
    const x = src.subarray(start, start + len);
    let finite = true;
    for (let i = 0; i < len; i++) if (!(Math.abs(x[i]) < Infinity)) finite = false;
    if (!finite) {
      for (let b = 0; b < v; b++) scales.setFloat32(4 * (v * c + b), NaN, true);
      for (let j = 0; j < kc; j++) {
        if (!strided) offsets.put(j, bits);
        codes.put(0, v);
      }
      continue;
    }
    if (strided) {
      const s = Math.floor(len / kc),
        p = bestPhase(x, s, kc);
      phases.setUint16(2 * c, p, true);
      for (let j = 0; j < kc; j++) idx[j] = p + j * s;
    } else {
      selectTopKChunk(x, len, kc, mag, idx);
    }
    for (let j = 0; j < kc; j++) mag[j] = Math.abs(x[idx[j]]);
    // 1 bit: one half holding everything (split 0); 2 bits: upper half |x| >= the median kept |x|
    const split = v === 1 ? 0 : kc > 1 ? kthLargest(mag.slice(0, kc), kc, Math.ceil(kc / 2)) : Infinity;
    let hiSum = 0,
      hiN = 0,
      loSum = 0,
      loN = 0;
    for (let j = 0; j < kc; j++) {
      const a = mag[j];
      if (a >= split) {
        hiSum += a;
        hiN++;
      } else {
        loSum += a;
        loN++;
      }
    }
    const hi = hiN ? Math.fround(hiSum / hiN) : 0;
    if (v === 2) scales.setFloat32(8 * c, loN ? Math.fround(loSum / loN) : 0, true);
    scales.setFloat32(4 * (v * c + v - 1), hi, true);
    for (let j = 0; j < kc; j++) {
      const val = x[idx[j]];
      if (!strided) offsets.put(idx[j], bits);
      codes.put((val < 0 ? 1 : 0) | (Math.abs(val) >= split ? 2 : 0), v);
    }
  }
}

/** Decodes a sparse payload into dst (length n); checks offsets ascend within each chunk and phases lie in [0, s). */
export function readSparse(
  payload: Uint8Array,
  C: number,
  k: number,
  dst: Float32Array,
  layout: SparseLayout = TOPK_2BIT,
): Result<Float32Array> {
  const { strided, valueBits: v } = layout;
  const n = dst.length,
    nc = Math.ceil(n / C),
    bits = offsetBits(C);
  const at = sparseSections(n, C, k, layout);
  const scales = new DataView(payload.buffer, payload.byteOffset, at.places);
  const offsets = new BitReader(payload, at.places);
  const phases = new DataView(payload.buffer, payload.byteOffset + at.places, strided ? 2 * nc : 0);
  const codes = new BitReader(payload, at.codes);
  dst.fill(0);
  for (let c = 0; c < nc; c++) {
    const start = c * C,
      len = Math.min(C, n - start),
      kc = chunkKept(len, C, k, strided);
    const hi = scales.getFloat32(4 * (v * c + v - 1), true),
      lo = v === 2 ? scales.getFloat32(8 * c, true) : hi;
    if (!(Math.abs(lo) < Infinity && Math.abs(hi) < Infinity))
      return err('E_NON_FINITE', 'frame holds a non-finite value');
    const s = Math.floor(len / kc),
      p = strided ? phases.getUint16(2 * c, true) : 0;
    if (strided && p >= s) return err('E_CORRUPT', `sparse phase ${p} in chunk ${c} is not below its stride ${s}`);
    let prev = -1;
    for (let j = 0; j < kc; j++) {
      const off = strided ? p + j * s : offsets.get(bits);
      if (off <= prev || off >= len)
        return err('E_CORRUPT', `sparse offset ${off} in chunk ${c} is out of order or range`);
      prev = off;
      const code = codes.get(v);
      const a = code & 2 ? hi : lo;
      dst[start + off] = code & 1 ? -a : a;
    }
  }
  return ok(dst);
}
