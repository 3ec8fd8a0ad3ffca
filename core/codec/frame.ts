// The pseudo-gradient frame: a fixed 32-byte header, then the (optionally deflated) payload.
//
// Header, little-endian:
//   off size field
//    0   4   magic 'ATLD'
//    4   1   format version (1)
//    5   1   encoding id: 0 f32, 1 f16, 2 int8, 3 int4, 4 topk, 5 sparse
//    6   1   flags: bit0 = payload deflated (only set when deflate made it strictly smaller),
//               sparse only: bit1 = strided (each chunk's entries at a stride from a phase, no
//               offsets), bit2 = 1-bit values (sign only)
//    7   1   reserved, 0
//    8   4   element count n (the model's parameter count)
//   12   4   block size B (int8/int4/topk; the chunk size for sparse; 0 for f32/f16)
//   16   4   k, entries kept (topk; per chunk for sparse; 0 otherwise)
//   20   4   stored payload bytes (after deflate)
//   24   4   raw payload bytes (before deflate)
//   28   4   CRC-32 (IEEE) of header bytes 0..27 followed by the stored payload
// The CRC covers the header fields too, so a flipped count, block size or k cannot decode into
// plausible numbers laid out wrongly.
//
// Raw payloads (nb = ceil(n / B) scale blocks; scales first, so they sit 4-byte aligned):
//   f32   n × f32
//   f16   n × binary16 bits
//   int8  nb × f32 scale, then n × int8 in [-127, 127];   x ≈ q · scale, scale = max|x| / 127
//   int4  nb × f32 scale, then ceil(n/2) bytes, element i in byte i>>1, low nibble first,
//         two's-complement nibbles in [-7, 7]; x ≈ q · scale, scale = max|x| / 7; pad nibble 0
//   topk  ceil(k/B) × f32 scale, k × int8 (the kept values, blockwise as int8, ascending index
//         order), then k unsigned LEB128 varints: gap_j = idx_j − idx_{j−1} with idx_{−1} = −1,
//         so every gap is >= 1 and indices are strictly increasing by construction.
//   sparse chunk-wise top-k or strided, 2-bit or 1-bit values: see sparse.ts.
//
// f16 saturates finite values beyond ±65504 to ±65504, so finite input always decodes.
// Non-finite input: f32 and f16 carry NaN/inf into the frame as they are; int8/int4/topk write a
// NaN scale for any block holding one. Either way decodeDelta rejects the frame with E_NON_FINITE,
// so a diverged island is caught at the server, never averaged in.

import { deflateSync, inflateSync } from 'fflate';
import { type Result, err } from '../result.ts';
import { CodecErrorCode } from './errors.ts';
import {
  readF16Payload,
  readF32Payload,
  readInt4Payload,
  readInt8Payload,
  readTopkPayload,
  writeF16Payload,
  writeF32Payload,
  writeInt4Blocks,
  writeInt8Blocks,
} from './payloads.ts';
import { type SparseLayout, readSparse, writeSparse } from './sparse.ts';
import { TOPK_HIST_SIZE, selectTopK } from './topk.ts';

import { ENCODINGS, type Encoding } from './encodings.ts';
import {
  type CodecOptions,
  HEADER_BYTES,
  MAX_COUNT,
  DEFAULT_BLOCK_SIZE,
  DEFAULT_TOPK_FRACTION,
  MIN_BLOCK,
  MAX_BLOCK,
  FLAG_DEFLATED,
  FLAG_STRIDED,
  FLAG_ONE_BIT,
  DEFLATE_LEVEL,
  ENC_F32,
  ENC_F16,
  ENC_INT8,
  ENC_INT4,
  ENC_TOPK,
  ENC_SPARSE,
  writeCrc,
  writeHeader,
  sparseK,
  topkCount,
  isLegalBlockSize,
  varintLength,
  sparseLayout,
  rawPayloadLength,
  frameCrc,
  peekHeader,
} from './header.ts';

