// bench/device.sh: packs this machine's node, Dawn's binding and node_modules as xz copies (fast xz here;
// the real pack is xz -9), then runs its dry run from those copies alone, as the GPU machine would: staged
// in a folder of its own, Node from node.xz, the `webgpu` package's dawn.node from dawn.node.xz, on
// SwiftShader at the `tiny` preset, `train --engine webgpu` with f32 and with f16 storage. The summary it
// writes must hold both runs with their tokens/s, the engine's planned GPU bytes and finite losses.

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tempDir } from './helpers/server.ts';

const ROOT = join(import.meta.dirname, '..');
const tmp = tempDir('atoll-device-');
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

describe('bench/device.sh', () => {
  it('refuses to run unpacked, then packs and dry-runs on SwiftShader from the xz copies alone', () => {
    const env = { ...process.env, PACK_DIR: join(tmp, 'pack'), STAGE: join(tmp, 'stage'), RESULTS: join(tmp, 'out') };
    const script = join(ROOT, 'bench/device.sh');
    let refused = '';
    try {
      execFileSync('bash', [script, '--dry-run'], { env, encoding: 'utf8', stdio: 'pipe' });
    } catch (e) {
      refused = String((e as { stderr?: string }).stderr);
    }
    expect(refused).toMatch(/E_NOT_PACKED/);

    execFileSync('bash', [script, '--pack'], { env: { ...env, XZ: 'xz -0 -T0' }, stdio: 'pipe' });
    for (const f of ['node.xz', 'dawn.node.xz', 'node_modules.tar.xz'])
      expect(existsSync(join(tmp, 'pack', f))).toBe(true);
    const out = execFileSync('bash', [script, '--dry-run'], { env, encoding: 'utf8', stdio: 'pipe' });
    const summary = JSON.parse(readFileSync(join(tmp, 'out', 'summary.json'), 'utf8'));
    expect(JSON.parse(out.trim().split('\n').pop()!)).toEqual(summary);
    // the node that ran it is the staged one, from node.xz
    expect(summary).toMatchObject({ mode: 'dry', preset: 'tiny', kernels: false, node: join(tmp, 'stage', 'node') });
    expect(summary.runs.map((r: { precision: string }) => r.precision)).toEqual(['f32', 'f16']);
    for (const r of summary.runs) {
      expect(r.ok, JSON.stringify(r)).toBe(true);
      expect(r.device).toMatch(/swiftshader/i);
      expect(r.steps).toBe(2);
      expect(r.tokensPerSec).toBeGreaterThan(0);
      expect(r.mfu).toBeGreaterThan(0);
      expect(r.gpuBytesPlanned).toBeGreaterThan(0);
      expect(Number.isFinite(r.evalLossLast)).toBe(true);
    }
    // f16 storage is another arithmetic: the same init and batches, a loss near f32's but not its bits
    const [f32, f16] = summary.runs;
    expect(f16.evalLossFirst).not.toBe(f32.evalLossFirst);
    expect(Math.abs(f16.evalLossFirst - f32.evalLossFirst)).toBeLessThan(0.05);
    expect(f16.gpuBytesPlanned).toBeLessThan(f32.gpuBytesPlanned);
  }, 180_000);
});
