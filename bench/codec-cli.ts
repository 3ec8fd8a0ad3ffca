// `atoll bench codec`: throughput and frame size of every pseudo-gradient encoding
// (core/codec/bench.ts) on a synthetic delta the size of the `base` preset.

import { type CodecBenchResult, benchCodec } from '../core/codec/bench.ts';
import { PRESETS, numParams } from '../core/model/config.ts';

export interface CodecBenchReport extends CodecBenchResult {
  preset: 'base';
  repeats: number;
}

export function runCodecBench(opts: { repeats?: number } = {}): CodecBenchReport {
  const repeats = Math.max(1, opts.repeats ?? 5);
  return { preset: 'base', repeats, ...benchCodec(numParams(PRESETS.base), { repeats }) };
}

export function formatCodecBench(r: CodecBenchReport): string {
  const lines = [
    `codec on a ${r.preset}-sized delta: ${r.count.toLocaleString()} f32 values (${((4 * r.count) / 1e6).toFixed(1)} MB), median of ${r.repeats}`,
    '  encoding  deflate   encode MB/s   decode MB/s        bytes   smaller than f32',
  ];
  for (const x of r.results) {
    lines.push(`  ${x.encoding.padEnd(8)}  ${(x.deflate ? 'yes' : 'no').padEnd(7)} ${x.encodeMBps.toFixed(0).padStart(13)} ${x.decodeMBps.toFixed(0).padStart(13)} ${x.bytes.toLocaleString().padStart(12)}   ×${x.ratioVsF32.toFixed(1)}`);
  }
  return lines.join('\n');
}