export { ENCODINGS, type Encoding };
export {
  type CodecOptions,
  type FrameHeader,
  CodecErrorCode,
  DEFAULT_BLOCK_SIZE,
  DEFAULT_TOPK_FRACTION,
  FRAME_VERSION,
  HEADER_BYTES,
  MAX_COUNT,
  frameCrc,
  peekHeader,
  sealFrame,
  writeHeader,
} from './header.ts';

/** Reusable buffers for encodeDelta / encodeWithFeedback; they grow on demand and are kept. */
export class CodecScratch {
  raw = new Uint8Array(0);
  hist = new Uint32Array(0);
  topkIndices = new Uint32Array(0);
  topkValues = new Float32Array(0);
  decoded = new Float32Array(0);

  rawBytes(len: number): Uint8Array {
    if (this.raw.length < len) this.raw = new Uint8Array(len);
    return this.raw.subarray(0, len);
  }
  histogram(): Uint32Array {
    if (this.hist.length < TOPK_HIST_SIZE) this.hist = new Uint32Array(TOPK_HIST_SIZE);
    return this.hist;
  }
  topk(k: number): { indices: Uint32Array; values: Float32Array } {
    if (this.topkIndices.length < k) {
      this.topkIndices = new Uint32Array(k);
      this.topkValues = new Float32Array(k);
    }
    return { indices: this.topkIndices.subarray(0, k), values: this.topkValues.subarray(0, k) };
  }
  /** A Float32Array of exactly n elements (a view when the kept buffer is larger). */
  decodeBuffer(n: number): Float32Array {
    if (this.decoded.length < n) this.decoded = new Float32Array(n);
    return this.decoded.length === n ? this.decoded : this.decoded.subarray(0, n);
  }
}

/**
 * The largest legal frame for `count` elements over every encoding and option: header plus the
 * bigger of the f32 payload and the worst topk payload (block size 8, k = n, all gaps 1). Deflate
 * never enlarges a frame. Use it to size socket.io's maxHttpBufferSize.
 */
export function maxFrameBytes(count: number): number {
  return HEADER_BYTES + Math.max(4 * count, 4 * Math.ceil(count / MIN_BLOCK) + 2 * count);
}

/**
 * Bytes of an undeflated frame for `count` elements under `opts` (what an island sends per round).
 * Exact for f32/f16/int8/int4; for topk the varint gaps are counted as if the kept entries were
 * evenly spaced (the real frame differs by the gaps' spread).
 */
export function frameBytes(count: number, opts: CodecOptions): number {
  const enc = ENCODINGS.indexOf(opts.encoding);
  const blockSize = enc >= ENC_INT8 ? (opts.blockSize ?? DEFAULT_BLOCK_SIZE) : 0;
  const k =
    enc === ENC_TOPK
      ? topkCount(count, opts.topkFraction ?? DEFAULT_TOPK_FRACTION)
      : enc === ENC_SPARSE
        ? sparseK(blockSize, opts.topkFraction)
        : 0;
  return (
    HEADER_BYTES +
    rawPayloadLength(enc, count, blockSize, k, k * varintLength(Math.round(count / Math.max(1, k))), sparseLayout(opts))
  );
}

/** The header flags a frame's layout sets (sparse: strided, 1-bit values). */
function layoutFlags(enc: number, layout: SparseLayout): number {
  return enc !== ENC_SPARSE ? 0 : (layout.strided ? FLAG_STRIDED : 0) | (layout.valueBits === 1 ? FLAG_ONE_BIT : 0);
}

/**
 * The header of an undeflated frame of `count` elements under `opts`, for a writer that fills the payload itself
 * (the outer-step pool's fragments). Not topk: its k and length depend on the values.
 */
