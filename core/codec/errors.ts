// Error codes of the codec: every decode failure is one of these, never a throw.

export const CodecErrorCode = {
  TRUNCATED: 'E_TRUNCATED',
  BAD_MAGIC: 'E_BAD_MAGIC',
  VERSION: 'E_VERSION',
  /** unknown encoding, flags, reserved byte, block size, k or lengths inconsistent with count */
  BAD_HEADER: 'E_BAD_HEADER',
  WRONG_SIZE: 'E_WRONG_SIZE',
  CRC: 'E_CRC',
  /** inflate failure, illegal quantized values, bad topk indices, trailing bytes */
  CORRUPT: 'E_CORRUPT',
  NON_FINITE: 'E_NON_FINITE',
} as const;
export type CodecErrorCode = (typeof CodecErrorCode)[keyof typeof CodecErrorCode];
