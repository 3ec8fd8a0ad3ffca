// docs/protocol.md is enough to write a client: every error code the protocol-facing code can
// send is documented, the hash's worked example holds, frames built by hand from the byte layout in
// the docs (no codec code) decode to the values the docs say, and the tables a client is written
// from (the frame's encodings, the sparse short-chunk rule, the delta's numeric ranges) are read
// from the doc and held against the code, so they cannot drift again.

import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ENCODINGS, crc32, decodeDelta } from '../core/codec/index.ts';
import { chunkKept } from '../core/codec/sparse.ts';
import { DeltaMetaSchema } from '../core/protocol.ts';
import { leadingZeroBits, solvePow } from '../core/pow.ts';
import { hashParams } from '../core/coord/hash.ts';
import { ROOT } from './helpers/server.ts';

const DOC = readFileSync(join(ROOT, 'docs/protocol.md'), 'utf8');

/** The files whose error codes an island or an API client can see. */
function protocolFiles(): string[] {
  const dirFiles = (d: string) =>
    readdirSync(join(ROOT, d))
      .filter((f) => f.endsWith('.ts'))
      .map((f) => join(d, f));
  return [
    'core/protocol.ts',
    'server/gateway/gateway.ts',
    'server/gateway/mix.ts',
    'server/app.ts',
    'server/plugins/http-strict.ts',
    'server/run/audit.ts',
    'server/run/admin.ts',
    'server/run/delta-archive.ts',
    ...dirFiles('core/codec'),
    ...dirFiles('core/coord'),
    ...dirFiles('server/plugins'),
    ...dirFiles('client/island'),
  ];
}

/** A frame laid out by hand: the 32-byte header of the docs, then the raw payload. */
function frame(encoding: number, n: number, blockSize: number, k: number, payload: number[], flags = 0): Uint8Array {
  const f = new Uint8Array(32 + payload.length);
  const dv = new DataView(f.buffer);
  f.set([0x41, 0x54, 0x4c, 0x44, 1, encoding, flags, 0]);
  dv.setUint32(8, n, true);
  dv.setUint32(12, blockSize, true);
  dv.setUint32(16, k, true);
  dv.setUint32(20, payload.length, true);
  dv.setUint32(24, payload.length, true);
  f.set(payload, 32);
  dv.setUint32(28, crc32(f.subarray(32), crc32(f.subarray(0, 28))), true);
  return f;
}

const f32le = (x: number) => Array.from(new Uint8Array(new Float32Array([x]).buffer));
const u16le = (x: number) => [x & 0xff, x >> 8];

/** One bit stream as the doc lays it out: values of `bits` bits, each LSB first, running on, the last byte padded with 0. */
function bitStream(values: number[], bits: number): number[] {
  const out = new Array<number>(Math.ceil((values.length * bits) / 8)).fill(0);
  let pos = 0;
  for (const v of values) for (let b = 0; b < bits; b++, pos++) if ((v >> b) & 1) out[pos >> 3] |= 1 << (pos & 7);
  return out;
}

/** The rows of the markdown table after `marker`, as cells. */
function tableAfter(marker: string): string[][] {
  const at = DOC.indexOf(marker);
  expect(at, marker).toBeGreaterThan(0);
  const rows: string[][] = [];
  for (const line of DOC.slice(at).split('\n').slice(1)) {
    if (!line.startsWith('|')) {
      if (rows.length) break;
      continue;
    }
    const cells = line
      .split('|')
      .slice(1, -1)
      .map((c) => c.trim());
    if (!cells[0].startsWith('---')) rows.push(cells);
  }
  return rows.slice(1); // the header row
}