export function plainHeader(count: number, opts: CodecOptions): Parameters<typeof writeHeader>[1] {
  const enc = ENCODINGS.indexOf(opts.encoding);
  if (enc < 0 || enc === ENC_TOPK) throw new RangeError(`no plain header for ${String(opts.encoding)}`);
  const blockSize = enc >= ENC_INT8 ? (opts.blockSize ?? DEFAULT_BLOCK_SIZE) : 0;
  const k = enc === ENC_SPARSE ? sparseK(blockSize, opts.topkFraction) : 0;
  const layout = sparseLayout(opts);
  const raw = rawPayloadLength(enc, count, blockSize, k, 0, layout);
  return {
    encoding: opts.encoding,
    flags: layoutFlags(enc, layout),
    count,
    blockSize,
    k,
    storedBytes: raw,
    rawBytes: raw,
  };
}

// ---------------------------------------------------------------------------------------------
// Encode

/**
 * Encodes a pseudo-gradient into a frame. Never fails on values (see the note on non-finite input
 * above); throws RangeError only on programmer errors: invalid options or count > MAX_COUNT.
 * The returned frame is a fresh buffer owned by the caller.
 */
export function encodeDelta(delta: Float32Array, opts: CodecOptions, scratch?: CodecScratch): Uint8Array {
  const n = delta.length;
  const enc = ENCODINGS.indexOf(opts.encoding);
  if (enc < 0) throw new RangeError(`unknown encoding ${String(opts.encoding)}`);
  if (n > MAX_COUNT) throw new RangeError(`delta of ${n} elements exceeds the frame limit ${MAX_COUNT}`);
  const quantized = enc >= ENC_INT8;
  const blockSize = quantized ? (opts.blockSize ?? DEFAULT_BLOCK_SIZE) : 0;
  if (quantized && !isLegalBlockSize(blockSize)) {
    throw new RangeError(`blockSize must be an even integer in [${MIN_BLOCK}, ${MAX_BLOCK}], got ${blockSize}`);
  }

  // topk chooses its entries first: the payload size depends on the index gaps.
  let k = 0;
  let indices: Uint32Array | null = null;
  let values: Float32Array | null = null;
  let varintBytes = 0;
  if (enc === ENC_TOPK) {
    const fraction = opts.topkFraction ?? DEFAULT_TOPK_FRACTION;
    if (!(fraction > 0 && fraction <= 1)) throw new RangeError(`topkFraction must be in (0, 1], got ${fraction}`);
    k = topkCount(n, fraction);
    const s = scratch ?? new CodecScratch();
    ({ indices, values } = s.topk(k));
    selectTopK(delta, k, s.histogram(), indices);
    let prev = -1;
    for (let j = 0; j < k; j++) {
      const i = indices[j];
      values[j] = delta[i];
      varintBytes += varintLength(i - prev);
      prev = i;
    }
  }

  const layout = sparseLayout(opts);
  if (enc === ENC_SPARSE) k = sparseK(blockSize, opts.topkFraction);
  const rawLen = rawPayloadLength(enc, n, blockSize, k, varintBytes, layout);
  const deflate = opts.deflate === true && rawLen > 0;
  // Without deflate the payload is written straight into the frame.
  const frameNoDeflate = deflate ? null : new Uint8Array(HEADER_BYTES + rawLen);
  const raw = frameNoDeflate
    ? frameNoDeflate.subarray(HEADER_BYTES)
    : scratch
      ? scratch.rawBytes(rawLen)
      : new Uint8Array(rawLen);

  switch (enc) {
    case ENC_F32:
      writeF32Payload(delta, raw);
      break;
    case ENC_F16:
      writeF16Payload(delta, raw);
      break;
    case ENC_INT8:
      writeInt8Blocks(delta, n, blockSize, raw);
      break;
    case ENC_INT4:
      writeInt4Blocks(delta, n, blockSize, raw);
      break;
    case ENC_SPARSE:
      writeSparse(delta, blockSize, k, raw, layout);
      break;
    case ENC_TOPK: {
      const vals = values as Float32Array;
      const idx = indices as Uint32Array;
      writeInt8Blocks(vals, k, blockSize, raw);
      let pos = 4 * Math.ceil(k / blockSize) + k;
      let prev = -1;
      for (let j = 0; j < k; j++) {
        let gap = idx[j] - prev;
        prev = idx[j];
        while (gap >= 0x80) {
          raw[pos++] = (gap & 0x7f) | 0x80;
          gap >>>= 7;
        }
        raw[pos++] = gap;
      }
      break;
    }
  }

  let frame: Uint8Array;
  let flags = layoutFlags(enc, layout);
  if (frameNoDeflate) {
    frame = frameNoDeflate;
  } else {
    const z = deflateSync(raw, { level: DEFLATE_LEVEL });
    const stored = z.length < rawLen ? z : raw;
    if (stored === z) flags |= FLAG_DEFLATED;
    frame = new Uint8Array(HEADER_BYTES + stored.length);
    frame.set(stored, HEADER_BYTES);
  }

  writeHeader(frame, {
    encoding: ENCODINGS[enc],
    flags,
    count: n,
    blockSize,
    k,
    storedBytes: frame.length - HEADER_BYTES,
    rawBytes: rawLen,
  });
  writeCrc(frame);
  return frame;
}

