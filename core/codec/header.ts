// The frame's 32-byte header (layout: frame.ts): its constants, options and fields, writing it and its
// CRC, sealing a frame (deflate where smaller, then the CRC), and parsing and validating it (peekHeader).

import { deflateSync } from 'fflate';
import { type Result, err, ok } from '../result.ts';
import { crc32 } from './crc32.ts';
import { CodecErrorCode } from './errors.ts';
import { type SparseLayout, sparsePayloadBytes } from './sparse.ts';

import { ENCODINGS, type Encoding } from './encodings.ts';

export interface CodecOptions {
  encoding: Encoding;
  /** int8/int4/topk values: elements per scale block. Even, 8..65536; default 64. */
  blockSize?: number;
  /**
   * topk: fraction of entries kept, in (0, 1]; k = max(1, round(fraction · n)). sparse: per chunk, k = max(1,
   * round(fraction · blockSize)). Default 0.01.
   */
  topkFraction?: number;
  /**
   * encodeWithFeedback: the residual decays by this factor each round before Δ is added (SparseLoCo's β). Default 1.
   */
  feedbackDecay?: number;
  /**
   * sparse: keep each chunk's k entries at a stride from the phase of most energy instead of its top k (no offsets
   * sent).
   */
  strided?: boolean;
  /**
   * sparse: bits per kept value, 2 (default: sign and upper/lower half) or 1 (sign, times the chunk's mean magnitude).
   */
  valueBits?: 1 | 2;
  /** Deflate the payload (fflate, raw DEFLATE). Kept only when it makes the payload smaller. */
  deflate?: boolean;
}

export interface FrameHeader {
  version: number;
  encoding: Encoding;
  deflated: boolean;
  /** sparse: strided selection (flag bit1). */
  strided: boolean;
  /** sparse: bits per value, 1 (flag bit2) or 2; 0 for other encodings. */
  valueBits: number;
  count: number;
  blockSize: number;
  k: number;
  payloadBytes: number;
  rawPayloadBytes: number;
  crc: number;
}

/** Error codes returned by decodeDelta / peekHeader. */
export { CodecErrorCode };

export const FRAME_VERSION = 1;
export const HEADER_BYTES = 32;
/** Largest count whose f32 payload length still fits the u32 length fields. */
export const MAX_COUNT = 0x3fffffff;
export const DEFAULT_BLOCK_SIZE = 64;
export const DEFAULT_TOPK_FRACTION = 0.01;
export const MIN_BLOCK = 8;
export const MAX_BLOCK = 65536;
export const MAGIC = [0x41, 0x54, 0x4c, 0x44]; // 'ATLD'
export const FLAG_DEFLATED = 1;
export const FLAG_STRIDED = 2;
export const FLAG_ONE_BIT = 4;
// On quantized Gaussian payloads the gain is entropy coding, not string matching: level 1 gave the
// same sizes as the default 6 (int8 −4.4%, f32 −5.8%) and was no slower.
export const DEFLATE_LEVEL = 1;
export const ENC_F32 = 0;
export const ENC_F16 = 1;
export const ENC_INT8 = 2;
export const ENC_INT4 = 3;
export const ENC_TOPK = 4;
export const ENC_SPARSE = 5;

/** Writes a frame's CRC (bytes 28..31), its header and payload in place. */
export function writeCrc(frame: Uint8Array): void {
  new DataView(frame.buffer, frame.byteOffset, HEADER_BYTES).setUint32(
    28,
    frameCrc(frame, frame.length - HEADER_BYTES),
    true,
  );
}

/**
 * Seals a frame whose header (but the CRC) and raw payload are written, as encodeDelta would:
 * with `deflate`, a new frame with the payload deflated where that makes it strictly smaller;
 * then the CRC. The outer-step workers seal the downlink frame they quantized with it.
 */
