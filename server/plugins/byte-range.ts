// One HTTP Range, as the shard route (data.ts) and the model route (model.ts) read it: `bytes=S-E`
// or `bytes=S-`. As RFC 9110 says: an end past the last byte is the last byte; a start past it is 416.
// Any other form (several ranges, a suffix `bytes=-N`) is 400: no client of ours sends one.

import type { FastifyReply } from 'fastify';
import { Type } from '@sinclair/typebox';

/** The Range header in a route's schema. */
export const RangeHeader = Type.Optional(Type.String({ maxLength: 64 }));
const RANGE = /^bytes=(\d{1,15})-(\d{0,15})$/;

/**
 * The inclusive byte span [start, end] a `Range` asks of `size` bytes; or, having answered the reply
 * (400 E_BAD_REQUEST; 416 E_RANGE_NOT_SATISFIABLE, its Content-Range naming the size), null.
 * `what` names the resource in the message.
 */
export function byteRange(
  h: string,
  size: number,
  what: string,
  reply: FastifyReply,
): { start: number; end: number } | null {
  const m = RANGE.exec(h);
  if (!m) {
    reply.code(400).send({
      error: { code: 'E_BAD_REQUEST', message: `Range '${h}': one range of bytes, 'bytes=START-END', expected` },
    });
    return null;
  }
  const start = Number(m[1]);
  const end = m[2] === '' ? size - 1 : Math.min(size - 1, Number(m[2]));
  if (start >= size || end < start) {
    reply
      .code(416)
      .header('content-range', `bytes */${size}`)
      .send({
        error: { code: 'E_RANGE_NOT_SATISFIABLE', message: `Range '${h}' is not within ${what} of ${size} bytes` },
      });
    return null;
  }
  reply.code(206).header('content-range', `bytes ${start}-${end}/${size}`);
  return { start, end };
}
