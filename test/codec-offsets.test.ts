// The codec never depends on where a frame's bytes sit in memory: frames off a socket arrive at
// any byte offset. Property: for every encoding, size (empty payloads included), deflate flag and
// byte offset 0..7, the CRC and the decode of a frame (or of a corrupted frame) are the same.

import { describe, expect, it } from 'vitest';
import { ENCODINGS, crc32, decodeDelta, encodeDelta } from '../core/codec/index.ts';
import { mulberry32 } from '../core/random.ts';

/** Bitwise CRC-32 (IEEE), the definition the table-driven one must match. */
function crcReference(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

/** `bytes` copied into a fresh buffer at byte offset `off`. */
function at(bytes: Uint8Array, off: number): Uint8Array {
  const buf = new Uint8Array(bytes.length + off + 3);
  buf.set(bytes, off);
  return buf.subarray(off, off + bytes.length);
}

const outcome = (frame: Uint8Array, n: number) => {
  const r = decodeDelta(frame, n);
  return r.ok ? Array.from(r.value) : r.error.code;
};

describe('codec at any byte offset', () => {
  it('crc32 matches the bitwise definition at offsets 0..7 for lengths 0..40', () => {
    const rand = mulberry32(7);
    for (let len = 0; len <= 40; len++) {
      const bytes = new Uint8Array(len).map(() => Math.floor(rand() * 256));
      const want = crcReference(bytes);
      for (let off = 0; off < 8; off++) expect(crc32(at(bytes, off)), `len ${len} off ${off}`).toBe(want);
    }
    expect(crc32(new TextEncoder().encode('123456789'))).toBe(0xcbf43926); // the standard check value
  });

  it('every encoding decodes alike at offsets 0..7, empty payloads and corrupted frames included', () => {
    const rand = mulberry32(11);
    for (const encoding of ENCODINGS) {
      for (const n of [0, 1, 3, 8, 17, 130]) {
        for (const deflate of [false, true]) {
          const delta = new Float32Array(n).map(() => rand() * 2 - 1);
          const frame = encodeDelta(delta, { encoding, blockSize: 8, topkFraction: 0.3, deflate });
          const flipped = frame.slice();
          flipped[Math.floor(rand() * frame.length)] ^= 1 << Math.floor(rand() * 8);
          const want = { ok: outcome(frame, n), bad: outcome(flipped, n) };
          expect(Array.isArray(want.ok), `${encoding} n=${n}`).toBe(true);
          for (let off = 0; off < 8; off++) {
            expect(outcome(at(frame, off), n), `${encoding} n=${n} deflate=${deflate} off=${off}`).toEqual(want.ok);
            expect(outcome(at(flipped, off), n), `${encoding} n=${n} flipped off=${off}`).toEqual(want.bad);
          }
        }
      }
    }
  });
});
