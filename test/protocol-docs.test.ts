// docs/protocol.md is enough to write a client: every error code the protocol-facing code can
// send is documented, the hash's worked example holds, and frames built by hand from the byte
// layout in the docs (no codec code) decode to the values the docs say.

import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { crc32, decodeDelta } from '../core/codec/index.ts';
import { hashParams } from '../core/coord/hash.ts';
import { ROOT } from './helpers/server.ts';

const DOC = readFileSync(join(ROOT, 'docs/protocol.md'), 'utf8');

/** The files whose error codes an island or an API client can see. */
function protocolFiles(): string[] {
  const dirFiles = (d: string) => readdirSync(join(ROOT, d)).filter((f) => f.endsWith('.ts')).map((f) => join(d, f));
  return ['core/protocol.ts', 'server/gateway.ts', 'server/app.ts', ...dirFiles('core/codec'), ...dirFiles('core/coord'), ...dirFiles('server/plugins'), ...dirFiles('client/island')];
}

/** A frame laid out by hand: the 32-byte header of the docs, then the raw payload. */
function frame(encoding: number, n: number, blockSize: number, k: number, payload: number[]): Uint8Array {
  const f = new Uint8Array(32 + payload.length);
  const dv = new DataView(f.buffer);
  f.set([0x41, 0x54, 0x4c, 0x44, 1, encoding, 0, 0]);
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

describe('docs/protocol.md', () => {
  it('names every error code the protocol-facing code can send', () => {
    const codes = new Set<string>();
    for (const f of protocolFiles()) for (const m of readFileSync(join(ROOT, f), 'utf8').matchAll(/'(E_[A-Z0-9_]+)'/g)) codes.add(m[1]);
    expect(codes.size).toBeGreaterThan(30);
    const missing = [...codes].filter((c) => !DOC.includes(`\`${c}\``));
    expect(missing).toEqual([]);
  });

  it("θ's hash: the worked example", () => {
    const m = /θ = \[1, −2, 0\.5\][\s\S]*?hash `([0-9a-f]{16})`;\s+65,537 ones[\s\S]*?hash to `([0-9a-f]{16})`;[\s\S]*?empty θ \(no chunk\) hashes to\s+`([0-9a-f]{16})`/.exec(DOC);
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
});
