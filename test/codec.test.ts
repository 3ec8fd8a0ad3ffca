import { describe, expect, it } from 'vitest';
import {
  type CodecOptions,
  CodecErrorCode,
  CodecScratch,
  ENCODINGS,
  type Encoding,
  ErrorFeedback,
  HEADER_BYTES,
  crc32,
  decodeDelta,
  encodeDelta,
  encodeWithFeedback,
  f16ToF32,
  f32ToF16,
  maxFrameBytes,
  peekHeader,
  selectTopK,
} from '../core/codec/index.ts';
import { benchCodec } from '../instruments/bench/codec.ts';
import { decodeF16Array, encodeF16Array } from '../core/model/f16.ts';
import { roundHalfUp } from '../core/codec/payloads.ts';
import { gaussian, mulberry32 } from '../core/random.ts';

const ALL_CODES = new Set<string>(Object.values(CodecErrorCode));

/** Gaussian entries with a scale that changes every 50 elements, like rows of a weight matrix. */
function randomDelta(n: number, seed: number): Float32Array {
  const normal = gaussian(mulberry32(seed));
  const out = new Float32Array(n);
  let scale = 1;
  for (let i = 0; i < n; i++) {
    if (i % 50 === 0) scale = 1e-3 * Math.exp(normal());
    out[i] = normal() * scale;
  }
  return out;
}

function decodeOk(frame: Uint8Array, n: number): Float32Array {
  const r = decodeDelta(frame, n);
  if (!r.ok) throw new Error(`decode failed: ${r.error.code} ${r.error.message}`);
  return r.value;
}

/** Recomputes the frame CRC (header bytes 0..27, then payload) after a test edits the frame. */
function fixCrc(frame: Uint8Array): void {
  const c = crc32(frame.subarray(HEADER_BYTES), crc32(frame.subarray(0, 28)));
  new DataView(frame.buffer, frame.byteOffset).setUint32(28, c, true);
}

/** Bitwise equality of two float arrays (toEqual is slow on large typed arrays). */
function expectSameBits(a: Float32Array, b: Float32Array): void {
  expect(a.length).toBe(b.length);
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let firstDiff = -1;
  for (let i = 0; i < ua.length && firstDiff < 0; i++) if (ua[i] !== ub[i]) firstDiff = i;
  expect(firstDiff).toBe(-1);
}

function norm(a: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * a[i];
  return Math.sqrt(s);
}

function maxAbs(x: Float32Array, start: number, end: number): number {
  let m = 0;
  for (let i = start; i < end; i++) m = Math.max(m, Math.abs(x[i]));
  return m;
}

/** Checks |x − y| <= scale/2 per block, scale = f32(max|x| / qmax), with slack for f32 rounding. */
function expectBlockwiseBound(x: Float32Array, y: Float32Array, blockSize: number, qmax: number): void {
  for (let start = 0; start < x.length; start += blockSize) {
    const end = Math.min(start + blockSize, x.length);
    const scale = Math.fround(maxAbs(x, start, end) / qmax);
    for (let i = start; i < end; i++) {
      const e = Math.abs(x[i] - y[i]);
      if (e > scale * 0.5 * (1 + 1e-6) + 1e-45) {
        throw new Error(`element ${i}: |${x[i]} − ${y[i]}| = ${e} > scale/2 = ${scale / 2}`);
      }
    }
  }
}

const SIZES = [1, 63, 64, 65, 1000, 100003];

describe('crc32', () => {
  it('matches the IEEE check value and continues across buffers', () => {
    const bytes = new TextEncoder().encode('123456789');
    expect(crc32(bytes)).toBe(0xcbf43926);
    expect(crc32(bytes.subarray(5), crc32(bytes.subarray(0, 5)))).toBe(0xcbf43926);
    expect(crc32(new Uint8Array(0))).toBe(0);
    // Unaligned views and lengths that are not multiples of 8 take the byte paths.
    const big = new Uint8Array(1003).map((_, i) => (i * 37) & 0xff);
    expect(crc32(big.subarray(3, 1001))).toBe(crc32(big.slice(3, 1001)));
  });
});

