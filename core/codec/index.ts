// Public API of the pseudo-gradient codec. Frame layout and encodings: see frame.ts.
//
//   island:  const fb = new ErrorFeedback(n); const scratch = new CodecScratch();
//            const r = encodeWithFeedback(delta, fb, { encoding: 'int8', deflate: true }, scratch);
//            if (r.ok) send(r.value.frame);
//   server:  const d = decodeDelta(frame, n);   // never throws; d.ok === false carries a code
//
// Pure TypeScript (no node:, no DOM): runs in browsers, workers and Node.

export {
  type CodecOptions,
  type Encoding,
  type FrameHeader,
  CodecErrorCode,
  CodecScratch,
  DEFAULT_BLOCK_SIZE,
  DEFAULT_TOPK_FRACTION,
  ENCODINGS,
  FRAME_VERSION,
  HEADER_BYTES,
  MAX_COUNT,
  decodeDelta,
  encodeDelta,
  frameBytes,
  frameCrc,
  maxFrameBytes,
  peekHeader,
  plainHeader,
  sealFrame,
  writeHeader,
} from './frame.ts';
export { DOWNLINK_ENCODINGS, type DownlinkEncoding } from './encodings.ts';
export { ErrorFeedback, encodeWithFeedback } from './feedback.ts';
export { selectTopK } from './topk.ts';
export { offsetBits, sparseKept, sparseSections } from './sparse.ts';
export { sparseK } from './header.ts';
export { crc32 } from './crc32.ts';
export { f16ToF32, f32ToF16 } from '../model/f16.ts';
