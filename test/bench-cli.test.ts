// `atoll bench kernels`, `codec` and `cold-start` are registered with their options; cold-start runs.
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../instruments/cli.ts';
import { formatCodecBench } from '../instruments/bench/codec.ts';
import { benchColdStart, formatColdStart } from '../instruments/bench/cold-start.ts';

describe('bench CLI', () => {
  it('has kernels and codec subcommands next to server', () => {
    const bench = buildProgram().commands.find((c) => c.name() === 'bench')!;
    const sub = Object.fromEntries(bench.commands.map((c) => [c.name(), c.options.map((o) => o.long)]));
    expect(sub.kernels).toEqual(
      expect.arrayContaining(['--json', '--quick', '--peak-tflops', '--no-autotune', '--profile']),
    );
    expect(sub.codec).toEqual(expect.arrayContaining(['--json', '--repeats']));
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
    });
    expect(text).toMatch(/int8\s+no\s+100\s+200\s+1,100\s+×3\.6/);
  });
});
