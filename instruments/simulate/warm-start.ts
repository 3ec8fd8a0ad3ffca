// The shared warm start of a comparison: one island trained off the byte-unigram plateau, the point every row of
// a seed starts from.

import { type TextDataset, allocBatch, sampleBatch, streamId } from '../../core/data/dataset.ts';
import { initParams } from '../../core/model/gpt.ts';
import { type InnerLrPlan, innerLearningRate } from '../../core/protocol.ts';
import type { SimCommon } from './types.ts';
import { Evaluator, modelConfig, rowEngines } from './row-shared.ts';

/**
 * The shared warm start: one island (batch 4) trained for `tokens` from initParams(seed), on its
 * own data stream (not one the rows use), lr warmup then cosine.
 */
export async function warmStart(
  common: SimCommon,
  ds: TextDataset,
  tokens: number,
  lr = { maxLr: 3e-3, minLr: 3e-4 },
): Promise<{ params: Float32Array; evalLoss: number }> {
  const config = modelConfig(common);
  const B = 4,
    T = common.seqLen;
  const engines = await rowEngines(common, B);
  try {
    const engine = await engines.make({ config, maxBatch: B, maxT: T });
    await engine.setParams(initParams(config, common.seed));
    const plan: InnerLrPlan = {
      ...lr,
      warmupTokens: Math.min(4096, tokens / 4),
      totalTokens: tokens,
      tokensStart: 0,
      tokensPerStep: B * T,
      localWarmupSteps: 0,
    };
    const batch = allocBatch(B, T);
    const stream = streamId('warm-start');
    for (let s = 0; s * B * T < tokens; s++) {
      await engine.step(sampleBatch(ds.train, B, T, common.seed, stream, s, batch), {
        lr: innerLearningRate(plan, s),
        gradClip: 1,
      });
    }
    const params = await engine.getParams();
    return { params, evalLoss: await (await Evaluator.create(engines, common, ds)).loss(params) };
  } finally {
    await engines.dispose();
  }
}

/** Byte entropies of `text`, nats: unigram (the plateau a fresh model sits on) and bigram-conditional. */
export function byteEntropies(text: ArrayLike<number>): { unigram: number; bigram: number } {
  const one = new Float64Array(256),
    two = new Float64Array(256 * 256);
  for (let i = 0; i < text.length; i++) one[text[i]]++;
  for (let i = 1; i < text.length; i++) two[(text[i - 1] << 8) | text[i]]++;
  let unigram = 0,
    bigram = 0;
  for (let a = 0; a < 256; a++) if (one[a] > 0) unigram -= (one[a] / text.length) * Math.log(one[a] / text.length);
  const prev = new Float64Array(256);
  for (let i = 0; i < text.length - 1; i++) prev[text[i]]++;
  for (let k = 0; k < two.length; k++)
    if (two[k] > 0) bigram -= (two[k] / (text.length - 1)) * Math.log(two[k] / prev[k >> 8]);
  return { unigram, bigram };
}

/**
 * The shared warm start off the byte-unigram plateau: `tokens`, doubled (up to 4×) while the held-out
 * loss is above a quarter of the way from the unigram to the bigram entropy of the training text.
 * A fixed 32k tokens left seed 2 on the plateau (3.062, unigram 3.137), and the async sparse row
 * with it (2.94 after 200k tokens, where seeds 1 and 3 reached 2.64 and 2.61).
 */
export async function warmStartOffPlateau(
  common: SimCommon,
  ds: TextDataset,
  tokens: number,
): Promise<{ params: Float32Array; evalLoss: number; tokens: number }> {
  const h = byteEntropies(ds.train);
  const line = h.unigram - (h.unigram - h.bigram) / 4;
  let w = await warmStart(common, ds, tokens),
    t = tokens;
  while (w.evalLoss > line && t < 4 * tokens) {
    t *= 2;
    w = await warmStart(common, ds, t);
  }
  return { ...w, tokens: t };
}
