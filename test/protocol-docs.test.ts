// docs/protocol.md is enough to write a client: every error code the protocol-facing code can
// send is documented, the hash's worked example holds, frames built by hand from the byte layout in
// the docs (no codec code) decode to the values the docs say, and the tables a client is written
// from (the frame's encodings, the sparse short-chunk rule, the delta's numeric ranges) are read
// from the doc and held against the code, so they cannot drift again.

import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import Fastify from 'fastify';
import {
  ENCODINGS,
  ErrorFeedback,
  crc32,
  decodeDelta,
  encodeDelta,
  encodeWithFeedback,
  peekHeader,
} from '../core/codec/index.ts';
import { chunkKept } from '../core/codec/sparse.ts';
import { Coordinator, SPARSE_UPLINK } from '../core/coord/index.ts';
import { sampleBatch } from '../core/data/dataset.ts';
import { type Assignment, DeltaMetaSchema, type DeltaMeta, ErrorCode, innerLearningRate } from '../core/protocol.ts';
import { mixSeed, mulberry32 } from '../core/random.ts';
import { strictHttp } from '../server/plugins/http-strict.ts';
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
    'server/gateway/socket-events.ts',
    'server/gateway/island-events.ts',
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

  it('the batch and learning-rate worked examples hold', () => {
    const b =
      /mixSeed\(7, 12345, 3, 0\) = (\d+), its draw ([0-9.]+), its offset\s+⌊[0-9.]+ × (\d+)⌋ = (\d+); row 1: seed (\d+), offset (\d+)/.exec(
        DOC,
      );
    expect(b).not.toBeNull();
    expect(mixSeed(7, 12345, 3, 0)).toBe(Number(b![1]));
    expect(mulberry32(mixSeed(7, 12345, 3, 0))()).toBe(Number(b![2]));
    expect(mixSeed(7, 12345, 3, 1)).toBe(Number(b![5]));
    const train = new Uint8Array(1000).map((_, i) => (i * 37 + 11) & 255);
    const batch = sampleBatch(train, 2, 8, 7, 12345, 3);
    expect(1000 - 8 - 1 + 1).toBe(Number(b![3]));
    for (const [row, off] of [
      [0, Number(b![4])],
      [1, Number(b![6])],
    ]) {
      expect(Array.from(batch.inputs.subarray(8 * row, 8 * row + 8))).toEqual(Array.from(train.subarray(off, off + 8)));
      expect(Array.from(batch.targets.subarray(8 * row, 8 * row + 8))).toEqual(
        Array.from(train.subarray(off + 1, off + 9)),
      );
    }
    const lr = /fresh state trains at [^=]+= ([0-9.]+); step 20 with k = 20 at ([0-9.]+)/.exec(DOC);
    expect(lr).not.toBeNull();
    const plan = {
      maxLr: 0.001,
      minLr: 0.0001,
      warmupTokens: 1000,
      totalTokens: 11000,
      tokensStart: 500,
      tokensPerStep: 100,
      localWarmupSteps: 4,
    };
    expect(innerLearningRate(plan, 0, 0).toPrecision(6)).toBe(Number(lr![1]).toPrecision(6));
    expect(innerLearningRate(plan, 20, 20).toPrecision(6)).toBe(Number(lr![2]).toPrecision(6));
    // k counts the AdamW state's steps, not the round's: a kept state is past its warmup
    expect(innerLearningRate(plan, 0, 10)).toBeCloseTo(4 * innerLearningRate(plan, 0, 0), 12);
  });

  it('k from topkFraction rounds half up, of all n (topk) or of C (sparse), as the options table says', () => {
    const row = tableAfter('The other options').find((r) => r[0] === '`topkFraction` f');
    expect(row?.[2]).toContain('k = min(n, max(1, round(f · n)))');
    expect(row?.[2]).toContain('k = min(C, max(1, round(f · C)))');
    const d = new Float32Array(200).map((_, i) => Math.sin(i) + 2);
    const k = (f: Uint8Array) => {
      const h = peekHeader(f);
      return h.ok ? h.value.k : -1;
    };
    // 0.0125 · 200 = 2.5 → 3; 0.0001 · 200 → 1; 1 → all
    for (const [f, want] of [
      [0.0125, 3],
      [0.0001, 1],
      [1, 200],
      [0.0075, 2],
    ])
      expect(k(encodeDelta(d, { encoding: 'topk', topkFraction: f })), `topk ${f}`).toBe(want);
    // sparse, C = 8: 0.3125 · 8 = 2.5 → 3; 0.01 · 8 → 1
    for (const [f, want] of [
      [0.3125, 3],
      [0.01, 1],
      [1, 8],
    ])
      expect(k(encodeDelta(d, { encoding: 'sparse', blockSize: 8, topkFraction: f })), `sparse ${f}`).toBe(want);
  });

  it('the 2-bit split is the ⌈kc/2⌉-th largest kept magnitude; kc = 1 is lower with upper 0', () => {
    expect(DOC).toContain('is the ⌈kc/2⌉-th largest of their');
    const mags = (x: number[], k: number) => {
      const f = encodeDelta(new Float32Array(x), { encoding: 'sparse', blockSize: 8, topkFraction: k / 8 });
      const dv = new DataView(f.buffer, f.byteOffset + 32, 8);
      return [dv.getFloat32(0, true), dv.getFloat32(4, true)];
    };
    // kc = 4 of |x| 8, 6, 4, 2: upper the 2 largest (mean 7), lower 3
    expect(mags([8, 0, -6, 0, 4, 0, -2, 0], 4)).toEqual([3, 7]);
    // kc = 4 with a tie at the split: 8, 6, 6, 2: upper 8, 6, 6
    expect(mags([8, 0, 6, 0, -6, 0, 2, 0], 4)).toEqual([2, Math.fround(20 / 3)]);
    // kc = 3 (odd): the median is upper: 8, 6 | 4 → upper 8, 6, 4? no: ⌈3/2⌉ = 2nd largest = 6, upper 8, 6
    expect(mags([8, 0, 6, 0, 4, 0, 0, 0], 3)).toEqual([4, 7]);
    // kc = 1: the entry is lower, the upper magnitude 0
    expect(mags([0, 0, 5, 0, 1, 0, 0, 0], 1)).toEqual([5, 0]);
  });

  it('every encoding keeps an error-feedback residual; β defaults to 1 (topk too)', () => {
    expect(DOC).toContain('default 1 (no decay) for every encoding, `topk` included');
    const n = 64;
    const d1 = new Float32Array(n).map((_, i) => Math.cos(i) / 3);
    const d2 = new Float32Array(n).map((_, i) => Math.sin(i) / 5);
    for (const encoding of ['int8', 'topk'] as const) {
      const fb = new ErrorFeedback(n);
      const r1 = encodeWithFeedback(d1, fb, { encoding, topkFraction: 0.1 });
      if (!r1.ok) throw new Error(r1.error.message);
      const e1 = d1.map((x, i) => Math.fround(x - r1.value.decoded[i]));
      expect(Array.from(fb.residual), encoding).toEqual(Array.from(e1));
      expect(e1.some((x) => x !== 0)).toBe(true);
      const r2 = encodeWithFeedback(d2, fb, { encoding, topkFraction: 0.1 });
      if (!r2.ok) throw new Error(r2.error.message);
      const want = d2.map((x, i) => Math.fround(Math.fround(e1[i] + x) - r2.value.decoded[i]));
      expect(Array.from(fb.residual), encoding).toEqual(Array.from(want));
    }
  });
});

