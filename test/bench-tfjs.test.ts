// `atoll bench kernels` on the Node WebGPU adapter (SwiftShader without a GPU):
//  - the TF.js peer GPT (instruments/bench/tfjs-gpt.ts) trains: its loss goes down;
//  - the matmul harness dispatches our kernel as the engine does and agrees with tf.matMul.
import { afterAll, describe, expect, it } from 'vitest';
import { PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { sampleBatch } from '../core/data/dataset.ts';
import { loadCorpus } from '../server/run/corpus.ts';
import { benchMatmul, matmulCases, type MatmulCase } from '../instruments/bench/matmul.ts';
import { TILE_VARIANTS, choiceLabel } from '../client/island/engine/webgpu-tune.ts';
import { setupTfjsWebgpu, type TfWebgpu } from '../instruments/bench/tfjs-webgpu.ts';
import { benchHalf } from '../instruments/bench/half.ts';
import { drain, timeInterleaved } from '../instruments/bench/timing.ts';
import { getTestDevice, releaseTestDevice } from './helpers/gpu.ts';

let tfw: TfWebgpu | null = null;

afterAll(async () => {
  await tfw?.dispose();
  await releaseTestDevice();
});

async function tfjs(): Promise<TfWebgpu> {
  tfw = await setupTfjsWebgpu(await getTestDevice());
  return tfw;
}

describe('bench: TF.js peer and matmul harness', () => {
  it('f16 storage vs f32: one timed row per bandwidth-bound kernel pair', async () => {
    const { device } = await getTestDevice();
    const rows = await benchHalf(device, {
      time: timeInterleaved,
      drain,
      repeats: 1,
      targetMs: 2,
      log: () => {},
      preset: 'tiny',
    });
    expect(rows.map((r) => r.kernel)).toEqual(['adamw', 'layernorm', 'residual', 'encoder', 'gelu', 'delta']);
    for (const r of rows) {
      expect(r.f32_ms, r.kernel).toBeGreaterThan(0);
      expect(r.f16_ms, r.kernel).toBeGreaterThan(0);
      expect(r.speedup).toBeCloseTo(r.f32_ms / r.f16_ms, 6);
    }
  });

  it('the TF.js GPT runs on the same adapter and its loss goes down', async () => {
    const t = await tfjs();
    expect(t.tf.getBackend()).toBe('webgpu');
    const { TfGpt, tfBatch } = await import('../instruments/bench/tfjs-gpt.ts');
    const config = { ...PRESETS.tiny, nLayer: 1 };
    const B = 2,
      T = 16;
    const batch = sampleBatch(loadCorpus().train, B, T, 7, 0, 0);
    const model = new TfGpt({ config, init: initParams(config, 7), lr: 1e-2 });
    try {
      const { x, y } = tfBatch(batch.inputs, batch.targets, B, T);
      for (let s = 0; s < 3; s++) model.step(x, y); // the same batch three times: its loss must fall
      const losses = await model.takeLosses();
      x.dispose();
      y.dispose();
      expect(losses).toHaveLength(3);
      for (const l of losses) expect(Number.isFinite(l)).toBe(true);
      expect(losses[0]).toBeGreaterThan(Math.log(256) - 0.5); // ≈ ln V at init
      expect(losses[2]).toBeLessThan(losses[0] - 0.1);
    } finally {
      model.dispose();
    }
  });

  it('lists the forward, dX and dW shapes of every linear layer', () => {
    const full = matmulCases(false, () => 8);
    expect(full).toHaveLength(2 * 5 * 3);
    const fc = full.find((c) => c.preset === 'small' && c.layer === 'fc' && c.pass === 'fwd')!;
    expect([fc.rows, fc.cin, fc.cout]).toEqual([8 * 128, 192, 768]);
    expect(matmulCases(true, () => 1).every((c) => c.preset === 'small' && c.rows === 128)).toBe(true);
  });

  it('our matmul agrees with tf.matMul on each pass and both get a GFLOP/s figure', async () => {
    const gpu = await getTestDevice();
    const t = await tfjs();
    // multiples of 4 take the vec4 entry points, odd sizes the scalar ones and the edges, many rows split-K
    const cases: MatmulCase[] = [];
    for (const pass of ['fwd', 'dX', 'dW'] as const)
      cases.push({ preset: 'small', layer: 't', pass, rows: 32, cin: 24, cout: 40, bias: true });
    cases.push({ preset: 'small', layer: 't', pass: 'fwd', rows: 20, cin: 13, cout: 18, bias: true });
    cases.push({ preset: 'small', layer: 't', pass: 'dW', rows: 512, cin: 16, cout: 8, bias: true }); // split-K dW + reduce
    const r = await benchMatmul(gpu, t, { cases, software: true, targetMs: 5, repeats: 1, autotune: false });
    // and one pass on the autotuner's choice (every variant timed)
    const tuned = await benchMatmul(gpu, t, { cases: [cases[1]], software: true, targetMs: 5, repeats: 1 });
    expect(r.rows.map((row) => row.variant)).toEqual(['vec4', 'vec4', 'vec4', 'scalar', 'vec4']);
    expect(['vec4', 'scalar', ...TILE_VARIANTS.map((tile) => choiceLabel({ vec4: true, splitK: 1, tile }))]).toContain(
      tuned.rows[0].variant,
    );
    expect(r.rows).toHaveLength(cases.length);
    for (const row of [...r.rows, ...tuned.rows]) {
      expect(row.max_rel_err, row.shape).toBeLessThan(1e-5);
      expect(row.ours_gflops).toBeGreaterThan(0);
      expect(row.tfjs_gflops).toBeGreaterThan(0);
      expect(row.ratio).toBeCloseTo(row.ours_gflops / row.tfjs_gflops, 6);
    }
  });
});
