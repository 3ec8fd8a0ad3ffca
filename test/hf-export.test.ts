// `atoll export`: a checkpoint as a transformers GPT-2 folder and back.
//
// transformers is not installed here, so the folder is checked against what GPT2LMHeadModel and
// AutoTokenizer read: the exact tensor names and shapes of its state dict (lm_head tied, so not
// stored), Conv1D weights as (in, out), metadata format "pt", config.json; and the logits of an
// independent GPT-2 forward written the transformers way (x @ W + b on the exported tensors,
// gelu_new) against atoll's CPU engine.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type Checkpoint, decodeCheckpoint, encodeCheckpoint } from '../core/checkpoint.ts';
import { hashParams } from '../core/coord/index.ts';
import { byteSymbols, exportHf } from '../core/hf.ts';
import { importHf } from '../core/hf-import.ts';
import { type GPTConfig, paramLayout } from '../core/model/config.ts';
import { mulberry32 } from '../core/random.ts';
import { readSafetensors, tensorAsFloat32 } from '../core/safetensors.ts';
import { createEngine } from '../client/island/engine/node-engines.ts';

const ROOT = join(import.meta.dirname, '..');
const config: GPTConfig = { vocabSize: 256, blockSize: 16, nLayer: 2, nHead: 2, nEmbd: 16 };
const dir = mkdtempSync(join(tmpdir(), 'atoll-hf-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Every parameter random (biases and LN gains too), so a misplaced tensor changes the logits. */
function randomCheckpoint(): Checkpoint {
  const rand = mulberry32(7);
  const params = new Float32Array(paramLayout(config).total);
  for (let i = 0; i < params.length; i++) params[i] = (rand() - 0.5) * 0.4;
  return { config, params, meta: { version: '12', run: 'test' }, extra: {} };
}

const ck = randomCheckpoint();
const folder = exportHf(ck);
const st = readSafetensors(folder['model.safetensors']);
if (!st.ok) throw new Error(st.error.message);
const hf = st.value.tensors;
const W = (name: string) => tensorAsFloat32(hf[name]);

describe('atoll export --format hf', () => {
  it('writes the state dict of GPT2LMHeadModel: names, shapes, metadata', () => {
    const C = config.nEmbd;
    const want: Record<string, number[]> = {
      'transformer.wte.weight': [256, C],
      'transformer.wpe.weight': [16, C],
      'transformer.ln_f.weight': [C],
      'transformer.ln_f.bias': [C],
    };
    for (let l = 0; l < 2; l++) {
      const p = `transformer.h.${l}.`;
      Object.assign(want, {
        [p + 'ln_1.weight']: [C],
        [p + 'ln_1.bias']: [C],
        [p + 'ln_2.weight']: [C],
        [p + 'ln_2.bias']: [C],
        [p + 'attn.c_attn.weight']: [C, 3 * C],
        [p + 'attn.c_attn.bias']: [3 * C],
        [p + 'attn.c_proj.weight']: [C, C],
        [p + 'attn.c_proj.bias']: [C],
        [p + 'mlp.c_fc.weight']: [C, 4 * C],
        [p + 'mlp.c_fc.bias']: [4 * C],
        [p + 'mlp.c_proj.weight']: [4 * C, C],
        [p + 'mlp.c_proj.bias']: [C],
      });
    }
    const got = Object.fromEntries(Object.entries(hf).map(([k, v]) => [k, v.shape]));
    expect(got).toEqual(want); // no lm_head.weight: tied to wte
    expect(Object.values(hf).every((t) => t.dtype === 'F32')).toBe(true);
    expect(st.value.metadata.format).toBe('pt');
    expect(st.value.metadata['atoll.version']).toBe('12');
    expect(Object.keys(folder).sort()).toEqual([
      'config.json',
      'model.safetensors',
      'special_tokens_map.json',
      'tokenizer.json',
      'tokenizer_config.json',
    ]);
  });

  it('transposes the four Conv1D weights to (in, out) and unstacks layers', () => {
    const C = config.nEmbd;
    const L = paramLayout(config).byName;
    const at = (name: string, l: number, o: number, i: number, inDim: number, outDim: number) =>
      ck.params[L[name].offset + l * inDim * outDim + o * inDim + i];
    for (const [a, h, inDim, outDim] of [
      ['qkvw', 'attn.c_attn.weight', C, 3 * C],
      ['attprojw', 'attn.c_proj.weight', C, C],
      ['fcw', 'mlp.c_fc.weight', C, 4 * C],
      ['fcprojw', 'mlp.c_proj.weight', 4 * C, C],
    ] as const) {
      const w = W(`transformer.h.1.${h}`);
      for (const [o, i] of [
        [0, 1],
        [outDim - 1, 0],
        [3, inDim - 2],
      ])
        expect(w[i * outDim + o]).toBe(at(a, 1, o, i, inDim, outDim));
    }
    expect(W('transformer.h.1.ln_2.bias')).toEqual(ck.params.subarray(L.ln2b.offset + C, L.ln2b.offset + 2 * C));
  });

  it('config.json and a byte-level tokenizer whose ids are the UTF-8 bytes', () => {
    const cfg = JSON.parse(new TextDecoder().decode(folder['config.json']));
    expect(cfg).toMatchObject({
      model_type: 'gpt2',
      architectures: ['GPT2LMHeadModel'],
      vocab_size: 256,
      n_positions: 16,
      n_embd: 16,
      n_layer: 2,
      n_head: 2,
      activation_function: 'gelu_new',
      layer_norm_epsilon: 1e-5,
      tie_word_embeddings: true,
    });
    expect(cfg.bos_token_id).toBeLessThan(256);
    expect(cfg.eos_token_id).toBeLessThan(256);
    const tok = JSON.parse(new TextDecoder().decode(folder['tokenizer.json']));
    expect(tok.model.type).toBe('BPE');
    expect(tok.model.merges).toEqual([]);
    expect(tok.pre_tokenizer.type).toBe('ByteLevel');
    const vocab = tok.model.vocab as Record<string, number>;
    expect(new Set(Object.values(vocab)).size).toBe(256);
    // ByteLevel maps each byte to its symbol; the vocabulary maps the symbol back to the byte.
    const sym = byteSymbols();
    const text = 'Call me Ishmael — ÿ\n\t';
    const bytes = [...new TextEncoder().encode(text)];
    expect(bytes.map((b) => vocab[sym[b]])).toEqual(bytes);
    const tc = JSON.parse(new TextDecoder().decode(folder['tokenizer_config.json']));
    expect(tc.tokenizer_class).toBe('PreTrainedTokenizerFast');
    expect(tc.model_max_length).toBe(16);
  });

  it('gives the logits of atoll\u2019s own forward, computed the transformers way', async () => {
    const context = new TextEncoder().encode('the whale, ahoy');
    const engine = await createEngine('cpu', { config, maxBatch: 1 });
    await engine.setParams(ck.params);
    const want = await engine.nextTokenLogits(context);
    engine.destroy();
    const got = hfForward(context);
    let maxDiff = 0;
    for (let v = 0; v < 256; v++) maxDiff = Math.max(maxDiff, Math.abs(got[v] - want[v]));
    expect(maxDiff).toBeLessThan(1e-4);
  });

  it('export → import (--format atoll) gives the same θ hash, through the CLI', () => {
    const back = importHf(folder);
    if (!back.ok) throw new Error(back.error.message);
    expect(hashParams(back.value.params)).toBe(hashParams(ck.params));
    expect(back.value.config).toEqual(config);

    const src = join(dir, 'ck.safetensors');
    writeFileSync(src, encodeCheckpoint(ck));
    const atoll = (...args: string[]) =>
      execFileSync(process.execPath, [join(ROOT, 'bin/atoll.js'), 'export', ...args], { cwd: ROOT, stdio: 'pipe' });
    atoll('--checkpoint', src, '--format', 'hf', '--out', join(dir, 'hf'));
    expect(readdirSync(join(dir, 'hf')).sort()).toContain('model.safetensors');
    atoll('--checkpoint', join(dir, 'hf'), '--format', 'atoll', '--out', join(dir, 'back.safetensors'));
    const round = decodeCheckpoint(new Uint8Array(readFileSync(join(dir, 'back.safetensors'))));
    if (!round.ok) throw new Error(round.error.message);
    expect(hashParams(round.value.params)).toBe(hashParams(ck.params));
    expect(round.value.meta.version).toBe('12');
  });
});

/** GPT-2 as transformers computes it, on the exported tensors: Conv1D is x @ W (W: in × out). */
function hfForward(tokens: Uint8Array): Float32Array {
  const { nEmbd: C, nHead: NH, nLayer: L } = config;
  const T = tokens.length;
  const hs = C / NH;
  const conv = (x: Float64Array, w: Float32Array, b: Float32Array, nIn: number, nOut: number) => {
    const y = new Float64Array(T * nOut);
    for (let t = 0; t < T; t++)
      for (let o = 0; o < nOut; o++) {
        let s = b[o];
        for (let i = 0; i < nIn; i++) s += x[t * nIn + i] * w[i * nOut + o];
        y[t * nOut + o] = s;
      }
    return y;
  };
  const ln = (x: Float64Array, g: Float32Array, b: Float32Array) => {
    const y = new Float64Array(x.length);
    for (let t = 0; t < T; t++) {
      let m = 0,
        v = 0;
      for (let i = 0; i < C; i++) m += x[t * C + i] / C;
      for (let i = 0; i < C; i++) v += (x[t * C + i] - m) ** 2 / C;
      for (let i = 0; i < C; i++) y[t * C + i] = ((x[t * C + i] - m) / Math.sqrt(v + 1e-5)) * g[i] + b[i];
    }
    return y;
  };
  const wte = W('transformer.wte.weight'),
    wpe = W('transformer.wpe.weight');
  let x = new Float64Array(T * C);
  for (let t = 0; t < T; t++) for (let i = 0; i < C; i++) x[t * C + i] = wte[tokens[t] * C + i] + wpe[t * C + i];
  for (let l = 0; l < L; l++) {
    const p = (n: string) => W(`transformer.h.${l}.${n}`);
    const qkv = conv(ln(x, p('ln_1.weight'), p('ln_1.bias')), p('attn.c_attn.weight'), p('attn.c_attn.bias'), C, 3 * C);
    const y = new Float64Array(T * C);
    for (let h = 0; h < NH; h++)
      for (let t = 0; t < T; t++) {
        const att: number[] = [];
        for (let u = 0; u <= t; u++) {
          let s = 0;
          for (let i = 0; i < hs; i++) s += qkv[t * 3 * C + h * hs + i] * qkv[u * 3 * C + C + h * hs + i];
          att.push(s / Math.sqrt(hs));
        }
        const mx = Math.max(...att);
        const e = att.map((a) => Math.exp(a - mx));
        const z = e.reduce((a, b) => a + b, 0);
        for (let u = 0; u <= t; u++)
          for (let i = 0; i < hs; i++) y[t * C + h * hs + i] += (e[u] / z) * qkv[u * 3 * C + 2 * C + h * hs + i];
      }
    const a = conv(y, p('attn.c_proj.weight'), p('attn.c_proj.bias'), C, C);
    x = x.map((v, i) => v + a[i]);
    const f = conv(ln(x, p('ln_2.weight'), p('ln_2.bias')), p('mlp.c_fc.weight'), p('mlp.c_fc.bias'), C, 4 * C).map(
      (v) => 0.5 * v * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3))),
    );
    const m = conv(f, p('mlp.c_proj.weight'), p('mlp.c_proj.bias'), 4 * C, C);
    x = x.map((v, i) => v + m[i]);
  }
  const xf = ln(x, W('transformer.ln_f.weight'), W('transformer.ln_f.bias'));
  const logits = new Float32Array(256);
  for (let v = 0; v < 256; v++) {
    let s = 0;
    for (let i = 0; i < C; i++) s += xf[(T - 1) * C + i] * wte[v * C + i]; // lm_head tied to wte
    logits[v] = s;
  }
  return logits;
}
