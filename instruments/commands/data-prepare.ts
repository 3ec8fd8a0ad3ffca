// `atoll data prepare`: text, .jsonl and .parquet to token shards in llm.c's format, and their index.
//
// The token stream is every document's ids, each document led by the tokenizer's end-of-text id
// (gpt2: 50256, as llm.c and nanoGPT write it; byte: no separator, as a folder of .txt is read).
// The first --held-out-tokens of it are shard 0, `data_val_000000.bin`, the held-out shard (as in
// llm.c, where shard 0 is val); the rest is cut into train shards of --shard-tokens each
// (`data_train_000001.bin`, …; the last one shorter). Documents run across shard ends.
//
// Resume: after each shard, DIR/prepare-state.json records the shard (size, SHA-256) and where the
// stream stands after it (file, document, token within it). A new run with the same inputs (path,
// size, mtime) and flags re-hashes the shards it lists, keeps the good ones and goes on from the
// last good one's end; other inputs or flags are refused. index.json is written last.

import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { SingleBar, Presets } from 'cli-progress';
import { INDEX_FILE, INDEX_FORMAT, type ShardEntry, type ShardIndex } from '../../core/data/shard-index.ts';
import { encodeShard } from '../../core/data/shards.ts';
import { type TokenizerName, VOCAB_SIZE, loadTokenizer } from '../../core/data/tokenizer.ts';
import { assertWritable, writeFileAtomic } from '../../server/fsutil.ts';
import { sha256 } from '../../server/run/shard-dir.ts';
import { type InputFile, checkInputs, documents, expandInputs } from './data-inputs.ts';

export const STATE_FILE = 'prepare-state.json';

export interface PrepareOptions {
  tokenizer: TokenizerName;
  out: string;
  inputs: string[];
  shardTokens: number;
  heldOutTokens: number;
}

interface Position {
  file: number;
  doc: number;
  tok: number;
}

interface State {
  settings: { tokenizer: string; shardTokens: number; heldOutTokens: number; inputs: Omit<InputFile, 'kind'>[] };
  shards: (ShardEntry & { end: Position })[];
  complete: boolean;
}

export interface PrepareReport extends ShardIndex {
  out: string;
  tokens: number;
  /** Shards kept from a stopped run (verified, not rewritten). */
  resumed: number;
}

const fail = (code: string, message: string): never => {
  throw Object.assign(new Error(`${code}: ${message}`), { code });
};

const shardName = (k: number) => `data_${k === 0 ? 'val' : 'train'}_${String(k).padStart(6, '0')}.bin`;

/** The stopped run's state if it is this run's; its shards up to the first that fails its hash. */
function resumeState(o: PrepareOptions, settings: State['settings']): State {
  const fresh: State = { settings, shards: [], complete: false };
  if (!existsSync(o.out)) return fresh;
  const path = join(o.out, STATE_FILE);
  if (!existsSync(path)) {
    if (readdirSync(o.out).length > 0)
      fail('E_OUT_NOT_EMPTY', `--out ${o.out} holds files and no ${STATE_FILE}: give a new or empty folder`);
    return fresh;
  }
  // a kill mid-write leaves a temp file (writeFileAtomic's), never a torn shard: drop it
  for (const f of readdirSync(o.out)) if (/\.tmp-\d+$/.test(f)) rmSync(join(o.out, f));
  const old = JSON.parse(readFileSync(path, 'utf8')) as State;
  if (JSON.stringify(old.settings) !== JSON.stringify(settings))
    fail(
      'E_PREPARE_MISMATCH',
      `--out ${o.out} holds a prepare of other inputs or flags (an input changed, or --tokenizer, --shard-tokens, ` +
        '--held-out-tokens differ): give a new folder, or the same inputs and flags to resume',
    );
  const good: State['shards'] = [];
  for (const s of old.shards) {
    const p = join(o.out, s.name);
    if (!existsSync(p)) break;
    const bytes = new Uint8Array(readFileSync(p));
    if (bytes.length !== s.bytes || sha256(bytes) !== s.sha256) break;
    good.push(s);
  }
  return { settings, shards: good, complete: old.complete && good.length === old.shards.length };
}

