// `atoll train` and `atoll sample` end to end, plus checkpoint and data errors with codes: train's --json
// carries the whole curve and its scalars land in <out>.metrics/ (JSONL and TensorBoard), on WebGPU the
// memory plan too (and --micro-batch trains as the whole batch); sample on a transformers folder says to
// export it back first.

import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeCheckpoint, encodeCheckpoint } from '../core/checkpoint.ts';
import { PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { loadCorpus } from '../server/run/corpus.ts';

const dir = mkdtempSync(join(tmpdir(), 'atoll-train-'));
const atoll = (args: string[]) => spawnSync('node', ['bin/atoll.js', ...args], { encoding: 'utf8', timeout: 120_000 });

describe('atoll train / sample', () => {
  it('--engine cpu is the Wasm engine (--threads n), --engine js the JS reference', () => {
    const run = (...args: string[]) => {
      const r = atoll(['train', '--preset', 'tiny', '--steps', '2', '--eval-every', '2', '--json', ...args]);
      if (r.status !== 0) throw new Error(r.stderr);
      return JSON.parse(r.stdout.trim());
    };
    expect(run('--threads', '2', '--out', join(dir, 'w2.safetensors')).device).toBe('wasm-simd (2 threads)');
    expect(run('--out', join(dir, 'w1.safetensors')).device).toBe('wasm-simd (1 thread)');
    expect(run('--engine', 'js', '--out', join(dir, 'js.safetensors')).device).toBe('cpu');
    const bad = atoll(['train', '--preset', 'tiny', '--steps', '1', '--engine', 'js', '--threads', '2']);
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toMatch(/E_BAD_CONFIG: --threads/);
  });

  it('--engine webgpu --json prints its memory plan; --micro-batch 3 trains as the whole batch of 8 does', () => {
    const env = {
      ...process.env,
      VK_ICD_FILENAMES: '/usr/lib/chromium/vk_swiftshader_icd.json',
      XDG_RUNTIME_DIR: '/tmp',
    };
    const train = (micro: string[], out: string) => {
      const r = spawnSync(
        'node',
        [
          'bin/atoll.js',
          'train',
          ...['--preset', 'tiny', '--engine', 'webgpu', '--no-autotune', '--steps', '3', '--eval-batches', '1'],
          ...micro,
          ...['--json', '--out', join(dir, out)],
        ],
        { encoding: 'utf8', timeout: 120_000, env },
      );
      if (r.status !== 0) throw new Error(r.stderr);
      return JSON.parse(r.stdout.trim());
    };
    const whole = train([], 'gpu-whole.safetensors'),
      micro = train(['--micro-batch', '3'], 'gpu-micro.safetensors');
    expect(whole.memoryPlan).toMatchObject({ headChunk: 256, headChunks: 1, microBatch: 8, total: whole.gpuBytes });
    expect(micro.memoryPlan.microBatch).toBe(3); // micro-batches of 2, 3, 3
    expect(micro.memoryPlan.bytes.activations).toBeLessThan(whole.memoryPlan.bytes.activations / 2);
    const losses = (r: { curve: Array<{ trainLoss: number | null }> }) => r.curve.slice(1).map((p) => p.trainLoss!);
    expect(losses(micro)).toHaveLength(3);
    losses(micro).forEach((l, i) => expect(l).toBeCloseTo(losses(whole)[i], 4));
    expect(micro.evalLossLast).toBeCloseTo(whole.evalLossLast, 4);
  }, 240_000);

  it('--seq-len trains and evaluates on shorter sequences than the context, and refuses a longer one', () => {
    const out = join(dir, 'short.safetensors');
    const r = atoll([
      'train',
      '--preset',
      'tiny',
      '--steps',
      '2',
      '--batch',
      '4',
      '--seq-len',
      '16',
      '--json',
      '--out',
      out,
    ]);
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout.trim());
    expect(report.seqLen).toBe(16);
    expect(report.tokens).toBe(2 * 4 * 16);
    const T = PRESETS.tiny.blockSize;
    const long = atoll(['train', '--preset', 'tiny', '--steps', '1', '--seq-len', String(T + 1), '--out', out]);
    expect(long.status).not.toBe(0);
    expect(long.stderr).toContain(`E_BAD_CONFIG: --seq-len ${T + 1}: the tiny model's context is 1..${T}`);
  });

  it('lowers the held-out loss on Moby-Dick and writes a checkpoint that sample reads', () => {
    const ckpt = join(dir, 'tiny.safetensors');
    const out = execFileSync(
      'node',
      ['bin/atoll.js', 'train', '--preset', 'tiny', '--steps', '150', '--json', '--out', ckpt, '--eval-every', '75'],
      { encoding: 'utf8', timeout: 120_000 },
    );
    const r = JSON.parse(out.trim());
    for (const k of ['preset', 'steps', 'tokens', 'trainLoss', 'evalLossFirst', 'evalLossLast', 'tokensPerSec'])
      expect(r).toHaveProperty(k);
    expect(r.evalLossFirst).toBeGreaterThan(5.3); // ≈ ln 256 at init
    expect(r.evalLossLast).toBeLessThan(0.75 * r.evalLossFirst);
    expect(r.tokens).toBe(150 * 8 * 32);
    // the whole curve: every step's lr and train loss, the evals at 0, 75 and 150
    expect(r.curve).toHaveLength(151);
    expect(
      r.curve.filter((p: { evalLoss: number | null }) => p.evalLoss !== null).map((p: { step: number }) => p.step),
    ).toEqual([0, 75, 150]);
    expect(r.curve[150]).toMatchObject({ step: 150, tokens: r.tokens, evalLoss: r.evalLossLast });
    expect(r.curve.slice(1).every((p: { lr: number; trainLoss: number }) => p.lr > 0 && p.trainLoss > 0)).toBe(true);
    expect(r.curve[150].trainLoss).toBeLessThan(r.curve[1].trainLoss);
    const metrics = join(dir, 'tiny.metrics');
    expect(r.metrics).toBe(metrics);
    const rows = readFileSync(join(metrics, 'scalars.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(rows.filter((x) => 'train/loss' in x)).toHaveLength(150);
    expect(rows.filter((x) => 'eval/loss' in x).map((x) => x['eval/loss'])).toEqual([
      r.evalLossFirst,
      r.curve[75].evalLoss,
      r.evalLossLast,
    ]);
    expect(readdirSync(metrics).filter((f) => f.startsWith('events.out.tfevents.'))).toHaveLength(1);
    const s = atoll(['sample', '--checkpoint', ckpt, '--prompt', 'Call me', '--tokens', '40']);
    expect(s.status).toBe(0);
    expect(s.stdout.startsWith('Call me')).toBe(true);
    expect(Buffer.byteLength(s.stdout)).toBeGreaterThan(20);

    // a transformers folder is not a checkpoint: the error says how to get one
    const hf = join(dir, 'tiny-hf');
    expect(atoll(['export', '--checkpoint', ckpt, '--format', 'hf', '--out', hf]).status).toBe(0);
    const f = atoll(['sample', '--checkpoint', hf]);
    expect(f.status).toBe(1);
    expect(f.stderr).toMatch(/E_CHECKPOINT_FOLDER/);
    expect(f.stderr).toContain('--format atoll');
    expect(f.stderr).not.toMatch(/EISDIR/);
  });

  it('a corrupt or truncated checkpoint gives a clear error with a code', () => {
    const good = encodeCheckpoint({ config: PRESETS.tiny, params: initParams(PRESETS.tiny, 1), meta: {}, extra: {} });
    expect(decodeCheckpoint(good).ok).toBe(true);
    const truncated = good.subarray(0, 100);
    const t = decodeCheckpoint(truncated);
    expect(t.ok).toBe(false);
    if (!t.ok) expect(t.error.code).toBe('E_TRUNCATED');
    const corrupt = good.slice();
    corrupt[10] = 0xff;
    corrupt[11] = 0x00;
    const c = decodeCheckpoint(corrupt);
    expect(c.ok).toBe(false);
    if (!c.ok) expect(c.error.code).toMatch(/^E_/);
    const wrongModel = decodeCheckpoint(good, PRESETS.small);
    expect(wrongModel.ok).toBe(false);
    if (!wrongModel.ok) expect(wrongModel.error.code).toBe('E_WRONG_MODEL');
    const p = join(dir, 'bad.safetensors');
    writeFileSync(p, truncated);
    const s = atoll(['sample', '--checkpoint', p]);
    expect(s.status).toBe(1);
    expect(s.stderr).toMatch(/error E_TRUNCATED/);
  });

  it('a wrong-size parameter array gives a clear error with a code', () => {
    expect(() => encodeCheckpoint({ config: PRESETS.tiny, params: new Float32Array(10), meta: {}, extra: {} })).toThrow(
      /E_WRONG_SIZE/,
    );
    const r = readFileSync(join(dir, 'tiny.safetensors'));
    expect(r.length).toBeGreaterThan(0);
  });

  it('a missing or empty data path gives a clear error with a code', () => {
    expect(() => loadCorpus(join(dir, 'nope.txt'))).toThrow(expect.objectContaining({ code: 'E_DATA_MISSING' }));
    const empty = join(dir, 'empty');
    mkdirSync(empty);
    expect(() => loadCorpus(empty)).toThrow(expect.objectContaining({ code: 'E_DATA_EMPTY' }));
    writeFileSync(join(dir, 'e.txt'), '');
    expect(() => loadCorpus(join(dir, 'e.txt'))).toThrow(expect.objectContaining({ code: 'E_DATA_EMPTY' }));
    expect(loadCorpus().train.length).toBeGreaterThan(1_000_000);
    const s = atoll(['train', '--preset', 'tiny', '--steps', '1', '--data', join(dir, 'nope.txt')]);
    expect(s.status).toBe(1);
    expect(s.stderr).toMatch(/E_DATA_MISSING/);
  });
});
