// AdamW against a hand-computed step; determinism of init and batches; overfitting one batch.

import { describe, expect, it } from 'vitest';
import { JsEngine } from '../core/engine/js.ts';
import { allocBatch, evalBatches, sampleBatch, splitCorpus } from '../core/data/dataset.ts';
import { decodeTokens, encodeText } from '../core/data/tokenizer.ts';
import { PRESETS, flopsPerToken, numParams, paramLayout, paramViews } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { adamwUpdate, clipScale, gradNormSquared } from '../core/model/ops.ts';
import { learningRate } from '../core/model/schedule.ts';

describe('AdamW', () => {
  it('matches a step computed by hand', () => {
    // two steps on one weight: p=1, g=0.5 then g=-0.25; lr 0.1, β1 0.9, β2 0.95, eps 1e-8, wd 0.1
    const p = new Float64Array([1]),
      m = new Float64Array(1),
      v = new Float64Array(1);
    adamwUpdate(p, new Float64Array([0.5]), m, v, 1, 0.1, 0.9, 0.95, 1e-8, 0.1, 1, 1);
    // m1 = 0.05, v1 = 0.0125, m̂ = 0.5, v̂ = 0.25 → update = 0.5/0.5 = 1; p = 1 − 0.1·(1 + 0.1·1) = 0.89
    expect(m[0]).toBeCloseTo(0.05, 12);
    expect(v[0]).toBeCloseTo(0.0125, 12);
    expect(p[0]).toBeCloseTo(0.89, 7);
    adamwUpdate(p, new Float64Array([-0.25]), m, v, 1, 0.1, 0.9, 0.95, 1e-8, 0.1, 2, 1);
    // m2 = 0.9·0.05 − 0.1·0.25 = 0.02; v2 = 0.95·0.0125 + 0.05·0.0625 = 0.015
    const m2 = 0.02,
      v2 = 0.015;
    const mhat = m2 / (1 - 0.81),
      vhat = v2 / (1 - 0.9025);
    const expected = 0.89 - 0.1 * (mhat / (Math.sqrt(vhat) + 1e-8) + 0.1 * 0.89);
    expect(m[0]).toBeCloseTo(m2, 12);
    expect(v[0]).toBeCloseTo(v2, 12);
    expect(p[0]).toBeCloseTo(expected, 7); // eps perturbs the 8th digit
  });

  it('clips the global norm and decays matrices only', async () => {
    expect(clipScale(gradNormSquared(new Float64Array([3, 4]), 2), 1)).toBeCloseTo(0.2, 6);
    expect(clipScale(25, 10)).toBe(1);
    const layout = paramLayout(PRESETS.tiny);
    expect(layout.tensors.filter((t) => t.decay).map((t) => t.name)).toEqual([
      'wte',
      'wpe',
      'qkvw',
      'attprojw',
      'fcw',
      'fcprojw',
    ]);
    // with lr>0 and a zero batch effect impossible, check decay via a param that gets no gradient:
    // wpe rows beyond T get zero gradient, so only decay moves them: p·(1 − lr·wd)
    const c = PRESETS.tiny,
      e = new JsEngine({ config: c, maxBatch: 1, maxT: 4 });
    const theta = initParams(c, 3);
    await e.setParams(theta);
    const b = allocBatch(1, 4);
    b.inputs.set([1, 2, 3, 4]);
    b.targets.set([2, 3, 4, 5]);
    await e.step(b, { lr: 0.01, gradClip: 1 });
    const after = paramViews(c, await e.getParams()),
      before = paramViews(c, theta);
    const row = 10 * c.nEmbd; // position 10 is never used by a T=4 batch
    expect(after.wpe[row]).toBeCloseTo(before.wpe[row] * (1 - 0.01 * 0.1), 7);
    // lnfb has no decay and a nonzero gradient: it must move by ~lr (Adam's first step is ±lr)
    expect(Math.abs(after.lnfb[0] - before.lnfb[0])).toBeGreaterThan(0.005);
  });
});

