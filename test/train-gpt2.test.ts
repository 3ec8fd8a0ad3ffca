// `atoll train --preset gpt2-mini`: GPT-2's tokenizer and vocabulary learn on the CPU engine and on
// WebGPU (SwiftShader), and `atoll sample` decodes the checkpoint through the gpt2 tokenizer.
// Sizes are small (the 50,257-wide head is heavy on these cores): batch 1, 3 steps, a high lr (10.84 → 9.37).

import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const dir = mkdtempSync(join(tmpdir(), 'atoll-gpt2-'));
const env = { ...process.env, VK_ICD_FILENAMES: '/usr/lib/chromium/vk_swiftshader_icd.json', XDG_RUNTIME_DIR: '/tmp' };
const atoll = (args: string[]) =>
  spawnSync('node', ['bin/atoll.js', ...args], { encoding: 'utf8', timeout: 300_000, env });

function trainGpt2(engine: string) {
  const out = join(dir, `${engine}.safetensors`);
  const r = atoll([
    'train',
    '--preset',
    'gpt2-mini',
    '--engine',
    engine,
    '--steps',
    '3',
    '--batch',
    '1',
    '--lr',
    '2e-2',
    '--eval-every',
    '3',
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
    expect(report.tokens).toBe(3 * 256);
    const s = atoll(['sample', '--checkpoint', out, '--prompt', 'Call me', '--tokens', '5', '--engine', 'cpu']);
    expect(s.status).toBe(0);
    expect(s.stdout.startsWith('Call me')).toBe(true);
    expect(s.stdout.length).toBeGreaterThan('Call me'.length); // 5 BPE tokens decoded to text
  }, 300_000);

  it('learns on WebGPU (SwiftShader)', () => {
    const { report } = trainGpt2('webgpu');
    expect(report.engine).toBe('webgpu');
    expect(report.evalLossLast).toBeLessThan(report.evalLossFirst - 1);
  }, 300_000);
});
