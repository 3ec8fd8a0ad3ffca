import { describe, expect, it } from 'vitest';
import {
  SafetensorsErrorCode,
  readSafetensors,
  safetensorsParts,
  tensorAsFloat32,
  writeSafetensors,
} from '../core/safetensors.ts';
import { SnapshotArrays } from '../server/run/checkpoint.ts';
import { mulberry32 } from '../core/random.ts';

const enc = new TextEncoder();

/** Assembles a file by hand: 8-byte LE length, header text padded to 8, then the data bytes. */
function assemble(headerJson: string, data: ArrayLike<number> = [], pad = true): Uint8Array {
  const json = enc.encode(headerJson);
  const n = pad ? Math.ceil(json.length / 8) * 8 : json.length;
  const out = new Uint8Array(8 + n + data.length);
  new DataView(out.buffer).setUint32(0, n, true);
  out.set(json, 8);
  out.fill(0x20, 8 + json.length, 8 + n);
  out.set(Array.from(data), 8 + n);
  return out;
}

function codeOf(bytes: Uint8Array): string {
  const r = readSafetensors(bytes);
  return r.ok ? 'ok' : r.error.code;
}

describe('writeSafetensors / readSafetensors', () => {
  it('round-trips F32, F16, I32, U8, I64 and metadata', () => {
    const f32 = new Float32Array([1.5, -2, 3.25, 0, Number.MIN_VALUE, -1e30]);
    const i32 = new Int32Array([-1, 2147483647, -2147483648, 7]);
    const u8 = new Uint8Array([0, 1, 254, 255, 9]);
    const f16 = new Uint16Array([0x3c00, 0xc000, 0x7bff]); // 1, -2, 65504
    const i64 = new BigInt64Array([-5n, 1n << 40n]);
    const metadata = { format: 'pt', step: '1200', note: 'ünïcødé ✓' };
    const bytes = writeSafetensors(
      {
        'wte.weight': { dtype: 'F32', shape: [2, 3], data: f32 },
        counts: { dtype: 'I32', shape: [4], data: i32 },
        mask: { dtype: 'U8', shape: [5], data: u8 },
        half: { dtype: 'F16', shape: [3], data: f16 },
        big: { dtype: 'I64', shape: [1, 2], data: i64 },
        empty: { dtype: 'F32', shape: [0, 4], data: new Float32Array(0) },
        scalar: { dtype: 'F32', shape: [], data: new Float32Array([42]) },
      },
      metadata,
    );
    const r = readSafetensors(bytes);
    if (!r.ok) throw new Error(r.error.message);
    const { tensors, metadata: meta } = r.value;
    expect(meta).toEqual(metadata);
    expect(Object.keys(tensors)).toEqual(['wte.weight', 'counts', 'mask', 'half', 'big', 'empty', 'scalar']);
    expect(tensors['wte.weight'].shape).toEqual([2, 3]);
    expect(tensorAsFloat32(tensors['wte.weight'])).toEqual(f32);
    expect(new Int32Array(tensors.counts.data.slice().buffer)).toEqual(i32);
    expect(tensors.mask.data).toEqual(u8);
    expect(Array.from(tensorAsFloat32(tensors.half))).toEqual([1, -2, 65504]);
    expect(new BigInt64Array(tensors.big.data.slice().buffer)).toEqual(i64);
    expect(tensors.empty.data.length).toBe(0);
    expect(tensorAsFloat32(tensors.scalar)[0]).toBe(42);
  });

  it('writes the exact published layout', () => {
    const bytes = writeSafetensors(
      {
        b: { dtype: 'U8', shape: [3], data: new Uint8Array([7, 8, 9]) },
        a: { dtype: 'F32', shape: [1], data: new Float32Array([1]) },
      },
      { k: 'v' },
    );
    const json =
      '{"__metadata__":{"k":"v"},"b":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},"a":{"dtype":"F32","shape":[1],"data_offsets":[3,7]}}';
    expect(json.length).toBe(131); // pads to 136 with 5 spaces
    const expected: number[] = [
      136,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      ...enc.encode(json),
      0x20,
      0x20,
      0x20,
      0x20,
      0x20,
      7,
      8,
      9,
      0x00,
      0x00,
      0x80,
      0x3f,
    ];
    expect(Array.from(bytes)).toEqual(expected);
  });

  it('omits __metadata__ when none is given and still aligns the data', () => {
    const bytes = writeSafetensors({ x: { dtype: 'I32', shape: [1], data: new Int32Array([5]) } });
    const n = new DataView(bytes.buffer).getUint32(0, true);
    expect(n % 8).toBe(0);
    expect(new TextDecoder().decode(bytes.subarray(8, 8 + n)).trimEnd()).toBe(
      '{"x":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}',
    );
    const r = readSafetensors(bytes);
    expect(r.ok && r.value.metadata).toEqual({});
  });

  it('tensorAsFloat32 returns an aligned view or an aligned copy', () => {
    const bytes = writeSafetensors({
      first: { dtype: 'F32', shape: [2], data: new Float32Array([1, 2]) },
      odd: { dtype: 'U8', shape: [1], data: new Uint8Array([1]) },
      late: { dtype: 'F32', shape: [2], data: new Float32Array([3, 4]) }, // at data offset 9: unaligned
    });
    const r = readSafetensors(bytes);
    if (!r.ok) throw new Error(r.error.message);
    const first = tensorAsFloat32(r.value.tensors.first);
    expect(first.buffer).toBe(bytes.buffer); // a view, no copy
    const late = tensorAsFloat32(r.value.tensors.late);
    expect(late.buffer).not.toBe(bytes.buffer);
    expect(Array.from(late)).toEqual([3, 4]);
    expect(() => tensorAsFloat32(r.value.tensors.odd)).toThrow(TypeError);
  });

  it('keeps awkward tensor names as data', () => {
    const bytes = writeSafetensors({ ['__proto__']: { dtype: 'U8', shape: [1], data: new Uint8Array([3]) } });
    const r = readSafetensors(bytes);
    if (!r.ok) throw new Error(r.error.message);
    expect(Object.keys(r.value.tensors)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(r.value.tensors)).toBe(Object.prototype);
  });

  it('refuses inconsistent input when writing', () => {
    expect(() => writeSafetensors({ x: { dtype: 'F32', shape: [3], data: new Float32Array(2) } })).toThrow(RangeError);
    expect(() => writeSafetensors({ x: { dtype: 'F32', shape: [-1], data: new Float32Array(0) } })).toThrow(RangeError);
    expect(() => writeSafetensors({ __metadata__: { dtype: 'U8', shape: [0], data: new Uint8Array(0) } })).toThrow(
      RangeError,
    );
  });
});

