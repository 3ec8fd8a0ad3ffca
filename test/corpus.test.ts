// The bundled texts by name, and a folder of .txt files read in name order.

import { describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadCorpus } from '../server/run/corpus.ts';

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
});