describe('docs/protocol.md', () => {
  it('names every error code the protocol-facing code can send', () => {
    const codes = new Set<string>();
    for (const f of protocolFiles())
      for (const m of readFileSync(join(ROOT, f), 'utf8').matchAll(/'(E_[A-Z0-9_]+)'/g)) codes.add(m[1]);
    expect(codes.size).toBeGreaterThan(30);
    const missing = [...codes].filter((c) => !DOC.includes(`\`${c}\``));
    expect(missing).toEqual([]);
  });

  it("θ's hash: the worked example", () => {
    const m =
      /θ = \[1, −2, 0\.5\][\s\S]*?hash `([0-9a-f]{16})`;\s+65,537 ones[\s\S]*?hash to `([0-9a-f]{16})`;[\s\S]*?empty θ \(no chunk\) hashes to\s+`([0-9a-f]{16})`/.exec(
        DOC,
      );
    expect(m).not.toBeNull();
    expect(hashParams(new Float32Array([1, -2, 0.5]))).toBe(m![1]);
    expect(hashParams(new Float32Array(65537).fill(1))).toBe(m![2]);
    expect(hashParams(new Float32Array(0))).toBe(m![3]);
  });

  it('frames built from the byte layout alone decode as documented (int4 nibble order, topk varints)', () => {
    // int4, n = 3, B = 8: one scale 0.5, nibbles 3, −7 (low, high of byte 0), 1 (low of byte 1), pad 0
    const int4 = frame(3, 3, 8, 0, [...f32le(0.5), (3 & 0xf) | ((-7 & 0xf) << 4), 1]);
    const d4 = decodeDelta(int4, 3);
    expect(d4.ok && Array.from(d4.value)).toEqual([1.5, -3.5, 0.5]);
    // topk, n = 200, B = 8, k = 2: scale 0.25, values 4, −2 at indices 5 and 135 (gaps 6 and 130 = LEB128 0x82 0x01)
    const topk = frame(4, 200, 8, 2, [...f32le(0.25), 4, 0xfe, 6, 0x82, 0x01]);
    const dk = decodeDelta(topk, 200);
    expect(dk.ok).toBe(true);
    if (!dk.ok) return;
    expect(dk.value[5]).toBe(1);
    expect(dk.value[135]).toBe(-0.5);
    expect(dk.value.reduce((a, x) => a + Math.abs(x), 0)).toBe(1.5);
    // the CRC covers the header: a flipped count no longer matches
    const bad = int4.slice();
    bad[8] ^= 1;
    const r = decodeDelta(bad, 3);
    expect(r.ok ? '' : r.error.code).toMatch(/E_CRC|E_BAD_HEADER/);
  });

  it("the frame table lists every encoding in the codec's order, and no other", () => {
    const row = /\| 5 \| 1 \| encoding: ([^|(]+)/.exec(DOC);
    expect(row).not.toBeNull();
    const listed = row![1]
      .trim()
      .split(', ')
      .map((e) => e.split(' '));
    expect(listed.map(([id]) => Number(id))).toEqual(ENCODINGS.map((_, i) => i));
    expect(listed.map(([, name]) => name)).toEqual([...ENCODINGS]);
    expect(DOC).toContain(`${ENCODINGS.length} and above: \`E_BAD_HEADER\``);
  });

  it("the sparse short-chunk rule as the doc states it is the codec's", () => {
    const [full, short] = tableAfter('<!-- sparse-short-chunk');
    expect(full.slice(1)).toEqual(['kc = k', 'kc = k']);
    expect(short.slice(1)).toEqual(['kc = min(k, len)', 'kc = max(1, ⌊len · k / C⌋)']);
    const doc = (len: number, C: number, k: number, strided: boolean) =>
      len === C ? k : strided ? Math.max(1, Math.floor((len * k) / C)) : Math.min(k, len);
    for (const C of [8, 64, 4096])
      for (const k of [1, 3, C / 2, C])
        for (const len of [1, 2, 5, C - 1, C]) {
          for (const strided of [false, true])
            expect(chunkKept(len, C, k, strided), `len ${len} C ${C} k ${k} strided ${strided}`).toBe(
              doc(len, C, k, strided),
            );
        }
  });

  it('sparse frames built from the doc alone decode as it says (magnitude order, bit streams across chunks, strided short chunk)', () => {
    // n = 10, C = 8, k = 4, top-k, 2-bit: chunk 0 keeps offsets 1, 3, 4, 6; the short chunk (len 2) keeps min(4, 2) = 2
    const mags = [0.5, 2, 1, 3].flatMap(f32le); // per chunk: lower first, then upper
    const offsets = bitStream([1, 3, 4, 6, 0, 1], 3); // b = max(1, ⌈log₂ 8⌉) = 3 bits, running on across chunks
    const codes = bitStream([2, 1, 0, 3, 1, 2], 2); // bit 0 negative, bit 1 upper
    const topk = decodeDelta(frame(5, 10, 8, 4, [...mags, ...offsets, ...codes]), 10);
    expect(topk.ok && Array.from(topk.value)).toEqual([0, 2, 0, -0.5, 0.5, 0, -2, 0, -1, 3]);
    // strided, 1-bit (flags bit 1 and 2): chunk 0 phase 1, stride ⌊8/4⌋ = 2; the short chunk keeps max(1, ⌊2·4/8⌋) = 1 at phase 1
    const strided = decodeDelta(
      frame(5, 10, 8, 4, [...f32le(0.25), ...f32le(4), ...u16le(1), ...u16le(1), ...bitStream([0, 1, 0, 0, 1], 1)], 6),
      10,
    );
    expect(strided.ok && Array.from(strided.value)).toEqual([0, 0.25, 0, -0.25, 0, 0.25, 0, 0.25, 0, -4]);
    // a negative magnitude is accepted and flips the sign, as the doc says
    const neg = decodeDelta(
      frame(5, 10, 8, 4, [...f32le(-0.25), ...f32le(4), ...u16le(1), ...u16le(1), ...bitStream([0, 1, 0, 0, 1], 1)], 6),
      10,
    );
    expect(neg.ok && neg.value[1]).toBe(-0.25);
  });

  it("the delta's numeric ranges in the doc are the schema's", () => {
    const rows = tableAfter('<!-- delta-meta-ranges');
    const props = DeltaMetaSchema.properties as Record<
      string,
      { type?: string; minimum?: number; maximum?: number; anyOf?: unknown[] }
    >;
    const checked = new Set<string>();
    for (const [field, type, range] of rows) {
      for (const name of field.split(',').map((f) => f.trim().replace(/`/g, ''))) {
        const p = props[name];
        expect(p, name).toBeDefined();
        checked.add(name);
        if (p.anyOf) {
          expect(type).toBe('number or `null`');
          continue;
        }
        expect(type, name).toBe(p.type);
        const m = /^(\d+) \.\. (\d+)$/.exec(range);
        expect(m, `${name}: ${range}`).not.toBeNull();
        expect([Number(m![1]), Number(m![2])], name).toEqual([p.minimum, p.maximum]);
      }
    }
    expect([...checked].sort()).toEqual(
      Object.keys(props)
        .filter((k) => k !== 'islandId')
        .sort(),
    );
  });

  it("the proof of work's worked example holds", async () => {
    const m =
      /challenge `([a-z-]+)` the first good decimal\s+nonce is `(\d+)`: SHA-256 of `[^`]+` begins `([0-9a-f]{8})…`/.exec(
        DOC,
      );
    expect(m).not.toBeNull();
    expect(await solvePow(m![1], 12)).toBe(m![2]);
    const d = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(`${m![1]}:${m![2]}`)));
    expect(Array.from(d.subarray(0, 4), (b) => b.toString(16).padStart(2, '0')).join('')).toBe(m![3]);
    expect(leadingZeroBits(d)).toBeGreaterThanOrEqual(12);
  });
});
