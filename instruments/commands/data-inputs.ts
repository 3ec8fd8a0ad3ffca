// `atoll data prepare`'s inputs: text files (.txt, .md: a file is one document), .jsonl (a document
// per line, its `text` field) and .parquet (a document per row, its `text` column, read through
// hyparquet one row group at a time); folders are walked recursively for those four kinds, in path
// order. Everything is checked before the first token is written (E_BAD_INPUT names the file).

import { createReadStream, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { asyncBufferFromFile, type FileMetaData, parquetMetadataAsync, parquetReadObjects } from 'hyparquet';

export type InputKind = 'text' | 'jsonl' | 'parquet';

export interface InputFile {
  path: string;
  kind: InputKind;
  size: number;
  mtimeMs: number;
}

/** A document of the stream: its file's and its own position, and how many input bytes it stands for. */
export interface Doc {
  file: number;
  doc: number;
  text: string;
  bytes: number;
}

const KINDS: Record<string, InputKind> = { '.txt': 'text', '.md': 'text', '.jsonl': 'jsonl', '.parquet': 'parquet' };
/** Codecs hyparquet decodes with no add-on (FineWeb's parquet is snappy). */
const CODECS = new Set(['UNCOMPRESSED', 'SNAPPY']);

export class InputError extends Error {
  readonly code = 'E_BAD_INPUT';
  constructor(message: string) {
    super(`E_BAD_INPUT: ${message}`);
  }
}

const kindOf = (p: string): InputKind | undefined => KINDS[/\.[^./]+$/.exec(p)?.[0].toLowerCase() ?? ''];

function walk(dir: string, out: string[]): void {
  for (const e of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const p = join(dir, e.name);
    if (e.isDirectory()) walk(p, out);
    else if (e.isFile() && kindOf(p)) out.push(p);
  }
}

/** The inputs' files in order: a folder's .txt/.md/.jsonl/.parquet files (recursively), then the next input. */
export function expandInputs(inputs: readonly string[]): InputFile[] {
  if (inputs.length === 0) throw new InputError('no INPUT given (text files, folders, .jsonl or .parquet)');
  const paths: string[] = [];
  for (const i of inputs) {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(i);
    } catch {
      throw new InputError(`'${i}' does not exist`);
    }
    if (st.isDirectory()) {
      const before = paths.length;
      walk(i, paths);
      if (paths.length === before) throw new InputError(`folder '${i}' holds no .txt, .md, .jsonl or .parquet file`);
    } else if (kindOf(i)) paths.push(i);
    else throw new InputError(`'${i}': not a .txt, .md, .jsonl or .parquet file`);
  }
  return paths.map((p) => {
    const st = statSync(p);
    return { path: resolve(p), kind: kindOf(p)!, size: st.size, mtimeMs: st.mtimeMs };
  });
}

async function parquetMeta(
  f: InputFile,
): Promise<{ meta: FileMetaData; file: Awaited<ReturnType<typeof asyncBufferFromFile>> }> {
  const file = await asyncBufferFromFile(f.path);
  let meta: FileMetaData;
  try {
    meta = await parquetMetadataAsync(file);
  } catch (e) {
    throw new InputError(`${f.path}: not a readable parquet file (${(e as Error).message})`);
  }
  const col = meta.schema.find((s) => s.name === 'text' && s.type !== undefined);
  if (col?.type !== 'BYTE_ARRAY') throw new InputError(`${f.path}: no string column named 'text'`);
  for (const g of meta.row_groups)
    for (const c of g.columns) {
      const codec = c.meta_data?.codec;
      if (c.meta_data?.path_in_schema.join('.') === 'text' && codec && !CODECS.has(codec))
        throw new InputError(`${f.path}: column 'text' is ${codec}-compressed; readable: uncompressed or snappy`);
    }
  return { meta, file };
}

function jsonlText(f: InputFile, line: string, n: number): string {
  let o: unknown;
  try {
    o = JSON.parse(line);
  } catch {
    throw new InputError(`${f.path}:${n}: not JSON`);
  }
  const text = (o as { text?: unknown } | null)?.text;
  if (typeof text !== 'string') throw new InputError(`${f.path}:${n}: no string field 'text'`);
  return text;
}

/** One file's documents, from document `from` on (those before are read but not yielded). */
async function* fileDocs(f: InputFile, file: number, from: number): AsyncGenerator<Doc> {
  if (f.kind === 'text') {
    if (from === 0) yield { file, doc: 0, text: readFileSync(f.path, 'utf8'), bytes: f.size };
    return;
  }
  let doc = 0;
  if (f.kind === 'jsonl') {
    let n = 0;
    for await (const line of createInterface({
      input: createReadStream(f.path),
      crlfDelay: Number.POSITIVE_INFINITY,
    })) {
      n++;
      if (line.trim() === '') continue;
      const text = jsonlText(f, line, n);
      if (doc >= from) yield { file, doc, text, bytes: Buffer.byteLength(line) + 1 };
      doc++;
    }
    return;
  }
  const { meta, file: buf } = await parquetMeta(f);
  const perRow = f.size / Math.max(1, Number(meta.num_rows));
  let rowStart = 0;
  for (const g of meta.row_groups) {
    const rowEnd = rowStart + Number(g.num_rows);
    if (rowEnd > from) {
      const rows = await parquetReadObjects({ file: buf, metadata: meta, columns: ['text'], rowStart, rowEnd });
      for (const r of rows) {
        const text = r.text;
        if (typeof text !== 'string') throw new InputError(`${f.path}: row ${doc}: 'text' is not a string`);
        if (doc >= from) yield { file, doc, text, bytes: perRow };
        doc++;
      }
    } else doc = rowEnd;
    rowStart = rowEnd;
  }
}

/** Every document of the inputs, from (file, doc) on. */
export async function* documents(files: readonly InputFile[], from = { file: 0, doc: 0 }): AsyncGenerator<Doc> {
  for (let i = from.file; i < files.length; i++) yield* fileDocs(files[i], i, i === from.file ? from.doc : 0);
}

/** Checks every input before any work: parquet's footer and column, every .jsonl line's `text`. */
export async function checkInputs(files: readonly InputFile[]): Promise<void> {
  for (const f of files) {
    if (f.kind === 'parquet') await parquetMeta(f);
    else if (f.kind === 'jsonl') for await (const _ of fileDocs(f, 0, Number.MAX_SAFE_INTEGER));
  }
}