export function sealFrame(frame: Uint8Array, deflate: boolean): Uint8Array {
  if (deflate && frame.length > HEADER_BYTES) {
    const z = deflateSync(frame.subarray(HEADER_BYTES), { level: DEFLATE_LEVEL });
    if (z.length < frame.length - HEADER_BYTES) {
      const out = new Uint8Array(HEADER_BYTES + z.length);
      out.set(frame.subarray(0, HEADER_BYTES));
      out.set(z, HEADER_BYTES);
      out[6] |= FLAG_DEFLATED;
      new DataView(out.buffer).setUint32(20, z.length, true);
      frame = out;
    }
  }
  writeCrc(frame);
  return frame;
}

/** Writes a frame's 32-byte header but its CRC (bytes 28..31: `frameCrc` once the payload is in place). */
export function writeHeader(
  frame: Uint8Array,
  h: {
    encoding: Encoding;
    flags: number;
    count: number;
    blockSize: number;
    k: number;
    storedBytes: number;
    rawBytes: number;
  },
): void {
  const dv = new DataView(frame.buffer, frame.byteOffset, HEADER_BYTES);
  for (let i = 0; i < 4; i++) frame[i] = MAGIC[i];
  frame[4] = FRAME_VERSION;
  frame[5] = ENCODINGS.indexOf(h.encoding);
  frame[6] = h.flags;
  frame[7] = 0;
  dv.setUint32(8, h.count, true);
  dv.setUint32(12, h.blockSize, true);
  dv.setUint32(16, h.k, true);
  dv.setUint32(20, h.storedBytes, true);
  dv.setUint32(24, h.rawBytes, true);
}

/** Entries a sparse frame keeps per chunk of C. */
export function sparseK(C: number, fraction = DEFAULT_TOPK_FRACTION): number {
  if (!(fraction > 0 && fraction <= 1)) throw new RangeError(`topkFraction must be in (0, 1], got ${fraction}`);
  return Math.min(C, Math.max(1, Math.round(fraction * C)));
}

/** Entries a topk frame keeps: max(1, round(fraction · n)), at most n. */
export function topkCount(n: number, fraction: number): number {
  return n === 0 ? 0 : Math.min(n, Math.max(1, Math.round(fraction * n)));
}

export function isLegalBlockSize(b: number): boolean {
  return Number.isInteger(b) && b >= MIN_BLOCK && b <= MAX_BLOCK && b % 2 === 0;
}

export function varintLength(v: number): number {
  return v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x200000 ? 3 : v < 0x10000000 ? 4 : 5;
}

export function sparseLayout(opts: CodecOptions): SparseLayout {
  if (opts.valueBits !== undefined && opts.valueBits !== 1 && opts.valueBits !== 2)
    throw new RangeError(`valueBits must be 1 or 2, got ${opts.valueBits}`);
  return { strided: opts.strided === true, valueBits: opts.valueBits ?? 2 };
}

export function rawPayloadLength(
  enc: number,
  n: number,
  blockSize: number,
  k: number,
  varintBytes: number,
  layout: SparseLayout,
): number {
  switch (enc) {
    case ENC_F32:
      return 4 * n;
    case ENC_F16:
      return 2 * n;
    case ENC_INT8:
      return 4 * Math.ceil(n / blockSize) + n;
    case ENC_INT4:
      return 4 * Math.ceil(n / blockSize) + Math.ceil(n / 2);
    case ENC_SPARSE:
      return sparsePayloadBytes(n, blockSize, k, layout);
    default:
      return 4 * Math.ceil(k / blockSize) + k + varintBytes;
  }
}

/** CRC over header bytes 0..27, then the stored payload. */
export function frameCrc(frame: Uint8Array, payloadBytes: number): number {
  const head = crc32(frame.subarray(0, 28));
  return crc32(frame.subarray(HEADER_BYTES, HEADER_BYTES + payloadBytes), head);
}

// ---------------------------------------------------------------------------------------------
// Decode

