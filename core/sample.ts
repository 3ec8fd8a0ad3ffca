// Autoregressive sampling through any TrainingEngine (CPU or WebGPU).

import type { TrainingEngine } from './engine/index.ts';
import type { Tokens } from './model/ops.ts';
import { mulberry32 } from './random.ts';

export interface SampleOptions {
  tokens: number;
  temperature?: number; // 0 = greedy
  topK?: number;
  seed?: number;
}

/** Draws one token id from logits (V) with temperature and top-k. */
export function sampleToken(logits: Float32Array, temperature: number, topK: number, rand: () => number): number {
  const V = logits.length;
  if (temperature <= 0) {
    let best = 0;
    for (let i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
    return best;
  }
  const order = Array.from({ length: V }, (_, i) => i)
    .sort((a, b) => logits[b] - logits[a])
    .slice(0, Math.max(1, Math.min(topK, V)));
  const maxv = logits[order[0]];
  const w = order.map((i) => Math.exp((logits[i] - maxv) / temperature));
  let r = rand() * w.reduce((a, b) => a + b, 0);
  for (let j = 0; j < order.length; j++) {
    r -= w[j];
    if (r <= 0) return order[j];
  }
  return order[order.length - 1];
}

/** Continues `prompt` (token ids) by `opts.tokens` tokens; returns only the new ids. */
export async function generate(engine: TrainingEngine, prompt: Tokens, opts: SampleOptions): Promise<Uint32Array> {
  const rand = mulberry32(opts.seed ?? 1);
  // an empty prompt starts at a newline (byte 10; GPT-2's "\n" is id 198)
  const ctx = Array.from(prompt.length > 0 ? prompt : [engine.config.vocabSize > 256 ? 198 : 10]);
  const out = new Uint32Array(opts.tokens);
  for (let i = 0; i < opts.tokens; i++) {
    const window = Uint32Array.from(ctx.slice(-engine.config.blockSize));
    const logits = await engine.nextTokenLogits(window);
    const tok = sampleToken(logits, opts.temperature ?? 0.8, opts.topK ?? 40, rand);
    out[i] = tok;
    ctx.push(tok);
  }
  return out;
}