describe('config and schedule', () => {
  it('presets have the sizes the spec asks for', () => {
    expect(numParams(PRESETS.small)).toBeGreaterThan(1e6);
    expect(numParams(PRESETS.small)).toBeLessThan(3e6);
    expect(numParams(PRESETS.base)).toBeGreaterThan(10e6);
    expect(numParams(PRESETS.base)).toBeLessThan(30e6);
    const c = PRESETS.small,
      N = numParams(c) - c.blockSize * c.nEmbd;
    expect(flopsPerToken(c)).toBe(6 * N + 12 * c.nLayer * c.nHead * (c.nEmbd / c.nHead) * c.blockSize);
  });

  it('gpt2 is GPT-2 small: 124,439,808 parameters with the tied head, and its FLOPs per token', () => {
    const g = PRESETS.gpt2;
    expect(g).toEqual({ vocabSize: 50257, blockSize: 1024, nLayer: 12, nHead: 12, nEmbd: 768 });
    expect(numParams(g)).toBe(124_439_808); // transformers' gpt2 (lm_head tied to wte, not counted twice)
    expect(paramLayout(g).byName.wte.size).toBe(50257 * 768);
    // 6·(N − the position table) + 12·L·H·Q·T = 6·123,653,376 + 12·12·12·64·1024
    expect(flopsPerToken(g)).toBe(741_920_256 + 113_246_208);
  });

  it('warms up linearly then decays by cosine to the floor', () => {
    const s = { maxLr: 1, minLr: 0.1, warmup: 10, total: 110 };
    expect(learningRate(s, 0)).toBeCloseTo(1 / 11);
    expect(learningRate(s, 9)).toBeCloseTo(10 / 11);
    expect(learningRate(s, 10)).toBeCloseTo(1);
    expect(learningRate(s, 60)).toBeCloseTo(0.55);
    expect(learningRate(s, 110)).toBeCloseTo(0.1);
    expect(learningRate(s, 500)).toBeCloseTo(0.1);
  });
});

describe('determinism and data', () => {
  it('the same seed gives the same init; another seed does not', () => {
    const a = initParams(PRESETS.tiny, 7),
      b = initParams(PRESETS.tiny, 7),
      c = initParams(PRESETS.tiny, 8);
    expect(Buffer.from(a.buffer).equals(Buffer.from(b.buffer))).toBe(true);
    expect(Buffer.from(a.buffer).equals(Buffer.from(c.buffer))).toBe(false);
  });

  it('batches depend only on (seed, stream, step), and islands see different data', () => {
    const data = encodeText('the quick brown fox jumps over the lazy dog. '.repeat(200));
    const x = sampleBatch(data, 4, 16, 1, 5, 3),
      y = sampleBatch(data, 4, 16, 1, 5, 3);
    expect(x.inputs).toEqual(y.inputs);
    expect(x.targets).toEqual(y.targets);
    expect(sampleBatch(data, 4, 16, 1, 6, 3).inputs).not.toEqual(x.inputs);
    // targets are inputs shifted by one byte
    expect(Array.from(x.targets.subarray(0, 15))).toEqual(Array.from(x.inputs.subarray(1, 16)));
  });

  it('the held-out split is fixed and disjoint from training chunks', () => {
    const bytes = new Uint8Array(100_000).map((_, i) => i % 251);
    const a = splitCorpus('x', bytes),
      b = splitCorpus('x', bytes);
    expect(a.heldOut).toEqual(b.heldOut);
    expect(a.train.length + a.heldOut.length).toBe(bytes.length);
    expect(a.heldOut.length).toBeGreaterThan(0);
    expect(evalBatches(a.heldOut, 2, 8, 3)).toHaveLength(3);
    expect(decodeTokens(encodeText('Call me Ishmael.'))).toBe('Call me Ishmael.');
  });
});

describe('overfitting', () => {
  it('drives one fixed batch to a loss below 0.1', async () => {
    const c = PRESETS.tiny,
      B = 2,
      T = 32;
    const e = new JsEngine({ config: c, maxBatch: B });
    await e.setParams(initParams(c, 1));
    const b = sampleBatch(
      encodeText(
        'Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse'.repeat(3),
      ),
      B,
      T,
      1,
      0,
      0,
    );
    for (let i = 0; i < 150; i++) await e.step(b, { lr: 3e-3, gradClip: 1 });
    const losses = await e.takeLosses();
    expect(losses[0]).toBeGreaterThan(5);
    expect(losses[losses.length - 1]).toBeLessThan(0.1);
  });
});
