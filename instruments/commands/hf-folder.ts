// Reading a transformers GPT-2 folder from disk (config.json + model.safetensors, the rest ignored):
// `export --format atoll` and `serve --init` both read it here, through core/hf-import.ts.

import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Checkpoint } from '../../core/checkpoint.ts';
import { HF_FILES } from '../../core/hf.ts';
import { importHf } from '../../core/hf-import.ts';

function fail(code: string, message: string): never {
  throw Object.assign(new Error(message), { code });
}

/** The folder as an atoll checkpoint; a missing or unreadable folder is `missingCode`, a bad one importHf's code. */
export function readHfFolder(path: string, label: string, missingCode = 'E_CHECKPOINT_MISSING'): Checkpoint {
  let names: string[];
  try {
    names = readdirSync(path);
  } catch (e) {
    fail(missingCode, `${label} reads a transformers folder: ${(e as Error).message}`);
  }
  const folder: Record<string, Uint8Array> = {};
  for (const n of HF_FILES) {
    if (!names.includes(n)) continue;
    try {
      folder[n] = new Uint8Array(readFileSync(join(path, n)));
    } catch (e) {
      fail(missingCode, `${label}: cannot read '${join(path, n)}': ${(e as Error).message}`);
    }
  }
  const ck = importHf(folder);
  if (!ck.ok) fail(ck.error.code, `${label} ${path}: ${ck.error.message}`);
  return ck.value;
}
