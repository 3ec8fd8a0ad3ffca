// `atoll train` and `atoll sample` end to end, plus checkpoint and data errors with codes.

import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
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
    const s = atoll(['sample', '--checkpoint', ckpt, '--prompt', 'Call me', '--tokens', '40']);
    expect(s.status).toBe(0);
    expect(s.stdout.startsWith('Call me')).toBe(true);
    expect(Buffer.byteLength(s.stdout)).toBeGreaterThan(20);
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
