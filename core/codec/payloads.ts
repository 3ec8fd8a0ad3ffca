// The payload of each encoding, written and read side by side (frame.ts lays out the header and
// picks one). Little-endian on the wire; readers accept any byte alignment, since frames off a
// socket can sit at any offset, and check every value they produce (finite, in range).

import { type Err, type Result, err, ok } from '../result.ts';
import { CodecErrorCode } from './errors.ts';
import { f16Table, f32BitsToF16Bits } from '../model/f16.ts';

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

export function writeF32Payload(src: Float32Array, dst: Uint8Array): void {
  if (LITTLE_ENDIAN_HOST) {
    dst.set(new Uint8Array(src.buffer, src.byteOffset, src.byteLength)); // already the wire layout
    return;
  }
  const dv = new DataView(dst.buffer, dst.byteOffset, dst.byteLength);
  for (let i = 0; i < src.length; i++) dv.setFloat32(4 * i, src[i], true);
}

/** f16 bits of a float32, saturating finite values beyond ±65504 to ±65504 instead of inf. */
function f16Saturating(x: number): number {
  const h = f32BitsToF16Bits(x);
  return (h & 0x7fff) === 0x7c00 && (x & 0x7f800000) !== 0x7f800000 ? (h & 0x8000) | 0x7bff : h;
}

export function writeF16Payload(src: Float32Array, dst: Uint8Array): void {
  const n = src.length;
  const bits = new Int32Array(src.buffer, src.byteOffset, n); // int32 view: uint32 loads above 2^31 can box in V8
  if (LITTLE_ENDIAN_HOST && (dst.byteOffset & 1) === 0) {
    const h = new Uint16Array(dst.buffer, dst.byteOffset, n);
    for (let i = 0; i < n; i++) h[i] = f16Saturating(bits[i]);
    return;
  }
  const dv = new DataView(dst.buffer, dst.byteOffset, dst.byteLength);
  for (let i = 0; i < n; i++) dv.setUint16(2 * i, f16Saturating(bits[i]), true);
}

/** The scale of a non-zero block whose max/qmax rounds to 0 in f32: the smallest subnormal. */
export const MIN_SCALE = 1.401298464324817e-45;

/**
 * Symmetric absmax scale for one block: max|x| / qmax as f32. NaN when the block holds a
 * non-finite value (so decode rejects it). Never rounds a non-zero block to a zero scale: the
 * smallest subnormal keeps |x − q·scale| <= scale / 2.
 */
function blockScale(src: Float32Array, start: number, end: number, qmax: number): number {
  let max = 0;
  for (let i = start; i < end; i++) max = Math.max(max, Math.abs(src[i])); // NaN sticks, inf is max
  if (!(max < Infinity)) return NaN;
  const scale = Math.fround(max / qmax);
  return scale === 0 && max > 0 ? MIN_SCALE : scale;
}

/**
 * Math.round(x) (half up) for |x| < 2^52, but without the data-dependent branch V8's Math.round
 * takes (2-3× faster in the quantization loops): floor(x + 0.5), less one where the addition
 * rounded up past the true result (x = 0.49999999999999994). r − 0.5 is exact, so the test is.
 */
export function roundHalfUp(x: number): number {
  const r = Math.floor(x + 0.5);
  return r - 0.5 > x ? r - 1 : r;
}

/** Writes nb f32 scales then n int8 values: the int8 payload, and the head of the topk one. */
export function writeInt8Blocks(src: Float32Array, n: number, blockSize: number, dst: Uint8Array): void {
  const nb = Math.ceil(n / blockSize);
  const scales = new Float32Array(nb);
  const q = new Int8Array(dst.buffer, dst.byteOffset + 4 * nb, n);
  for (let b = 0; b < nb; b++) {
    const start = b * blockSize;
    const end = Math.min(start + blockSize, n);
    const scale = blockScale(src, start, end, 127);
    scales[b] = scale;
    const inv = scale > 0 ? 1 / scale : 0;
    for (let i = start; i < end; i++) q[i] = roundHalfUp(src[i] * inv);
  }
  writeF32Payload(scales, dst.subarray(0, 4 * nb));
}

