// The shard format (core/data/shards.ts) and the index (core/data/shard-index.ts): llm.c's header
// read and checked, nanoGPT's header-less file told apart, every malformed shard and index refused
// with a code naming it; batches over shards; and a shard folder read by server/run/shard-dir.ts,
// refused whole when one shard or the index is wrong.

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sampleBatch } from '../core/data/dataset.ts';
import { heldOutByName, parseIndex } from '../core/data/shard-index.ts';
import { HEADER_BYTES, encodeShard, readShard, sampleShardBatch, shardHeader } from '../core/data/shards.ts';
import { loadShardDir, sha256 } from '../server/run/shard-dir.ts';

const dir = mkdtempSync(join(tmpdir(), 'atoll-shards-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ids = (n: number, mod = 50257) => Uint16Array.from({ length: n }, (_, i) => (i * 7919) % mod);
const int32 = (...v: number[]) => new Uint8Array(Int32Array.from(v).buffer);

describe('a shard', () => {
  it("is llm.c's: 256 int32 (magic 20240520, version 1, count), then uint16 tokens, read back", () => {
    const t = ids(1000);
    const bytes = encodeShard(t);
    expect(bytes.length).toBe(1024 + 2000);
    expect(Array.from(new Int32Array(bytes.buffer, 0, 4))).toEqual([20240520, 1, 1000, 0]);
    expect(shardHeader(1000)).toEqual(bytes.subarray(0, HEADER_BYTES));
    const s = readShard('a.bin', bytes, 50257);
    expect(s.format).toBe('llmc');
    expect(s.tokens).toEqual(t);
    // an unaligned view (a Buffer from Node's pool) reads the same
    const off = new Uint8Array(bytes.length + 1);
    off.set(bytes, 1);
    expect(readShard('a.bin', off.subarray(1), 50257).tokens).toEqual(t);
  });

  it("is nanoGPT's when its first int32 is no llm.c magic and its size is even", () => {
    const t = ids(501);
    const s = readShard('train.bin', new Uint8Array(t.buffer), 50257);
    expect(s.format).toBe('nanogpt');
    expect(s.tokens).toEqual(t);
  });

  it('is refused by name (E_BAD_SHARD): truncated, trailing bytes, odd size, other versions and magics, ids', () => {
    const good = encodeShard(ids(100));
    const refuse = (bytes: Uint8Array, why: RegExp, vocab = 50257) =>
      expect(() => readShard('s7.bin', bytes, vocab)).toThrow(
        new RegExp(`E_BAD_SHARD: shard 's7.bin': .*${why.source}`),
      );
    refuse(good.subarray(0, good.length - 2), /truncated: its header says 100 tokens/);
    refuse(good.subarray(0, 600), /truncated inside its 1,024-byte header/);
    refuse(Uint8Array.from([...good, 1, 2]), /2 bytes past the 100 tokens/);
    refuse(new Uint8Array(101), /odd/);
    refuse(new Uint8Array(2), /too short/);
    const v2 = good.slice();
    v2.set(int32(20240520, 2));
    refuse(v2, /version 2 \(uint32 tokens/);
    refuse(int32(20240326, 3, 0, 0), /llm.c model checkpoint/);
    refuse(int32(20240522, 1, 0, 0), /llm.c eval file/);
    refuse(good, /token 1 is id 7919, beyond the tokenizer's 256 ids/, 256);
  });

  it('batches over shards: no row crosses a shard end, and over one shard it is sampleBatch', () => {
    const one = ids(5000, 256);
    expect(sampleShardBatch([one], 4, 32, 9, 1, 3)).toEqual(sampleBatch(one, 4, 32, 9, 1, 3));
    const a = Uint16Array.from({ length: 40 }, () => 1);
    const b = Uint16Array.from({ length: 40 }, () => 2);
    for (let step = 0; step < 20; step++) {
      const batch = sampleShardBatch([a, b], 8, 16, 1, 0, step);
      for (let r = 0; r < 8; r++) {
        const row = new Set([
          ...batch.inputs.subarray(r * 16, r * 16 + 16),
          ...batch.targets.subarray(r * 16, r * 16 + 16),
        ]);
        expect(row.size).toBe(1);
      }
    }
    expect(() => sampleShardBatch([ids(16)], 1, 16, 1, 0, 0)).toThrow(/E_DATA_TOO_SMALL/);
  });
});

describe('the index', () => {
  const shard = (name: string, n: number) => ({ name, tokens: n, bytes: 1024 + 2 * n, sha256: 'a'.repeat(64) });
  const index = (o: Record<string, unknown> = {}) =>
    JSON.stringify({
      format: 'atoll-shards',
      version: 1,
      tokenizer: 'gpt2',
      vocabSize: 50257,
      heldOut: 'v.bin',
      shards: [shard('v.bin', 10), shard('t.bin', 20)],
      ...o,
    });

  it('is read when whole, and refused field by field (E_BAD_INDEX)', () => {
    expect(parseIndex(index()).shards.map((s) => s.name)).toEqual(['v.bin', 't.bin']);
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ format: 'x' }, /format "x"/],
      [{ tokenizer: 'llama' }, /unknown tokenizer "llama"/],
      [{ vocabSize: 256 }, /vocabSize 256 is not the gpt2 tokenizer's 50257/],
      [{ heldOut: 'z.bin' }, /heldOut "z.bin" is not one of its shards/],
      [{ shards: [shard('v.bin', 10)] }, /one shard only/],
      [{ shards: [shard('v.bin', 10), shard('v.bin', 1)] }, /listed twice/],
      [{ shards: [shard('../v.bin', 10), shard('t.bin', 1)] }, /a plain file name/],
      [{ shards: [{ ...shard('v.bin', 10), sha256: 'x' }, shard('t.bin', 1)] }, /sha256/],
      [{ shards: [shard('v.bin', 0), shard('t.bin', 1)] }, /tokens: a positive integer/],
    ];
    for (const [o, why] of bad)
      expect(() => parseIndex(index(o))).toThrow(new RegExp(`E_BAD_INDEX: index.json: .*${why.source}`));
    expect(() => parseIndex('{')).toThrow(/E_BAD_INDEX: index.json: not JSON/);
  });

  it("with none, the held-out shard is the one named val (llm.c's fineweb_val_000000.bin, nanoGPT's val.bin)", () => {
    expect(heldOutByName(['fineweb_train_000001.bin', 'fineweb_val_000000.bin'])).toBe('fineweb_val_000000.bin');
    expect(heldOutByName(['train.bin', 'val.bin'])).toBe('val.bin');
    expect(() => heldOutByName(['train.bin', 'interval.bin'])).toThrow(/E_NO_HELD_OUT/);
  });
});

describe('a shard folder', () => {
  /** A folder of a held-out and two train shards, with its index. */
  function folder(name: string): string {
    const d = join(dir, name);
    rmSync(d, { recursive: true, force: true });
    mkdirSync(d);
    const shards = [ids(300), ids(400), ids(500)].map((t, k) => {
      const bytes = encodeShard(t);
      const n = `d_${k ? 'train' : 'val'}_${k}.bin`;
      writeFileSync(join(d, n), bytes);
      return { name: n, tokens: t.length, bytes: bytes.length, sha256: sha256(bytes) };
    });
    const idx = {
      format: 'atoll-shards',
      version: 1,
      tokenizer: 'gpt2',
      vocabSize: 50257,
      heldOut: shards[0].name,
      shards,
    };
    writeFileSync(join(d, 'index.json'), JSON.stringify(idx));
    return d;
  }
  const edit = (d: string, f: (o: { shards: { tokens: number; bytes: number }[] }) => void) => {
    const o = JSON.parse(readFileSync(join(d, 'index.json'), 'utf8'));
    f(o);
    writeFileSync(join(d, 'index.json'), JSON.stringify(o));
  };

  it('is read whole: held-out apart, train shards in order', () => {
    const ds = loadShardDir(folder('ok'), 'gpt2');
    expect(ds.heldOut.length).toBe(300);
    expect(ds.trainShards.map((s) => s.length)).toEqual([400, 500]);
  });

  it('is refused by the shard or the index at fault, with its code', () => {
    const cases: [string, (d: string) => void, RegExp][] = [
      ['flipped', (d) => flip(join(d, 'd_train_2.bin'), 1500), /E_BAD_SHARD: shard 'd_train_2.bin': its SHA-256/],
      ['cut', (d) => cut(join(d, 'd_train_1.bin'), 10), /E_BAD_SHARD: shard 'd_train_1.bin': truncated/],
      [
        'gone',
        (d) => rmSync(join(d, 'd_train_1.bin')),
        /E_BAD_SHARD: shard 'd_train_1.bin': cannot read it \(ENOENT\)/,
      ],
      [
        'count',
        (d) => edit(d, (o) => void (o.shards[1].tokens = 401)),
        /E_BAD_INDEX: index.json says shard 'd_train_1.bin' has 401/,
      ],
      [
        'bytes',
        (d) => edit(d, (o) => void (o.shards[1].bytes = 9)),
        /E_BAD_INDEX: index.json says shard 'd_train_1.bin' is 9 bytes/,
      ],
    ];
    for (const [name, spoil, why] of cases) {
      const d = folder(name);
      spoil(d);
      expect(() => loadShardDir(d, 'gpt2')).toThrow(why);
    }
    expect(() => loadShardDir(folder('tok'), 'byte')).toThrow(/E_TOKENIZER_MISMATCH: .*gpt2 ids \(50257\)/);
  });
});

function flip(path: string, at: number): void {
  const b = readFileSync(path);
  b[at] ^= 0xff;
  writeFileSync(path, b);
}

function cut(path: string, bytes: number): void {
  const b = readFileSync(path);
  writeFileSync(path, b.subarray(0, b.length - bytes));
}
