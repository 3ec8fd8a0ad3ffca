// The bundled texts by name, a folder of .txt files read in name order, and a folder of token shards (the
// simulator's and the fleet twin's --data DIR) as one dataset in its tokenizer's ids.

import { describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readShard } from '../core/data/shards.ts';
import { loadCorpus } from '../server/run/corpus.ts';
import { prepareMobyShards } from './helpers/shards.ts';
import { readFileSync } from 'node:fs';

const text = (b: ArrayLike<number>) => Buffer.from(Uint8Array.from(b)).toString('latin1');

describe('loadCorpus', () => {
  it("reads the bundled State of the Union addresses as 'sotu', apart from Moby-Dick", () => {
    const sotu = loadCorpus('sotu'),
      moby = loadCorpus('moby-dick');
    expect(sotu.name).toBe('sotu');
    expect(loadCorpus().name).toBe('moby-dick');
    const n = sotu.train.length + sotu.heldOut.length;
    expect(n).toBeGreaterThan(10_000_000); // 233 addresses, not one file of the folder
    expect(text(sotu.train.subarray(0, 40))).toMatch(/^Fellow-Citizens of the Senate/); // 1790 first
    expect(text(sotu.heldOut)).toMatch(/Congress/);
    expect(text(moby.train)).not.toMatch(/Fellow-Citizens of the Senate/);
  });

  it('reads a folder of .txt files in name order and skips other files', () => {
    const dir = mkdtempSync(join(tmpdir(), 'atoll-corpus-'));
    writeFileSync(join(dir, 'b.txt'), 'second ');
    writeFileSync(join(dir, 'a.txt'), 'first ');
    writeFileSync(join(dir, 'a.json'), '{"not":"text"}');
    const ds = loadCorpus(dir);
    expect(text(ds.heldOut)).toBe('first second ');
    expect(ds.name).toMatch(/^atoll-corpus-/);
  });

  it('reads a shard folder: the train shards end to end, the held-out shard; another tokenizer is refused', async () => {
    const root = mkdtempSync(join(tmpdir(), 'atoll-corpus-shards-'));
    const dir = join(root, 'shards');
    await prepareMobyShards(root, dir);
    const shard = (n: string) => readShard(n, new Uint8Array(readFileSync(join(dir, n)))).tokens;
    const ds = loadCorpus(dir);
    expect(ds.tokenizer).toBe('byte');
    expect(Array.from(ds.heldOut)).toEqual(Array.from(shard('data_val_000000.bin')));
    const train = [1, 2, 3].flatMap((i) => Array.from(shard(`data_train_00000${i}.bin`)));
    expect(Array.from(ds.train)).toEqual(train);
    expect(text(ds.train.subarray(0, 6000))).toBe(
      readFileSync(join(root, 'in', 'moby.txt'), 'latin1').slice(6000, 12_000),
    );
    expect(() => loadCorpus(dir, 'gpt2')).toThrow(expect.objectContaining({ code: 'E_TOKENIZER_MISMATCH' }));
    expect(() => loadCorpus('moby-dick', 'gpt2')).toThrow(expect.objectContaining({ code: 'E_DATA_NEEDS_SHARDS' }));
  });
});