describe('roundHalfUp', () => {
  it('is Math.round on every integer-and-a-half neighbourhood the quantizers meet, and on random values', () => {
    const f64 = new Float64Array(1),
      bits = new BigInt64Array(f64.buffer);
    const step = (x: number, dir: 1n | -1n) => {
      f64[0] = x;
      bits[0] += x > 0 ? dir : -dir;
      return f64[0];
    };
    const same = (x: number) => roundHalfUp(x) + 0 === Math.round(x) + 0; // −0 and +0 store alike
    const bad: number[] = [];
    for (let k = -130; k <= 130; k++)
      for (const c of [k, k + 0.5]) {
        if (c === 0) continue;
        let lo = c,
          hi = c;
        for (let s = 0; s < 40; s++) {
          if (!same(lo)) bad.push(lo);
          if (!same(hi)) bad.push(hi);
          lo = step(lo, -1n);
          hi = step(hi, 1n);
        }
      }
    for (const x of [0.49999999999999994, -0.49999999999999994, 0.5, -0.5, 1e-300, -1e-300, 0, -0])
      if (!same(x)) bad.push(x);
    const r = (() => {
      let s = 12345;
      return () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32 - 0.5) * 260;
    })();
    for (let i = 0; i < 200_000; i++) {
      const x = r();
      if (!same(x)) bad.push(x);
    }
    expect(bad).toEqual([]);
  });
});

