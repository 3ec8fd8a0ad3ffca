// The codec's encodings: the one list every schema, flag, check and page derives from. Its own
// module (no payload code, no deflate) so that the dashboard can import it without the codec.

export type Encoding = 'f32' | 'f16' | 'int8' | 'int4' | 'topk' | 'sparse';

/** Wire ids: the index of each encoding in this list. Append only. */
export const ENCODINGS: readonly Encoding[] = ['f32', 'f16', 'int8', 'int4', 'topk', 'sparse'];

/**
 * The encodings of the server's update frames: every replica applies the same decoded bits, and the server's error
 * feedback keeps what a frame did not carry (sparse: the uplink's chunk code).
 */
export type DownlinkEncoding = Extract<Encoding, 'f32' | 'int8' | 'int4' | 'sparse'>;
export const DOWNLINK_ENCODINGS: readonly DownlinkEncoding[] = ['int8', 'int4', 'f32', 'sparse'];