/** Writes nb f32 scales then ceil(n/2) bytes of packed nibbles. */
export function writeInt4Blocks(src: Float32Array, n: number, blockSize: number, dst: Uint8Array): void {
  const nb = Math.ceil(n / blockSize);
  const scales = new Float32Array(nb);
  const base = 4 * nb;
  for (let b = 0; b < nb; b++) {
    const start = b * blockSize; // even, because blockSize is even
    const end = Math.min(start + blockSize, n);
    const scale = blockScale(src, start, end, 7);
    scales[b] = scale;
    const inv = scale > 0 ? 1 / scale : 0;
    const pairEnd = start + ((end - start) & ~1);
    let i = start;
    for (; i < pairEnd; i += 2) {
      const lo = roundHalfUp(src[i] * inv);
      const hi = roundHalfUp(src[i + 1] * inv);
      dst[base + (i >>> 1)] = (lo & 0xf) | ((hi & 0xf) << 4);
    }
    if (i < end) dst[base + (i >>> 1)] = roundHalfUp(src[i] * inv) & 0xf; // odd tail, pad nibble 0
  }
  writeF32Payload(scales, dst.subarray(0, base));
}

export const nonFinite = () => err(CodecErrorCode.NON_FINITE, 'frame holds a non-finite value');

export function readF32Payload(payload: Uint8Array, dst: Float32Array): Result<Float32Array> {
  const n = dst.length;
  if (LITTLE_ENDIAN_HOST) {
    new Uint8Array(dst.buffer, dst.byteOffset, 4 * n).set(payload); // works at any alignment
  } else {
    const dv = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
    for (let i = 0; i < n; i++) dst[i] = dv.getFloat32(4 * i, true);
  }
  let probe = 0;
  for (let i = 0; i < n; i++) probe += dst[i] * 0;
  return probe === 0 ? ok(dst) : nonFinite();
}

export function readF16Payload(payload: Uint8Array, dst: Float32Array): Result<Float32Array> {
  const n = dst.length;
  const table = f16Table();
  let probe = 0;
  if (LITTLE_ENDIAN_HOST) {
    // Frames off a socket can sit at any byte offset: realign with one copy when needed.
    const aligned = (payload.byteOffset & 1) === 0 ? payload : payload.slice();
    const h = new Uint16Array(aligned.buffer, aligned.byteOffset, n);
    for (let i = 0; i < n; i++) {
      const v = table[h[i]];
      dst[i] = v;
      probe += v * 0;
    }
  } else {
    const dv = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
    for (let i = 0; i < n; i++) {
      const v = table[dv.getUint16(2 * i, true)];
      dst[i] = v;
      probe += v * 0;
    }
  }
  return probe === 0 ? ok(dst) : nonFinite();
}

/** Copies f32 values out of the payload (any alignment). */
function readF32s(bytes: Uint8Array, n: number): Float32Array {
  const out = new Float32Array(n);
  if (LITTLE_ENDIAN_HOST) {
    new Uint8Array(out.buffer).set(bytes.subarray(0, 4 * n));
  } else {
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0; i < n; i++) out[i] = dv.getFloat32(4 * i, true);
  }
  return out;
}

/**
 * Reads the nb scales at the payload head and checks each: finite, non-negative, and
 * qmax · scale finite in f32 (so every dequantized value is finite). Returns an error or the scales.
 */
function readScales(payload: Uint8Array, nb: number, qmax: number): Float32Array | Err {
  const scales = readF32s(payload, nb);
  for (let b = 0; b < nb; b++) {
    const s = scales[b];
    if (!(Math.fround(s * qmax) < Infinity) || s === -Infinity) return nonFinite();
    if (s < 0) return err(CodecErrorCode.CORRUPT, `negative scale in block ${b}`);
  }
  return scales;
}

