// IEEE 754 binary16 <-> binary32 conversion on bit patterns (the f16 codec, safetensors, and the
// f16-storage twins of core/model/ops-f16.ts).
//
// binary16: 1 sign bit | 5 exponent bits (bias 15) | 10 mantissa bits.
// float32 -> float16 rounds to nearest, ties to even, and keeps inf, NaN (quiet) and subnormals.
// float16 -> float32 is exact, through a 64 Ki-entry table built on first use.

const bitsScratch = new Uint32Array(1);
const floatScratch = new Float32Array(bitsScratch.buffer);

/** Converts float32 bits (as an unsigned 32-bit integer) to float16 bits. */
export function f32BitsToF16Bits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  const mant = x & 0x7fffff;
  if (exp === 0xff) {
    // inf stays inf; NaN keeps its top payload bits and is forced quiet so it never becomes inf.
    return mant === 0 ? sign | 0x7c00 : sign | 0x7e00 | (mant >>> 13);
  }
  const e = exp - 112; // rebias 127 -> 15
  if (e >= 0x1f) return sign | 0x7c00; // too large for any finite half
  if (e <= 0) {
    // Result is a half subnormal (or zero): value = m * 2^-24 with m the 24-bit significand >> shift.
    const shift = 14 - e;
    if (shift > 24) return sign; // below half the smallest subnormal: rounds to (signed) zero
    const m = mant | 0x800000;
    let h = m >>> shift;
    const rem = m & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && (h & 1) !== 0)) h++; // may carry into the smallest normal: correct
    return sign | h;
  }
  let h = sign | (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) !== 0)) h++; // a carry into the exponent is correct, up to inf
  return h;
}

/** Converts a number to float16 bits (through float32 first, like a Float32Array store). */
export function f32ToF16(v: number): number {
  floatScratch[0] = v;
  return f32BitsToF16Bits(bitsScratch[0]);
}

/** Converts float16 bits to float32 bits. */
export function f16BitsToF32Bits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >>> 10) & 0x1f;
  let mant = h & 0x3ff;
  if (exp === 0x1f) return (sign | 0x7f800000 | (mant << 13)) >>> 0; // inf / NaN
  if (exp !== 0) return (sign | ((exp + 112) << 23) | (mant << 13)) >>> 0;
  if (mant === 0) return sign >>> 0;
  // Subnormal half: normalise, every half subnormal is a float32 normal.
  let e = 113;
  while ((mant & 0x400) === 0) {
    mant <<= 1;
    e--;
  }
  return (sign | (e << 23) | ((mant & 0x3ff) << 13)) >>> 0;
}

let decodeTable: Float32Array | null = null;

/** The float32 value of every half bit pattern (256 KiB, built once). */
export function f16Table(): Float32Array {
  if (decodeTable === null) {
    const bits = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) bits[h] = f16BitsToF32Bits(h);
    decodeTable = new Float32Array(bits.buffer);
  }
  return decodeTable;
}

/** Converts float16 bits to a number. */
export function f16ToF32(h: number): number {
  return f16Table()[h & 0xffff];
}

/** Encodes src into dst as float16 bits; dst.length must be >= src.length. */
export function encodeF16Array(src: Float32Array, dst: Uint16Array): void {
  const bits = new Int32Array(src.buffer, src.byteOffset, src.length);
  const n = src.length;
  for (let i = 0; i < n; i++) dst[i] = f32BitsToF16Bits(bits[i]);
}

/** Decodes float16 bits from src into dst; dst.length must be >= src.length. */
export function decodeF16Array(src: Uint16Array, dst: Float32Array): void {
  const table = f16Table();
  const n = src.length;
  for (let i = 0; i < n; i++) dst[i] = table[src[i]];
}