describe('f16', () => {
  it('round-trips every non-NaN half exactly', () => {
    const wrong: number[] = [];
    for (let h = 0; h < 65536; h++) {
      if ((h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0) continue; // NaN
      if (f32ToF16(f16ToF32(h)) !== h) wrong.push(h);
    }
    expect(wrong).toEqual([]);
  });

  it('rounds to nearest, ties to even, in normal and subnormal range', () => {
    const wrong: number[] = [];
    for (let h = 0; h < 0x7bff; h++) {
      const mid = (f16ToF32(h) + f16ToF32(h + 1)) / 2; // exact in f32
      const even = h % 2 === 0 ? h : h + 1;
      if (f32ToF16(mid) !== even) wrong.push(h);
      if (f32ToF16(Math.fround(mid * (1 + 2 ** -20))) !== h + 1) wrong.push(h);
      if (f32ToF16(Math.fround(mid * (1 - 2 ** -20))) !== h) wrong.push(h);
      if (f32ToF16(-mid) !== (0x8000 | even)) wrong.push(h);
    }
    expect(wrong).toEqual([]);
    expect(f32ToF16(2 ** -24)).toBe(1); // smallest subnormal
    expect(f32ToF16(2 ** -25)).toBe(0); // tie between 0 and 1: even
    expect(f32ToF16(1.5 * 2 ** -25)).toBe(1);
    expect(f32ToF16(2 ** -26)).toBe(0);
  });

  it('converts whole arrays like the scalar functions', () => {
    const x = new Float32Array([0, -0, 1, -2.5, 65504, 1e-7, 3e-5, Infinity, 0.1]);
    const h = new Uint16Array(x.length);
    encodeF16Array(x, h);
    expect(Array.from(h)).toEqual(Array.from(x, f32ToF16));
    const back = new Float32Array(x.length);
    decodeF16Array(h, back);
    expect(Array.from(back)).toEqual(Array.from(h, f16ToF32));
  });

  it('handles overflow, inf and NaN', () => {
    expect(f32ToF16(65504)).toBe(0x7bff);
    expect(f32ToF16(65519)).toBe(0x7bff);
    expect(f32ToF16(65520)).toBe(0x7c00); // tie at the top rounds to even: inf
    expect(f32ToF16(1e9)).toBe(0x7c00);
    expect(f32ToF16(-Infinity)).toBe(0xfc00);
    const nan = f32ToF16(NaN);
    expect(nan & 0x7c00).toBe(0x7c00);
    expect(nan & 0x3ff).not.toBe(0);
    expect(Number.isNaN(f16ToF32(nan))).toBe(true);
  });
});

describe('selectTopK', () => {
  it('matches a full sort, ties going to the lowest indices', () => {
    const rand = mulberry32(7);
    for (const n of [1, 10, 1000, 5000]) {
      // Few distinct magnitudes, so ties at the threshold are common.
      const x = new Float32Array(n).map(() => (rand() < 0.5 ? -1 : 1) * Math.floor(rand() * 20));
      for (const k of [0, 1, Math.floor(n / 3), n]) {
        const idx = new Uint32Array(k);
        selectTopK(x, k, new Uint32Array(65536), idx);
        const order = Array.from(x.keys()).sort((a, b) => Math.abs(x[b]) - Math.abs(x[a]) || a - b);
        expect(Array.from(idx)).toEqual(order.slice(0, k).sort((a, b) => a - b));
      }
    }
  });
});

describe('encode/decode round trip', () => {
  it('f32 is exact', () => {
    for (const n of SIZES) {
      const x = randomDelta(n, n);
      expectSameBits(decodeOk(encodeDelta(x, { encoding: 'f32' }), n), x);
    }
  });

  it('f16 is within 2^-11 relative in the normal range, 2^-25 absolute below it', () => {
    for (const n of SIZES) {
      const x = randomDelta(n, n + 1);
      x[0] = 70000; // saturates to 65504 instead of becoming inf
      const y = decodeOk(encodeDelta(x, { encoding: 'f16' }), n);
      expect(y[0]).toBe(65504);
      let worst = 0; // error / bound, must stay <= 1
      for (let i = 1; i < n; i++) {
        const a = Math.abs(x[i]);
        const bound = a >= 2 ** -14 ? a * 2 ** -11 : 2 ** -25;
        worst = Math.max(worst, Math.abs(x[i] - y[i]) / bound);
      }
      expect(worst).toBeLessThanOrEqual(1);
    }
  });

  for (const [encoding, qmax] of [
    ['int8', 127],
    ['int4', 7],
  ] as const) {
    it(`${encoding} is within scale/2 of each element, per block`, () => {
      for (const n of SIZES) {
        for (const blockSize of [8, 64, 250]) {
          const x = randomDelta(n, n * 3 + blockSize);
          if (n > 70) x.fill(0, 10, 70); // an all-zero block
          const frame = encodeDelta(x, { encoding, blockSize });
          const h = peekHeader(frame);
          expect(h.ok && h.value.blockSize).toBe(blockSize);
          expectBlockwiseBound(x, decodeOk(frame, n), blockSize, qmax);
        }
      }
    });
  }

  it('int8 keeps a block of tiny (subnormal) values instead of zeroing it', () => {
    const x = new Float32Array(16).fill(1e-44);
    x[3] = -3e-45;
    expectBlockwiseBound(x, decodeOk(encodeDelta(x, { encoding: 'int8', blockSize: 8 }), 16), 8, 127);
  });

  it('topk keeps exactly the k largest, within the int8 bound, and zeroes the rest', () => {
    for (const n of SIZES) {
      for (const topkFraction of [0.01, 0.1, 1]) {
        const x = randomDelta(n, n * 5);
        const frame = encodeDelta(x, { encoding: 'topk', topkFraction, blockSize: 16 });
        const h = peekHeader(frame);
        const k = Math.max(1, Math.round(topkFraction * n));
        expect(h.ok && h.value.k).toBe(k);
        const y = decodeOk(frame, n);
        const kept = Array.from(x.keys())
          .sort((a, b) => Math.abs(x[b]) - Math.abs(x[a]))
          .slice(0, k)
          .sort((a, b) => a - b);
        const keptMask = new Uint8Array(n);
        for (const i of kept) keptMask[i] = 1;
        let nonzeroDropped = 0;
        for (let i = 0; i < n; i++) if (!keptMask[i] && y[i] !== 0) nonzeroDropped++;
        expect(nonzeroDropped).toBe(0);
        const xs = Float32Array.from(kept, (i) => x[i]);
        const ys = Float32Array.from(kept, (i) => y[i]);
        expectBlockwiseBound(xs, ys, 16, 127);
      }
    }
  });

  it('deflate decodes to exactly what the plain frame decodes to, and is kept only when smaller', () => {
    const x = randomDelta(20000, 99);
    for (const encoding of ENCODINGS) {
      const plain = encodeDelta(x, { encoding, topkFraction: 0.05 });
      const packed = encodeDelta(x, { encoding, topkFraction: 0.05, deflate: true });
      expect(packed.length).toBeLessThanOrEqual(plain.length);
      expectSameBits(decodeOk(packed, x.length), decodeOk(plain, x.length));
    }
    const zeros = new Float32Array(10000);
    const z = encodeDelta(zeros, { encoding: 'f32', deflate: true });
    const hz = peekHeader(z);
    expect(hz.ok && hz.value.deflated).toBe(true);
    expect(z.length).toBeLessThan(1000);
    expect(decodeOk(z, 10000)).toEqual(zeros);
    const tiny = encodeDelta(new Float32Array([0.5]), { encoding: 'f32', deflate: true });
    const ht = peekHeader(tiny);
    expect(ht.ok && ht.value.deflated).toBe(false);
  });

  it('handles n = 0 for every encoding', () => {
    for (const encoding of ENCODINGS) {
      for (const deflate of [false, true]) {
        expect(decodeOk(encodeDelta(new Float32Array(0), { encoding, deflate }), 0).length).toBe(0);
      }
    }
  });

  it('reuses scratch and out buffers, and stays within maxFrameBytes', () => {
    const scratch = new CodecScratch();
    for (const n of [0, 1, 2, 3, 7, 63, 1000]) {
      const x = randomDelta(n, 11 + n);
      const out = new Float32Array(n);
      for (const opts of [
        { encoding: 'f32' },
        { encoding: 'int8', blockSize: 8 },
        { encoding: 'int4', blockSize: 8 },
        { encoding: 'topk', blockSize: 8, topkFraction: 1 },
        { encoding: 'topk', blockSize: 8, topkFraction: 0.3, deflate: true },
      ] as CodecOptions[]) {
        const a = encodeDelta(x, opts, scratch);
        expect(encodeDelta(x, opts, scratch)).toEqual(a);
        expect(encodeDelta(x, opts)).toEqual(a);
        expect(a.length).toBeLessThanOrEqual(maxFrameBytes(n));
        const r = decodeDelta(a, n, out);
        expect(r.ok && r.value).toBe(out);
      }
    }
    expect(maxFrameBytes(11_000_000)).toBe(HEADER_BYTES + 44_000_000);
    const wrongOut = decodeDelta(encodeDelta(new Float32Array(4), { encoding: 'f32' }), 4, new Float32Array(5));
    expect(!wrongOut.ok && wrongOut.error.code).toBe(CodecErrorCode.WRONG_SIZE);
  });

  it('decodes frames at odd byte offsets', () => {
    const x = randomDelta(1001, 3);
    for (const encoding of ENCODINGS) {
      const frame = encodeDelta(x, { encoding });
      const shifted = new Uint8Array(frame.length + 3);
      shifted.set(frame, 3);
      expect(decodeOk(shifted.subarray(3), 1001)).toEqual(decodeOk(frame, 1001));
    }
  });

  it('rejects invalid options with RangeError', () => {
    const x = new Float32Array(10);
    expect(() => encodeDelta(x, { encoding: 'int8', blockSize: 7 })).toThrow(RangeError);
    expect(() => encodeDelta(x, { encoding: 'int8', blockSize: 4 })).toThrow(RangeError);
    expect(() => encodeDelta(x, { encoding: 'topk', topkFraction: 0 })).toThrow(RangeError);
    expect(() => encodeDelta(x, { encoding: 'bf16' as Encoding })).toThrow(RangeError);
  });
});

describe('error feedback', () => {
  it('the sum of what was sent tracks the sum of the inputs; the residual stays bounded', () => {
    const n = 4000;
    const rounds = 50;
    const drift = randomDelta(n, 1); // a consistent direction, as real pseudo-gradients have
    for (const opts of [{ encoding: 'topk', topkFraction: 0.05 }, { encoding: 'int4' }] as CodecOptions[]) {
      const fb = new ErrorFeedback(n);
      const scratch = new CodecScratch();
      const sumIn = new Float64Array(n);
      const sumSent = new Float64Array(n);
      const sumNoFb = new Float64Array(n);
      const deltaNorm = norm(drift);
      let maxResidual = 0;
      let relGapAt10 = 0;
      for (let t = 0; t < rounds; t++) {
        const noise = randomDelta(n, 100 + t);
        const delta = drift.map((v, i) => v + 0.5 * noise[i]);
        const before = delta.slice();
        const r = encodeWithFeedback(delta, fb, opts, scratch);
        if (!r.ok) throw new Error(r.error.message);
        expectSameBits(delta, before); // the caller's delta is untouched
        const noFb = decodeOk(encodeDelta(delta, opts), n);
        for (let i = 0; i < n; i++) {
          sumIn[i] += delta[i];
          sumSent[i] += r.value.decoded[i];
          sumNoFb[i] += noFb[i];
        }
        maxResidual = Math.max(maxResidual, norm(fb.residual));
        if (t === 9) relGapAt10 = norm(fb.residual) / norm(sumIn);
      }
      const gap = norm(sumIn.map((v, i) => v - sumSent[i]));
      const gapNoFb = norm(sumIn.map((v, i) => v - sumNoFb[i]));
      // Σ sent = Σ Δ − e exactly, up to f32 rounding of the running residual.
      expect(Math.abs(gap - norm(fb.residual))).toBeLessThan(1e-3 * norm(sumIn));
      expect(maxResidual).toBeLessThan(10 * deltaNorm); // measured: ~5 (topk 5%), ~0.2 (int4)
      expect(gap / norm(sumIn)).toBeLessThan(0.2); // measured: ~0.1, ~0.003
      expect(gap / norm(sumIn)).toBeLessThan(relGapAt10 / 2); // the relative gap shrinks: e is bounded
      expect(gap).toBeLessThan(0.5 * gapNoFb); // measured: ~0.18, ~0.07
    }
  });

  it('compensate/update are the same steps, and non-finite input resets the residual', () => {
    const n = 500;
    const fb1 = new ErrorFeedback(n);
    const fb2 = new ErrorFeedback(n);
    const opts: CodecOptions = { encoding: 'topk', topkFraction: 0.1 };
    for (let t = 0; t < 3; t++) {
      const delta = randomDelta(n, t);
      const r = encodeWithFeedback(delta, fb1, opts);
      const intended = delta.slice();
      fb2.compensate(intended);
      const frame = encodeDelta(intended, opts);
      fb2.update(decodeOk(frame, n), intended);
      expect(r.ok && r.value.frame).toEqual(frame);
      expect(fb2.residual).toEqual(fb1.residual);
    }
    const bad = randomDelta(n, 9);
    bad[7] = NaN;
    const r = encodeWithFeedback(bad, fb1, opts);
    expect(!r.ok && r.error.code).toBe(CodecErrorCode.NON_FINITE);
    expect(fb1.residual.every((v) => v === 0)).toBe(true);
    const wrong = encodeWithFeedback(new Float32Array(n + 1), fb1, opts);
    expect(!wrong.ok && wrong.error.code).toBe(CodecErrorCode.WRONG_SIZE);
  });
});

describe('decode validation', () => {
  const n = 300;
  const x = randomDelta(n, 42);
  const code = (frame: Uint8Array, count = n) => {
    const r = decodeDelta(frame, count);
    return r.ok ? 'ok' : r.error.code;
  };

  it('gives the documented code for each defect', () => {
    const f = encodeDelta(x, { encoding: 'int8' });
    expect(code(f, n + 1)).toBe(CodecErrorCode.WRONG_SIZE);
    expect(code(f.subarray(0, 10))).toBe(CodecErrorCode.TRUNCATED);
    expect(code(f.subarray(0, f.length - 1))).toBe(CodecErrorCode.TRUNCATED);
    const extended = new Uint8Array(f.length + 1);
    extended.set(f);
    expect(code(extended)).toBe(CodecErrorCode.BAD_HEADER);
    const magic = f.slice();
    magic[0] = 0x42;
    expect(code(magic)).toBe(CodecErrorCode.BAD_MAGIC);
    const version = f.slice();
    version[4] = 2;
    expect(code(version)).toBe(CodecErrorCode.VERSION);
    const encoding = f.slice();
    encoding[5] = 9;
    fixCrc(encoding);
    expect(code(encoding)).toBe(CodecErrorCode.BAD_HEADER);
    const crc = f.slice();
    crc[f.length - 1] ^= 1;
    expect(code(crc)).toBe(CodecErrorCode.CRC);
    const headerFlip = f.slice();
    headerFlip[12] = 32; // block size 64 -> 32: the lengths no longer match
    expect(code(headerFlip)).toBe(CodecErrorCode.BAD_HEADER);
    const int8min = f.slice();
    int8min[HEADER_BYTES + 4 * Math.ceil(n / 64) + 5] = 0x80; // -128
    fixCrc(int8min);
    expect(code(int8min)).toBe(CodecErrorCode.CORRUPT);
    const negScale = f.slice();
    negScale[HEADER_BYTES + 3] |= 0x80;
    fixCrc(negScale);
    expect(code(negScale)).toBe(CodecErrorCode.CORRUPT);
    const infScale = f.slice();
    new DataView(infScale.buffer).setFloat32(HEADER_BYTES, Infinity, true);
    fixCrc(infScale);
    expect(code(infScale)).toBe(CodecErrorCode.NON_FINITE);
    const hugeScale = f.slice();
    new DataView(hugeScale.buffer).setFloat32(HEADER_BYTES, 3e38, true); // 127 · scale overflows f32
    fixCrc(hugeScale);
    expect(code(hugeScale)).toBe(CodecErrorCode.NON_FINITE);
  });

  it('rejects bad int4 nibbles, bad topk indices and bad deflate streams', () => {
    const f4 = encodeDelta(x.subarray(0, 65), { encoding: 'int4' }); // odd: one pad nibble
    const nb4 = 2;
    const eight = f4.slice();
    eight[HEADER_BYTES + 4 * nb4] = 0x08;
    fixCrc(eight);
    expect(code(eight, 65)).toBe(CodecErrorCode.CORRUPT);
    const pad = f4.slice();
    pad[pad.length - 1] |= 0x10;
    fixCrc(pad);
    expect(code(pad, 65)).toBe(CodecErrorCode.CORRUPT);

    // topk with k = 3 of 300 at hand-chosen spots: gaps 10, 5, 200 -> indices 9, 14, 214.
    const y = new Float32Array(n);
    y[9] = 3;
    y[14] = -2;
    y[214] = 1;
    const ft = encodeDelta(y, { encoding: 'topk', topkFraction: 0.01, blockSize: 8 });
    const idxAt = HEADER_BYTES + 4 + 3;
    expect(Array.from(ft.subarray(idxAt))).toEqual([10, 5, 0xc8, 0x01]);
    const withIdx = (bytes: number[]) => {
      const g = new Uint8Array(idxAt + bytes.length);
      g.set(ft.subarray(0, idxAt));
      g.set(bytes, idxAt);
      const dv = new DataView(g.buffer);
      dv.setUint32(20, g.length - HEADER_BYTES, true);
      dv.setUint32(24, g.length - HEADER_BYTES, true);
      fixCrc(g);
      return g;
    };
    expect(code(withIdx([10, 5, 0xc8, 0x01]))).toBe('ok');
    expect(code(withIdx([10, 0, 0xc8, 0x01]))).toBe(CodecErrorCode.CORRUPT); // repeated index
    expect(code(withIdx([10, 5, 0xa5, 0x02]))).toBe(CodecErrorCode.CORRUPT); // index 300: out of range
    expect(code(withIdx([10, 5, 0xc8, 0x81]))).toBe(CodecErrorCode.CORRUPT); // runs off the end
    expect(code(withIdx([10, 0x85, 0x00, 0x7f]))).toBe(CodecErrorCode.CORRUPT); // not shortest form
    expect(code(withIdx([10, 5, 1, 1]))).toBe(CodecErrorCode.CORRUPT); // a 4th index: trailing bytes

    const fz = encodeDelta(new Float32Array(n), { encoding: 'f32', deflate: true });
    const broken = fz.slice();
    broken[HEADER_BYTES] |= 0x06; // block type 3 is reserved: invalid
    fixCrc(broken);
    expect(code(broken)).toBe(CodecErrorCode.CORRUPT);
    const short = fz.slice(0, fz.length - 2);
    new DataView(short.buffer).setUint32(20, short.length - HEADER_BYTES, true);
    fixCrc(short);
    expect(code(short)).toBe(CodecErrorCode.CORRUPT);
  });

  it('rejects non-finite input that encode carried into the frame', () => {
    for (const encoding of ENCODINGS) {
      for (const bad of [NaN, Infinity, -Infinity]) {
        const y = x.slice();
        y[77] = bad;
        expect(code(encodeDelta(y, { encoding, topkFraction: 0.1 }))).toBe(CodecErrorCode.NON_FINITE);
      }
    }
  });

  it('survives 1500 seeded mutations of valid frames: never throws, never returns non-finite data', () => {
    const rand = mulberry32(2024);
    const int = (m: number) => Math.floor(rand() * m);
    const configs: CodecOptions[] = [];
    for (const encoding of ENCODINGS) {
      for (const deflate of [false, true]) configs.push({ encoding, deflate, topkFraction: 0.2, blockSize: 16 });
    }
    for (const valueBits of [1, 2] as const)
      configs.push({ encoding: 'sparse', strided: true, valueBits, topkFraction: 0.25, blockSize: 16 });
    const seen = new Map<string, number>();
    let mutations = 0;
    for (const opts of configs) {
      const count = 150 + int(100);
      const valid = encodeDelta(randomDelta(count, int(1e9)), opts);
      for (let m = 0; m < 150; m++) {
        let f = valid.slice();
        let crcFix = false;
        switch (m % 7) {
          case 0: // bit flips anywhere
            for (let b = 1 + int(3); b > 0; b--) f[int(f.length)] ^= 1 << int(8);
            break;
          case 1: // truncation
            f = f.slice(0, int(f.length));
            break;
          case 2: {
            // extension with random bytes
            const g = new Uint8Array(f.length + 1 + int(40));
            g.set(f);
            for (let i = f.length; i < g.length; i++) g[i] = int(256);
            f = g;
            break;
          }
          case 3: {
            // one header field rewritten, CRC recomputed so the header validators are what stands
            const dv = new DataView(f.buffer);
            const field = int(8);
            if (field < 3) f[5 + field] = rand() < 0.5 ? int(256) : int(3);
            else {
              const off = [8, 12, 16, 20, 24][field - 3];
              const old = dv.getUint32(off, true);
              const choices = [int(2 ** 32), old + 1, old - 1, old * 2, old >>> 1, 0, 8, count];
              dv.setUint32(off, choices[int(choices.length)] >>> 0, true);
            }
            crcFix = true;
            break;
          }
          case 4: // payload bytes rewritten, CRC recomputed so the payload validators are tested
            for (let b = 1 + int(4); b > 0 && f.length > HEADER_BYTES; b--) {
              f[HEADER_BYTES + int(f.length - HEADER_BYTES)] = int(256);
            }
            crcFix = true;
            break;
          case 5: // entirely random bytes, sometimes behind a valid magic and version
            f = new Uint8Array(int(2 * valid.length)).map(() => int(256));
            if (f.length >= 5 && rand() < 0.5) f.set([0x41, 0x54, 0x4c, 0x44, 1]);
            break;
          default: // payload cut or grown with lengths and CRC made consistent
            f = f.slice(0, HEADER_BYTES + int(f.length - HEADER_BYTES + 8));
            if (f.length >= HEADER_BYTES) {
              const dv = new DataView(f.buffer);
              dv.setUint32(20, f.length - HEADER_BYTES, true);
              if (rand() < 0.5) dv.setUint32(24, f.length - HEADER_BYTES, true);
              crcFix = true;
            }
        }
        if (crcFix && f.length >= HEADER_BYTES) fixCrc(f);
        mutations++;
        let r: ReturnType<typeof decodeDelta> | undefined;
        expect(() => {
          peekHeader(f);
          r = decodeDelta(f, count);
        }).not.toThrow();
        if (!r) throw new Error('unreachable');
        if (r.ok) {
          expect(r.value.length).toBe(count);
          expect(r.value.every(Number.isFinite)).toBe(true);
          seen.set('ok', (seen.get('ok') ?? 0) + 1);
        } else {
          expect(ALL_CODES.has(r.error.code)).toBe(true);
          seen.set(r.error.code, (seen.get(r.error.code) ?? 0) + 1);
        }
      }
    }
    expect(mutations).toBeGreaterThanOrEqual(1000);
    // The mutations reach every validator, not just the CRC.
    for (const c of ['E_TRUNCATED', 'E_BAD_MAGIC', 'E_BAD_HEADER', 'E_CRC', 'E_CORRUPT']) {
      expect(seen.get(c) ?? 0, `code ${c} never produced`).toBeGreaterThan(0);
    }
  });
});

describe('benchCodec', () => {
  it('reports every encoding with and without deflate', () => {
    const r = benchCodec(5000, { repeats: 1 });
    expect(r.count).toBe(5000);
    expect(r.results).toHaveLength(ENCODINGS.length * 2);
    for (const row of r.results) {
      expect(row.encodeMBps).toBeGreaterThan(0);
      expect(row.decodeMBps).toBeGreaterThan(0);
      expect(row.bytes).toBeGreaterThan(HEADER_BYTES);
    }
    const int8 = r.results.find((row) => row.encoding === 'int8' && !row.deflate);
    expect(int8?.ratioVsF32).toBeGreaterThan(3.5);
  });
});
