// `atoll bench kernels` and `atoll bench codec` are registered with their options.
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../server/cli.ts';
import { formatCodecBench } from '../bench/codec.ts';

describe('bench CLI', () => {
  it('has kernels and codec subcommands next to server', () => {
    const bench = buildProgram().commands.find((c) => c.name() === 'bench')!;
    const sub = Object.fromEntries(bench.commands.map((c) => [c.name(), c.options.map((o) => o.long)]));
    expect(sub.kernels).toEqual(expect.arrayContaining(['--json', '--quick', '--peak-tflops', '--no-autotune', '--profile']));
    expect(sub.codec).toEqual(expect.arrayContaining(['--json', '--repeats']));
    expect(sub.server).toEqual(expect.arrayContaining(['--islands', '--procs', '--seconds', '--gateways', '--skip-load', '--json']));
  });

  it('formats a codec report', () => {
    const text = formatCodecBench({
      preset: 'base', repeats: 1, count: 1000,
      results: [{ encoding: 'int8', deflate: false, encodeMBps: 100, decodeMBps: 200, bytes: 1100, ratioVsF32: 3.6 }],
    });
    expect(text).toMatch(/int8\s+no\s+100\s+200\s+1,100\s+×3\.6/);
  });
});