/** Progress on stderr: a bar on a TTY, else a line every 5 s and one at the end. */
function progress(total: number) {
  const tty = !!process.stderr.isTTY;
  const bar = tty
    ? new SingleBar(
        { format: 'prepare |{bar}| {percentage}% | {tokens} tokens | {shards} shards', stream: process.stderr },
        Presets.shades_classic,
      )
    : null;
  bar?.start(total, 0, { tokens: 0, shards: 0 });
  let last = 0;
  const line = (done: number, tokens: number, shards: number) =>
    process.stderr.write(
      `prepare: ${((100 * done) / Math.max(1, total)).toFixed(1)}% of ${total.toLocaleString()} input bytes, ` +
        `${tokens.toLocaleString()} tokens, ${shards} shards\n`,
    );
  return {
    tick(done: number, tokens: number, shards: number) {
      if (bar) bar.update(Math.min(done, total), { tokens: tokens.toLocaleString(), shards });
      else if (Date.now() - last >= 5000) {
        last = Date.now();
        line(done, tokens, shards);
      }
    },
    end(tokens: number, shards: number) {
      if (bar) {
        bar.update(total, { tokens: tokens.toLocaleString(), shards });
        bar.stop();
      } else line(total, tokens, shards);
    },
  };
}

export async function prepare(o: PrepareOptions): Promise<PrepareReport> {
  assertWritable('--out', o.out, 'folder');
  const files = expandInputs(o.inputs);
  await checkInputs(files); // bad input is refused before the first token
  const settings: State['settings'] = {
    tokenizer: o.tokenizer,
    shardTokens: o.shardTokens,
    heldOutTokens: o.heldOutTokens,
    inputs: files.map(({ path, size, mtimeMs }) => ({ path, size, mtimeMs })),
  };
  const state = resumeState(o, settings);
  const resumed = state.shards.length;
  const tok = await loadTokenizer(o.tokenizer);
  const cap = (k: number) => (k === 0 ? o.heldOutTokens : o.shardTokens);
  const save = () => writeFileAtomic(join(o.out, STATE_FILE), JSON.stringify(state, null, 1) + '\n');
  const flush = (tokens: Uint16Array, end: Position) => {
    const name = shardName(state.shards.length);
    const bytes = encodeShard(tokens);
    writeFileAtomic(join(o.out, name), bytes);
    state.shards.push({ name, tokens: tokens.length, bytes: bytes.length, sha256: sha256(bytes), end });
    save();
  };
  let count = state.shards.reduce((a, s) => a + s.tokens, 0);
  if (!state.complete) {
    mkdirSync(o.out, { recursive: true }); // its parent exists (assertWritable)
    const total = files.reduce((a, f) => a + f.size, 0);
    const bar = progress(total);
    const from = state.shards.at(-1)?.end ?? { file: 0, doc: 0, tok: 0 };
    let buf = new Uint16Array(cap(state.shards.length));
    let fill = 0;
    let done = files.slice(0, from.file).reduce((a, f) => a + f.size, 0);
    for await (const d of documents(files, from)) {
      done += d.bytes;
      if (d.text === '') continue;
      const body = tok.encode(d.text);
      const lead = tok.eot === null ? 0 : 1;
      const ids = new Uint16Array(body.length + lead);
      if (tok.eot !== null) ids[0] = tok.eot;
      ids.set(body, lead);
      let i = d.file === from.file && d.doc === from.doc ? from.tok : 0;
      while (i < ids.length) {
        const n = Math.min(ids.length - i, buf.length - fill);
        buf.set(ids.subarray(i, i + n), fill);
        fill += n;
        i += n;
        count += n;
        if (fill === buf.length) {
          flush(buf, i < ids.length ? { file: d.file, doc: d.doc, tok: i } : { file: d.file, doc: d.doc + 1, tok: 0 });
          buf = new Uint16Array(cap(state.shards.length));
          fill = 0;
        }
      }
      bar.tick(done, count, state.shards.length);
    }
    if (fill > 0) flush(buf.subarray(0, fill), { file: files.length, doc: 0, tok: 0 });
    bar.end(count, state.shards.length);
    if (state.shards.length < 2)
      fail(
        'E_DATA_TOO_SMALL',
        `the inputs hold ${count.toLocaleString()} ${o.tokenizer} tokens, all in the held-out shard ` +
          `(--held-out-tokens ${o.heldOutTokens.toLocaleString()}): give more text or a smaller --held-out-tokens`,
      );
    state.complete = true;
    save();
  }
  const index: ShardIndex = {
    format: INDEX_FORMAT,
    version: 1,
    tokenizer: o.tokenizer,
    vocabSize: VOCAB_SIZE[o.tokenizer],
    heldOut: state.shards[0].name,
    shards: state.shards.map(({ name, tokens, bytes, sha256 }) => ({ name, tokens, bytes, sha256 })),
  };
  writeFileAtomic(join(o.out, INDEX_FILE), JSON.stringify(index, null, 1) + '\n');
  return { ...index, out: o.out, tokens: count, resumed };
}