describe('readSafetensors validation', () => {
  const t = (dtype: string, shape: number[], offsets: number[]) =>
    JSON.stringify({ dtype, shape, data_offsets: offsets });

  it('E_TRUNCATED: short file or header past the end', () => {
    expect(codeOf(new Uint8Array(0))).toBe('E_TRUNCATED');
    expect(codeOf(new Uint8Array(7))).toBe('E_TRUNCATED');
    const f = assemble('{}');
    new DataView(f.buffer).setUint32(0, 9, true);
    expect(codeOf(f)).toBe('E_TRUNCATED');
    const huge = assemble('{}');
    new DataView(huge.buffer).setUint32(4, 1, true); // 2^32 + 8
    expect(codeOf(huge)).toBe('E_TRUNCATED');
  });

  it('E_BAD_HEADER: not UTF-8, not JSON, not an object, bad metadata', () => {
    const notUtf8 = assemble('{"a":1}    ');
    notUtf8[10] = 0xff;
    expect(codeOf(notUtf8)).toBe('E_BAD_HEADER');
    expect(codeOf(assemble('{"a":'))).toBe('E_BAD_HEADER');
    expect(codeOf(assemble('[1,2]'))).toBe('E_BAD_HEADER');
    expect(codeOf(assemble('  {}'))).toBe('E_BAD_HEADER'); // must start with {
    expect(codeOf(assemble('{"__metadata__":{"a":1}}'))).toBe('E_BAD_HEADER');
    expect(codeOf(assemble('{"__metadata__":[]}'))).toBe('E_BAD_HEADER');
    expect(codeOf(assemble('{}'))).toBe('ok'); // an empty file is legal
    expect(codeOf(assemble('{}', [], false))).toBe('ok'); // unpadded headers are read too
  });

  it('E_BAD_TENSOR: dtype, shape, offsets, overlaps, gaps and sizes', () => {
    const data = new Array(16).fill(1);
    const file = (entries: Record<string, string>, bytes = data) =>
      assemble(
        `{${Object.entries(entries)
          .map(([k, v]) => `"${k}":${v}`)
          .join(',')}}`,
        bytes,
      );
    expect(codeOf(file({ a: t('F32', [4], [0, 16]) }))).toBe('ok');
    expect(codeOf(file({ a: t('F31', [4], [0, 16]) }))).toBe('E_BAD_TENSOR'); // unknown dtype
    expect(codeOf(file({ a: t('F32', [5], [0, 16]) }))).toBe('E_BAD_TENSOR'); // size mismatch
    expect(codeOf(file({ a: t('F32', [-4], [0, 16]) }))).toBe('E_BAD_TENSOR');
    expect(codeOf(file({ a: t('F32', [1.5], [0, 16]) }))).toBe('E_BAD_TENSOR');
    expect(codeOf(file({ a: t('F32', [4], [0, 20]) }, new Array(16).fill(0)))).toBe('E_BAD_TENSOR'); // past the end
    expect(codeOf(file({ a: t('F32', [4], [8, 4]) }))).toBe('E_BAD_TENSOR'); // reversed
    expect(codeOf(file({ a: t('F32', [4], [0]) }))).toBe('E_BAD_TENSOR');
    expect(codeOf(file({ a: t('F32', [2], [0, 8]), b: t('F32', [2], [4, 12]) }))).toBe('E_BAD_TENSOR'); // overlap
    expect(codeOf(file({ a: t('F32', [2], [0, 8]), b: t('F32', [1], [12, 16]) }))).toBe('E_BAD_TENSOR'); // gap
    expect(codeOf(file({ a: t('F32', [2], [8, 16]) }))).toBe('E_BAD_TENSOR'); // gap at the start
    expect(codeOf(file({ a: t('F32', [2], [0, 8]) }))).toBe('E_BAD_TENSOR'); // trailing bytes
    expect(codeOf(file({ a: '7' }))).toBe('E_BAD_TENSOR');
    expect(codeOf(file({ a: t('F32', [2], [8, 16]), b: t('I32', [2], [0, 8]) }))).toBe('ok'); // any header order
  });

  it('every truncation of a valid file is an error, and none throws', () => {
    const bytes = writeSafetensors(
      {
        w: { dtype: 'F32', shape: [3], data: new Float32Array([1, 2, 3]) },
        m: { dtype: 'U8', shape: [2], data: new Uint8Array([1, 2]) },
      },
      { a: 'b' },
    );
    const headerEnd = 8 + new DataView(bytes.buffer).getUint32(0, true);
    for (let len = 0; len < bytes.length; len++) {
      const c = codeOf(bytes.subarray(0, len));
      expect(c).toBe(len < headerEnd ? 'E_TRUNCATED' : 'E_BAD_TENSOR');
    }
    expect(codeOf(bytes)).toBe('ok');
  });

  it('never throws on random corruption', () => {
    const bytes = writeSafetensors({ w: { dtype: 'F32', shape: [2, 2], data: new Float32Array(4) } }, { x: 'y' });
    const rand = mulberry32(5);
    const codes = new Set<string>(Object.values(SafetensorsErrorCode));
    for (let i = 0; i < 2000; i++) {
      const f = bytes.slice();
      for (let b = 1 + Math.floor(rand() * 3); b > 0; b--) f[Math.floor(rand() * f.length)] = Math.floor(rand() * 256);
      const r = readSafetensors(f);
      if (!r.ok) expect(codes.has(r.error.code)).toBe(true);
    }
  });
});

