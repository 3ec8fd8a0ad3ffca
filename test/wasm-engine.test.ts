// The Wasm engine's whole step against the JS reference (core/engine/js.ts) over several steps (losses and θ),
// on an odd config and on tiny; it learns; its eval, logits, Δ and optimizer state agree; bad input is refused.

import { describe, expect, it } from 'vitest';
import type { Batch, TrainingEngine } from '../core/engine/index.ts';
import { JsEngine } from '../core/engine/js.ts';
import { WasmEngine } from '../core/engine/wasm.ts';
import { sampleBatch } from '../core/data/dataset.ts';
import { encodeText } from '../core/data/tokenizer.ts';
import { type GPTConfig, PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';

const TEXT = encodeText(
  'Call me Ishmael. Some years ago—never mind how long precisely—having little money. '.repeat(20),
);

/** ‖a − b‖ / ‖b − ref‖: the distance between two runs against how far they moved. */
function relMove(a: Float32Array, b: Float32Array, ref: Float32Array): number {
  let d = 0,
    n = 0;
  for (let i = 0; i < a.length; i++) {
    d += (a[i] - b[i]) ** 2;
    n += (b[i] - ref[i]) ** 2;
  }
  return Math.sqrt(d / n);
}

async function pair(config: GPTConfig, B: number, T: number): Promise<[TrainingEngine, TrainingEngine, Float32Array]> {
  const w = await WasmEngine.create({ config, maxBatch: B, maxT: T });
  const j = new JsEngine({ config, maxBatch: B, maxT: T });
  const p0 = initParams(config, 3);
  await w.setParams(p0);
  await j.setParams(p0);
  return [w, j, p0];
}

describe('WasmEngine against JsEngine', () => {
  const cases: Array<[string, GPTConfig, number, number]> = [
    [
      'odd shapes (V 256, C 15, 3 heads of 5, T 9)',
      { vocabSize: 256, blockSize: 11, nLayer: 2, nHead: 3, nEmbd: 15 },
      3,
      9,
    ],
    ['tiny', PRESETS.tiny, 4, 32],
  ];
  for (const [name, config, B, T] of cases) {
    it(`${name}: five steps give the same losses and θ`, async () => {
      const [w, j, p0] = await pair(config, B, T);
      for (let s = 0; s < 5; s++) {
        const b = sampleBatch(TEXT, B, T, 1, 0, s);
        await w.step(b, { lr: 1e-3, gradClip: 1 });
        await j.step(b, { lr: 1e-3, gradClip: 1 });
      }
      const [lw, lj] = [await w.takeLosses(), await j.takeLosses()];
      expect(lw).toHaveLength(5);
      for (let s = 0; s < 5; s++) expect(Math.abs(lw[s] - lj[s]) / lj[s]).toBeLessThan(1e-4);
      const [pw, pj] = [await w.getParams(), await j.getParams()];
      expect(relMove(pw, pj, p0)).toBeLessThan(1e-2);
      expect(relMove(await w.readDelta(), await j.readDelta(), new Float32Array(p0.length))).toBeLessThan(1e-2);
      const [ow, oj] = [await w.getOptimizerState(), await j.getOptimizerState()];
      expect(ow.step).toBe(5);
      expect(relMove(ow.v, oj.v, new Float32Array(p0.length))).toBeLessThan(1e-2);
      const ev = sampleBatch(TEXT, B, T, 2, 0, 0);
      expect(Math.abs((await w.evalLoss(ev)) - (await j.evalLoss(ev)))).toBeLessThan(1e-3);
      const ctx = TEXT.subarray(0, T + 3); // longer than maxT: its last T tokens
      const [gw, gj] = [await w.nextTokenLogits(ctx), await j.nextTokenLogits(ctx)];
      expect(relMove(gw, gj, new Float32Array(gj.length))).toBeLessThan(1e-4);
      w.destroy();
    });
  }

  it("takes a step's own weight decay (a live run's knob) as the JS reference does", async () => {
    const [w, j, p0] = await pair(PRESETS.tiny, 2, 32);
    const [w0] = await pair(PRESETS.tiny, 2, 32);
    const b = sampleBatch(TEXT, 2, 32, 1, 0, 0);
    for (const e of [w, j]) for (let s = 0; s < 3; s++) await e.step(b, { lr: 1e-2, gradClip: 1, weightDecay: 5 });
    for (let s = 0; s < 3; s++) await w0.step(b, { lr: 1e-2, gradClip: 1 });
    const [pw, pj, pw0] = [await w.getParams(), await j.getParams(), await w0.getParams()];
    expect(relMove(pw, pj, p0)).toBeLessThan(1e-2);
    expect(relMove(pw, pw0, p0)).toBeGreaterThan(0.1); // the override moved θ, unlike the default's decay
    for (const e of [w, w0]) e.destroy();
  });

  it('learns: one batch of tiny overfits below 0.1', async () => {
    const [w] = await pair(PRESETS.tiny, 2, 32);
    const b = sampleBatch(TEXT, 2, 32, 1, 0, 0);
    for (let i = 0; i < 150; i++) await w.step(b, { lr: 3e-3, gradClip: 1 });
    const losses = await w.takeLosses();
    expect(losses[0]).toBeGreaterThan(5);
    expect(losses[losses.length - 1]).toBeLessThan(0.1);
  });

  it('keeps its optimizer state, and refuses bad input with a code', async () => {
    const [w, j] = await pair(PRESETS.tiny, 2, 32);
    await j.step(sampleBatch(TEXT, 2, 32, 1, 0, 0), { lr: 1e-3, gradClip: 1 });
    const s = await j.getOptimizerState();
    await w.setOptimizerState(s);
    expect(await w.getOptimizerState()).toEqual(s);
    await w.resetOptimizerState();
    expect((await w.getOptimizerState()).step).toBe(0);
    await expect(w.setParams(new Float32Array(3))).rejects.toThrow(/E_WRONG_SIZE/);
    const bad: Batch = { inputs: new Uint16Array(64).fill(300), targets: new Uint16Array(64), B: 2, T: 32 };
    await expect(w.step(bad, { lr: 1e-3, gradClip: 1 })).rejects.toThrow(/E_BAD_TOKEN/);
    await expect(w.step({ ...bad, B: 3 }, { lr: 1e-3, gradClip: 1 })).rejects.toThrow(/E_BAD_BATCH/);
    await expect(WasmEngine.create({ config: PRESETS.tiny, maxBatch: 2, precision: 'f16' })).rejects.toThrow(
      /E_BAD_CONFIG/,
    );
  });
});