describe("docs/protocol.md's order of the checks", () => {
  /** One async island on a sparse assignment, θ at version 0. */
  function sparseRun() {
    const N = 512;
    const c = new Coordinator({
      params: new Float32Array(N).fill(0.01),
      config: {
        mode: 'async',
        uplink: { ...SPARSE_UPLINK, blockSize: 64 },
        downlink: { encoding: 'f32', blockSize: 64 },
        batchSize: 2,
        seqLen: 8,
        innerSteps: 4,
        dylu: false,
      },
    });
    const j = c.join({ caps: { engine: 'cpu' } }, 0);
    if (!j.ok || !j.value.assignment) throw new Error('join failed');
    const a: Assignment = j.value.assignment;
    const meta = (o: Partial<DeltaMeta> = {}): DeltaMeta => ({
      islandId: a.islandId,
      roundId: a.roundId,
      baseVersion: 0,
      seq: 1,
      steps: a.innerSteps,
      tokens: a.innerSteps * a.batchSize * a.seqLen,
      lossFirst: 3,
      lossLast: 2,
      lossMean: 2.5,
      elapsedMs: 1000,
      ...o,
    });
    const code = (m: DeltaMeta, frame: Uint8Array) => {
      const r = c.submit({ meta: m, frame }, 10_000);
      return r.ok ? 'accepted' : r.error.code;
    };
    return { c, N, a, meta, code };
  }

  it('an int8 frame against a sparse assignment is E_BAD_CLAIM, whatever the rest of its header holds', () => {
    expect(DOC).toContain('`E_BAD_CLAIM` whatever its flags, block size, k or lengths hold');
    const { N, meta, code, c } = sparseRun();
    const good = encodeDelta(new Float32Array(N).fill(0.001), { encoding: 'int8' });
    const spoilt = (at: number, v: number) => {
      const f = good.slice();
      new DataView(f.buffer).setUint32(at, v, true);
      return f;
    };
    const flags = good.slice();
    flags[6] = 2; // a sparse-only flag on an int8 frame: E_BAD_HEADER to the codec
    for (const [what, f] of [
      ['legal', good],
      ['flags', flags],
      ['block size', spoilt(12, 7)],
      ['k', spoilt(16, 3)],
      ['raw length', spoilt(24, 5)],
      ['stored length', spoilt(20, 5)],
    ] as const) {
      expect(peekHeader(f).ok, what).toBe(what === 'legal');
      expect(code(meta(), f), what).toBe(ErrorCode.BAD_CLAIM);
    }
    // bytes that are no frame at all pass the claim's check and get the codec's code
    const junk = good.slice();
    junk[0] = 0;
    expect(code(meta(), junk)).toBe('E_BAD_MAGIC');
    expect(c.version).toBe(0);
  });

  it('async: a base below the assignment is E_BAD_CLAIM, one above the server E_FUTURE_VERSION', () => {
    expect(DOC).toContain(
      "at least the assignment's (async; below it `E_BAD_CLAIM`) and at most the current version (`E_FUTURE_VERSION`)",
    );
    const { N, meta, code } = sparseRun();
    const f = encodeDelta(new Float32Array(N).fill(0.001), { ...SPARSE_UPLINK, blockSize: 64 });
    expect(code(meta({ baseVersion: 1 }), f)).toBe(ErrorCode.FUTURE_VERSION);
    expect(code(meta({ baseVersion: 5 }), f)).toBe(ErrorCode.FUTURE_VERSION);
  });

  it('HTTP: an unknown path is 404 for every method, beside a static wildcard; a known one 405 with Allow', async () => {
    const app = Fastify();
    strictHttp(app);
    app.get('/*', async (_req, reply) => reply.code(404).send({ error: { code: 'E_NOT_FOUND', message: 'no file' } }));
    app.get('/api/status', async () => ({ ok: true }));
    try {
      for (const method of ['GET', 'POST', 'PUT', 'DELETE'] as const) {
        const r = await app.inject({ method, url: '/api/nothing-here' });
        expect(r.statusCode, method).toBe(404);
        expect(r.json().error.code, method).toBe('E_NOT_FOUND');
      }
      const r = await app.inject({ method: 'POST', url: '/api/status' });
      expect(r.statusCode).toBe(405);
      expect(r.json().error.code).toBe('E_METHOD');
      expect(r.headers.allow).toBe('GET, HEAD');
    } finally {
      await app.close();
    }
  });
});
