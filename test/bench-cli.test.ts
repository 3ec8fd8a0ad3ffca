// `atoll bench kernels`, `codec` and `cold-start` are registered with their options; cold-start and codec run.
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../instruments/cli.ts';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { PRESETS, numParams } from '../core/model/config.ts';
import { type CodecBenchReport, formatCodecBench } from '../instruments/bench/codec.ts';
import { formatCodecRounds } from '../instruments/bench/codec-round.ts';
import { buildRunConfig } from '../server/run/config.ts';
import { benchColdStart, formatColdStart } from '../instruments/bench/cold-start.ts';

const ROOT = join(import.meta.dirname, '..');

describe('bench CLI', () => {
  it('has kernels and codec subcommands next to server', () => {
    const bench = buildProgram().commands.find((c) => c.name() === 'bench')!;
    const sub = Object.fromEntries(bench.commands.map((c) => [c.name(), c.options.map((o) => o.long)]));
    expect(sub.kernels).toEqual(
      expect.arrayContaining(['--json', '--quick', '--peak-tflops', '--no-autotune', '--profile']),
    );
    expect(sub.codec).toEqual(expect.arrayContaining(['--json', '--repeats', '--preset', '--rounds-only']));
    expect(sub.server).toEqual(
      expect.arrayContaining(['--islands', '--procs', '--seconds', '--gateways', '--skip-load', '--json']),
    );
    expect(sub['cold-start']).toEqual(
      expect.arrayContaining(['--preset', '--rounds', '--warmups', '--late', '--codec', '--json']),
    );
  });

  it('cold-start: the warmed-up first round lowers the loss, cold and joining late (tiny)', async () => {
    const r = await benchColdStart({ preset: 'tiny', rounds: [1, 3], warmups: [40, 0], late: 3 });
    expect(r.rows.map((x) => `${x.start} ${x.warmup}`)).toEqual(['cold 40', 'cold 0', 'late 40', 'late 0']);
    for (const row of r.rows)
      for (const h of [1, 3]) expect(row.after[h], `${row.start} warmup ${row.warmup} H ${h}`).toBeLessThan(row.before);
    // the warmup takes smaller first steps: v1 moves less from where the round began
    expect(r.rows[0].before - r.rows[0].after[1]).toBeLessThan(r.rows[1].before - r.rows[1].after[1]);
    expect(formatColdStart(r)).toMatch(/cold \(v0\)\t40\t5\.\d{3}\t/);
  });

  it('formats a codec report', () => {
    const text = formatCodecBench({
      preset: 'base',
      repeats: 1,
      count: 1000,
      results: [{ encoding: 'int8', deflate: false, encodeMBps: 100, decodeMBps: 200, bytes: 1100, ratioVsF32: 3.6 }],
      rounds: [],
    });
    expect(text).toMatch(/int8\s+no\s+100\s+200\s+1,100\s+×3\.6/);
  });

  it("codec --preset tiny --rounds-only: each run codec's bytes up and down per round and its four timings", () => {
    const out = execFileSync(
      process.execPath,
      [join(ROOT, 'bin/atoll.js'), 'bench', 'codec', '--preset', 'tiny', '--rounds-only', '--repeats', '1', '--json'],
      { cwd: ROOT, encoding: 'utf8' },
    );
    const r = JSON.parse(out) as CodecBenchReport;
    const n = numParams(PRESETS.tiny);
    expect(r.preset).toBe('tiny');
    expect(r.count).toBe(n);
    expect(r.results).toEqual([]); // --rounds-only
    const by = Object.fromEntries(r.rounds.map((x) => [x.setting, x]));
    expect(Object.keys(by)).toEqual(['sparse', 'int8', 'sparse-down']);
    const chunks = Math.ceil(n / 4096);
    // sparse: 1 bit for half of each 4096-chunk, plus a few bytes per chunk and the 32-byte header
    expect(by.sparse.bytesUp).toBeGreaterThanOrEqual(n / 16);
    expect(by.sparse.bytesUp).toBeLessThan(n / 16 + 16 * chunks + 64);
    expect(by.sparse.bytesDown).toBeLessThan(n / 2 + 8 * chunks + 64); // int4 per 4096, deflated when smaller
    expect(by.int8.bytesUp).toBeGreaterThanOrEqual(n);
    // sparse-down is `serve --downlink sparse`: the update in the uplink's own code, the server's residual kept whole
    expect(by['sparse-down']).toMatchObject({ runSetting: true, serve: '--codec sparse --downlink sparse' });
    expect(by['sparse-down'].downlink).toEqual(
      buildRunConfig(null, { preset: 'tiny', downlink: 'sparse' }).coordinator.downlink,
    );
    expect(by['sparse-down'].downlink).toMatchObject({ encoding: 'sparse', feedbackDecay: 1 });
    expect(by['sparse-down'].bytesDown).toBe(by.sparse.bytesUp);
    expect(by.sparse.serve).toBe('--codec sparse');
    for (const row of r.rounds) {
      for (const ms of Object.values(row.ms)) expect(ms).toBeGreaterThanOrEqual(0);
      expect(row.meetsTarget).toEqual({ up: true, down: true }); // tiny is far below 8 MB
    }
    expect(formatCodecRounds(r.rounds)).toMatch(/sparse-down +serve --codec sparse --downlink sparse/);
  });
});