// ---------------------------------------------------------------------------------------------
// Decode

/**
 * Decodes and fully validates a frame that must hold exactly `expectedCount` elements. Never
 * throws. Writes into `out` when given (its length must be expectedCount); on error the contents
 * of `out` are unspecified. On success every element is finite.
 */
export function decodeDelta(frame: Uint8Array, expectedCount: number, out?: Float32Array): Result<Float32Array> {
  try {
    return decodeUnchecked(frame, expectedCount, out);
  } catch (e) {
    return err(CodecErrorCode.CORRUPT, `frame could not be decoded: ${e instanceof Error ? e.message : String(e)}`);
  }
}

function decodeUnchecked(frame: Uint8Array, expectedCount: number, out?: Float32Array): Result<Float32Array> {
  const parsed = peekHeader(frame);
  if (!parsed.ok) return parsed;
  const h = parsed.value;
  const n = h.count;
  if (n !== expectedCount)
    return err(CodecErrorCode.WRONG_SIZE, `frame holds ${n} elements, expected ${expectedCount}`);
  if (out !== undefined && out.length !== n) {
    return err(CodecErrorCode.WRONG_SIZE, `out buffer holds ${out.length} elements, expected ${n}`);
  }
  const total = HEADER_BYTES + h.payloadBytes;
  if (frame.length < total)
    return err(CodecErrorCode.TRUNCATED, `frame of ${frame.length} bytes, header says ${total}`);
  if (frame.length > total)
    return err(CodecErrorCode.BAD_HEADER, `${frame.length - total} trailing bytes after the payload`);
  if (frameCrc(frame, h.payloadBytes) !== h.crc) return err(CodecErrorCode.CRC, 'CRC mismatch');

  let payload = frame.subarray(HEADER_BYTES, total);
  if (h.deflated) {
    // One spare byte detects a stream that inflates past the declared length; the bound also
    // stops inflate bombs, since rawPayloadBytes was validated against count.
    const inflated = inflateSync(payload, { out: new Uint8Array(h.rawPayloadBytes + 1) });
    if (inflated.length !== h.rawPayloadBytes) {
      return err(
        CodecErrorCode.CORRUPT,
        `payload inflated to ${inflated.length} bytes, header says ${h.rawPayloadBytes}`,
      );
    }
    payload = inflated;
  }
  const dst = out ?? new Float32Array(n);
  const enc = ENCODINGS.indexOf(h.encoding);
  switch (enc) {
    case ENC_F32:
      return readF32Payload(payload, dst);
    case ENC_F16:
      return readF16Payload(payload, dst);
    case ENC_INT8:
      return readInt8Payload(payload, h.blockSize, dst);
    case ENC_INT4:
      return readInt4Payload(payload, h.blockSize, dst);
    case ENC_SPARSE:
      return readSparse(payload, h.blockSize, h.k, dst, { strided: h.strided, valueBits: h.valueBits === 1 ? 1 : 2 });
    default:
      return readTopkPayload(payload, h.blockSize, h.k, dst);
  }
}