describe('safetensorsParts', () => {
  it('are the file writeSafetensors makes, in order, with each tensor a view of its data (no copy)', () => {
    const a = new Float32Array([1, 2, 3]),
      b = new Uint8Array([7, 8]);
    const tensors = {
      a: { dtype: 'F32' as const, shape: [3], data: a },
      b: { dtype: 'U8' as const, shape: [2], data: b },
    };
    const parts = safetensorsParts(tensors, { k: 'v' });
    expect(parts).toHaveLength(3);
    expect(Buffer.concat(parts).equals(Buffer.from(writeSafetensors(tensors, { k: 'v' })))).toBe(true);
    expect(parts[1].buffer).toBe(a.buffer);
    expect(parts[2].buffer).toBe(b.buffer);
  });
});

describe('SnapshotArrays', () => {
  it('lends arrays, takes them back once their checkpoint is written, and lends them again', () => {
    const arrays = new SnapshotArrays(2);
    const x = arrays.alloc(5),
      y = arrays.alloc(5),
      z = arrays.alloc(7);
    expect(new Set([x, y, z]).size).toBe(3);
    expect(arrays.alloc(5)).not.toBe(x); // still lent
    arrays.releaseAll();
    const again = [arrays.alloc(5), arrays.alloc(5)];
    expect(again).toContain(x); // kept: the first two back (keep = 2)
    expect(again).toContain(y);
    expect(arrays.alloc(7)).not.toBe(z); // beyond keep: dropped
  });
});
