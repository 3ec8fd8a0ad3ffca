// CRC-32 (IEEE 802.3: reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF), the one in
// zlib, PNG and zip. Slice-by-8: eight 256-entry tables let the loop consume 8 bytes per step.

const TABLES = buildTables();

function buildTables(): Int32Array {
  const t = new Int32Array(8 * 256); // signed view of the u32 table: uint32 loads above 2^31 can box in V8
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let j = 0; j < 8; j++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[i] = c;
  }
  // Table s maps a byte to its CRC contribution when followed by s zero bytes.
  for (let s = 1; s < 8; s++) {
    for (let i = 0; i < 256; i++) {
      const prev = t[(s - 1) * 256 + i];
      t[s * 256 + i] = (prev >>> 8) ^ t[prev & 0xff];
    }
  }
  return t;
}

const EMPTY = new Int32Array(0);
const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/**
 * CRC-32 of `bytes`. Pass a previous result as `crc` to continue over a second buffer:
 * crc32(b, crc32(a)) === crc32(a ++ b). Returns an unsigned 32-bit integer.
 */
export function crc32(bytes: Uint8Array, crc = 0): number {
  const t = TABLES;
  const n = bytes.length;
  let c = ~crc;
  let i = 0;
  if (LITTLE_ENDIAN_HOST) {
    // Bytes up to a 4-byte boundary, then two u32 loads per 8 bytes (twice as fast as byte loads).
    while (i < n && ((bytes.byteOffset + i) & 3) !== 0) c = t[(c ^ bytes[i++]) & 0xff] ^ (c >>> 8);
    const pairs = (n - i) >>> 3;
    // no view when there is nothing to read: the offset may still be unaligned (short or empty input)
    const w = pairs > 0 ? new Int32Array(bytes.buffer, bytes.byteOffset + i, 2 * pairs) : EMPTY;
    for (let j = 0; j < 2 * pairs; j += 2) {
      const lo = c ^ w[j];
      const hi = w[j + 1];
      c =
        t[1792 + (lo & 0xff)] ^
        t[1536 + ((lo >>> 8) & 0xff)] ^
        t[1280 + ((lo >>> 16) & 0xff)] ^
        t[1024 + (lo >>> 24)] ^
        t[768 + (hi & 0xff)] ^
        t[512 + ((hi >>> 8) & 0xff)] ^
        t[256 + ((hi >>> 16) & 0xff)] ^
        t[hi >>> 24];
    }
    i += 8 * pairs;
  }
  for (; i < n; i++) c = t[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}
