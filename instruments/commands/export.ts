// `atoll export`: a checkpoint to a transformers folder (--format hf), or such a folder back to
// an atoll checkpoint (--format atoll).

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodeCheckpoint, encodeCheckpoint } from '../../core/checkpoint.ts';
import { exportHf } from '../../core/hf.ts';
import { gpt2HfTokenizer } from '../../core/hf-tokenizer.ts';
import { checkpointTokenizer } from '../../core/data/tokenizer.ts';
import { readHfFolder } from './hf-folder.ts';
import { assertWritable } from '../../server/fsutil.ts';

export interface ExportCliOptions {
  checkpoint: string;
  format: 'hf' | 'atoll';
  out: string;
}

function fail(code: string, message: string): never {
  throw Object.assign(new Error(message), { code });
}

function read(path: string): Uint8Array {
  try {
    return new Uint8Array(readFileSync(path));
  } catch (e) {
    fail('E_CHECKPOINT_MISSING', `cannot read '${path}': ${(e as Error).message}`);
  }
}

/** Writes the export; returns the paths written. A gpt2 model's folder gets GPT-2's vocab.json and merges.txt. */
export async function exportCheckpoint(o: ExportCliOptions): Promise<string[]> {
  assertWritable('--out', o.out, o.format === 'hf' ? 'folder' : 'file');
  if (o.format === 'hf') {
    const ck = decodeCheckpoint(read(o.checkpoint));
    if (!ck.ok) fail(ck.error.code, `${o.checkpoint}: ${ck.error.message}`);
    const tok = checkpointTokenizer(ck.value.meta, ck.value.config);
    const files = exportHf(ck.value, tok === 'gpt2' ? await gpt2HfTokenizer(ck.value.config.blockSize) : undefined);
    mkdirSync(o.out, { recursive: true }); // its parent exists (assertWritable): no recursive walk up
    return Object.entries(files).map(([name, bytes]) => {
      writeFileSync(join(o.out, name), bytes);
      return join(o.out, name);
    });
  }
  writeFileSync(o.out, encodeCheckpoint(readHfFolder(o.checkpoint, '--format atoll')));
  return [o.out];
}