/** Parses and validates the 32-byte header only (no CRC, no payload). */
export function peekHeader(frame: Uint8Array): Result<FrameHeader> {
  if (frame.length < HEADER_BYTES) {
    return err(
      CodecErrorCode.TRUNCATED,
      `frame of ${frame.length} bytes is shorter than the ${HEADER_BYTES}-byte header`,
    );
  }
  for (let i = 0; i < 4; i++) {
    if (frame[i] !== MAGIC[i]) return err(CodecErrorCode.BAD_MAGIC, 'frame does not start with ATLD');
  }
  if (frame[4] !== FRAME_VERSION) {
    return err(CodecErrorCode.VERSION, `frame version ${frame[4]}, this build reads ${FRAME_VERSION}`);
  }
  const enc = frame[5];
  if (enc >= ENCODINGS.length) return err(CodecErrorCode.BAD_HEADER, `unknown encoding id ${enc}`);
  const flags = frame[6];
  const known = enc === ENC_SPARSE ? FLAG_DEFLATED | FLAG_STRIDED | FLAG_ONE_BIT : FLAG_DEFLATED;
  if ((flags & ~known) !== 0) return err(CodecErrorCode.BAD_HEADER, `unknown flags 0x${flags.toString(16)}`);
  if (frame[7] !== 0) return err(CodecErrorCode.BAD_HEADER, 'reserved byte is not 0');
  const dv = new DataView(frame.buffer, frame.byteOffset, HEADER_BYTES);
  const count = dv.getUint32(8, true);
  const blockSize = dv.getUint32(12, true);
  const k = dv.getUint32(16, true);
  const payloadBytes = dv.getUint32(20, true);
  const rawPayloadBytes = dv.getUint32(24, true);
  const crc = dv.getUint32(28, true);
  const deflated = (flags & FLAG_DEFLATED) !== 0;
  const layout: SparseLayout = { strided: (flags & FLAG_STRIDED) !== 0, valueBits: flags & FLAG_ONE_BIT ? 1 : 2 };

  if (count > MAX_COUNT) return err(CodecErrorCode.BAD_HEADER, `count ${count} exceeds ${MAX_COUNT}`);
  const quantized = enc >= ENC_INT8;
  if (quantized ? !isLegalBlockSize(blockSize) : blockSize !== 0) {
    return err(CodecErrorCode.BAD_HEADER, `illegal block size ${blockSize} for ${ENCODINGS[enc]}`);
  }
  if (enc === ENC_TOPK ? k > count : enc === ENC_SPARSE ? k < 1 || k > blockSize : k !== 0) {
    return err(CodecErrorCode.BAD_HEADER, `illegal k ${k} for ${ENCODINGS[enc]} with count ${count}`);
  }
  if (enc === ENC_TOPK) {
    // k int8 values, then k varints of 1..5 bytes whose gaps sum to at most count (a varint is
    // never longer than its value, so the index bytes are also <= count).
    const fixed = 4 * Math.ceil(k / blockSize) + k;
    if (rawPayloadBytes < fixed + k || rawPayloadBytes > fixed + Math.min(5 * k, count)) {
      return err(CodecErrorCode.BAD_HEADER, `topk raw payload of ${rawPayloadBytes} bytes is impossible for k=${k}`);
    }
  } else {
    const expected = rawPayloadLength(enc, count, blockSize, k, 0, layout);
    if (rawPayloadBytes !== expected) {
      return err(
        CodecErrorCode.BAD_HEADER,
        `raw payload of ${rawPayloadBytes} bytes, ${ENCODINGS[enc]} × ${count} needs ${expected}`,
      );
    }
  }
  if (deflated ? payloadBytes >= rawPayloadBytes : payloadBytes !== rawPayloadBytes) {
    return err(
      CodecErrorCode.BAD_HEADER,
      `stored payload of ${payloadBytes} bytes is inconsistent with raw ${rawPayloadBytes}`,
    );
  }
  return ok({
    version: FRAME_VERSION,
    encoding: ENCODINGS[enc],
    deflated,
    strided: layout.strided,
    valueBits: enc === ENC_SPARSE ? layout.valueBits : 0,
    count,
    blockSize,
    k,
    payloadBytes,
    rawPayloadBytes,
    crc,
  });
}
