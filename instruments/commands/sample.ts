// `atoll sample`: print text generated from a checkpoint.

import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { decodeCheckpoint } from '../../core/checkpoint.ts';
import { checkpointTokenizer, loadTokenizer } from '../../core/data/tokenizer.ts';
import { generate } from '../../core/sample.ts';
import type { EngineKind } from '../../core/protocol.ts';
import { createEngine } from '../../client/island/engine/node-engines.ts';

export interface SampleCliOptions {
  checkpoint: string;
  prompt: string;
  tokens: number;
  temperature: number;
  seed: number;
  engine: EngineKind;
}

export async function sampleFromCheckpoint(o: SampleCliOptions): Promise<string> {
  if (existsSync(o.checkpoint) && statSync(o.checkpoint).isDirectory()) {
    const hf = existsSync(join(o.checkpoint, 'config.json'));
    throw Object.assign(
      new Error(
        hf
          ? `'${o.checkpoint}' is a transformers folder, not an atoll checkpoint: ` +
              `npx atoll export --checkpoint ${o.checkpoint} --format atoll --out ckpt.safetensors first, ` +
              'then sample that'
          : `'${o.checkpoint}' is a folder: give a .safetensors checkpoint ` +
              "(atoll train --out, or a run's checkpoints/)",
      ),
      { code: 'E_CHECKPOINT_FOLDER' },
    );
  }
  let bytes: Uint8Array;
  try {
    bytes = new Uint8Array(readFileSync(o.checkpoint));
  } catch (e) {
    throw Object.assign(new Error(`cannot read checkpoint '${o.checkpoint}': ${(e as Error).message}`), {
      code: 'E_CHECKPOINT_MISSING',
    });
  }
  const ck = decodeCheckpoint(bytes);
  if (!ck.ok) throw Object.assign(new Error(`${o.checkpoint}: ${ck.error.message}`), { code: ck.error.code });
  const tok = await loadTokenizer(checkpointTokenizer(ck.value.meta, ck.value.config));
  const engine = await createEngine(o.engine, { config: ck.value.config, maxBatch: 1 });
  try {
    await engine.setParams(ck.value.params);
    const out = await generate(engine, tok.encode(o.prompt), {
      tokens: o.tokens,
      temperature: o.temperature,
      seed: o.seed,
    });
    return tok.decode(out);
  } finally {
    engine.destroy();
  }
}