export function readInt8Payload(payload: Uint8Array, blockSize: number, dst: Float32Array): Result<Float32Array> {
  const n = dst.length;
  const nb = Math.ceil(n / blockSize);
  const scales = readScales(payload, nb, 127);
  if (!(scales instanceof Float32Array)) return scales;
  const q = new Int8Array(payload.buffer, payload.byteOffset + 4 * nb, n);
  let illegal = false;
  for (let b = 0; b < nb; b++) {
    const s = scales[b];
    const start = b * blockSize;
    const end = Math.min(start + blockSize, n);
    for (let i = start; i < end; i++) {
      const v = q[i];
      if (v === -128) illegal = true;
      dst[i] = v * s;
    }
  }
  return illegal ? err(CodecErrorCode.CORRUPT, 'int8 value -128 is outside [-127, 127]') : ok(dst);
}

export function readInt4Payload(payload: Uint8Array, blockSize: number, dst: Float32Array): Result<Float32Array> {
  const n = dst.length;
  const nb = Math.ceil(n / blockSize);
  const scales = readScales(payload, nb, 7);
  if (!(scales instanceof Float32Array)) return scales;
  const base = 4 * nb;
  let illegal = false; // nibble 0x8 (-8) is outside [-7, 7]
  for (let b = 0; b < nb; b++) {
    const s = scales[b];
    const start = b * blockSize;
    const end = Math.min(start + blockSize, n);
    const pairEnd = start + ((end - start) & ~1);
    let i = start;
    for (; i < pairEnd; i += 2) {
      const byte = payload[base + (i >>> 1)];
      if ((byte & 0xf) === 8 || byte >>> 4 === 8) illegal = true;
      dst[i] = ((byte << 28) >> 28) * s; // sign-extend the low nibble
      dst[i + 1] = ((byte << 24) >> 28) * s; // and the high one
    }
    if (i < end) {
      const byte = payload[base + (i >>> 1)];
      if ((byte & 0xf) === 8 || byte >>> 4 !== 0) illegal = true; // pad nibble must be 0
      dst[i] = ((byte << 28) >> 28) * s;
    }
  }
  return illegal ? err(CodecErrorCode.CORRUPT, 'int4 nibble outside [-7, 7] or nonzero padding') : ok(dst);
}

export function readTopkPayload(
  payload: Uint8Array,
  blockSize: number,
  k: number,
  dst: Float32Array,
): Result<Float32Array> {
  const n = dst.length;
  const nb = Math.ceil(k / blockSize);
  const scales = readScales(payload, nb, 127);
  if (!(scales instanceof Float32Array)) return scales;
  const q = new Int8Array(payload.buffer, payload.byteOffset + 4 * nb, k);
  const end = payload.length;
  let pos = 4 * nb + k;
  let idx = -1;
  dst.fill(0);
  for (let b = 0; b < nb; b++) {
    const s = scales[b];
    const jEnd = Math.min((b + 1) * blockSize, k);
    for (let j = b * blockSize; j < jEnd; j++) {
      // Unsigned LEB128, at most 5 bytes for a u32, shortest form only.
      let gap = 0;
      let mul = 1;
      for (let len = 0; ; len++) {
        if (pos >= end) return err(CodecErrorCode.CORRUPT, 'topk index list is truncated');
        const byte = payload[pos++];
        if (len === 4 && byte > 0x0f) return err(CodecErrorCode.CORRUPT, 'topk index varint overflows u32');
        if (len > 0 && byte === 0) return err(CodecErrorCode.CORRUPT, 'topk index varint is not in shortest form');
        gap += (byte & 0x7f) * mul;
        if (byte < 0x80) break;
        mul *= 128;
      }
      if (gap === 0) return err(CodecErrorCode.CORRUPT, 'topk indices are not strictly increasing');
      idx += gap;
      if (idx >= n) return err(CodecErrorCode.CORRUPT, `topk index ${idx} is out of range for ${n} elements`);
      const v = q[j];
      if (v === -128) return err(CodecErrorCode.CORRUPT, 'int8 value -128 is outside [-127, 127]');
      dst[idx] = v * s;
    }
  }
  if (pos !== end) return err(CodecErrorCode.CORRUPT, `${end - pos} trailing bytes after the topk indices`);
  return ok(dst);
}
