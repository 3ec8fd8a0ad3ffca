// `atoll bench codec`: codec throughput and frame size of every pseudo-gradient encoding, on a
// synthetic delta the size of a preset (default `base`), and the bytes up and down per round in the
// run's codecs with each side's time (codec-round.ts; `--preset gpt2`: at 124M).

import {
  type CodecOptions,
  CodecScratch,
  ENCODINGS,
  type Encoding,
  decodeDelta,
  encodeDelta,
} from '../../core/codec/index.ts';
import { type PresetName, getPreset, numParams } from '../../core/model/config.ts';
import { type CodecRoundRow, benchCodecRounds, formatCodecRounds } from './codec-round.ts';
import { syntheticDelta } from './synthetic-delta.ts';
import { median } from './timing.ts';

export { syntheticDelta };

export interface CodecBenchResult {
  count: number;
  results: Array<{
    encoding: Encoding;
    deflate: boolean;
    /** MB/s (10^6 bytes) of f32 input, median over repeats */
    encodeMBps: number;
    decodeMBps: number;
    /** frame bytes, header included */
    bytes: number;
    /** f32 input bytes / frame bytes: how many times smaller than sending raw f32 */
    ratioVsF32: number;
  }>;
}

/** Encode and decode throughput, frame size and ratio for every encoding, with and without deflate. */
export function benchCodec(n: number, opts: { repeats?: number } = {}): CodecBenchResult {
  const repeats = Math.max(1, opts.repeats ?? 5);
  const delta = syntheticDelta(n);
  const scratch = new CodecScratch();
  const out = new Float32Array(n);
  const inputMB = (4 * n) / 1e6;
  const results: CodecBenchResult['results'] = [];
  for (const encoding of ENCODINGS) {
    for (const deflate of [false, true]) {
      const codecOpts: CodecOptions = { encoding, deflate };
      let frame = encodeDelta(delta, codecOpts, scratch); // warm-up
      decodeDelta(frame, n, out);
      const encTimes: number[] = [];
      const decTimes: number[] = [];
      for (let r = 0; r < repeats; r++) {
        let t0 = performance.now();
        frame = encodeDelta(delta, codecOpts, scratch);
        encTimes.push(performance.now() - t0);
        t0 = performance.now();
        const d = decodeDelta(frame, n, out);
        decTimes.push(performance.now() - t0);
        if (!d.ok) throw new Error(`benchCodec: ${encoding} frame failed to decode: ${d.error.code}`);
      }
      results.push({
        encoding,
        deflate,
        encodeMBps: inputMB / (median(encTimes) / 1e3),
        decodeMBps: inputMB / (median(decTimes) / 1e3),
        bytes: frame.length,
        ratioVsF32: (4 * n) / frame.length,
      });
    }
  }
  return { count: n, results };
}

export interface CodecBenchReport extends CodecBenchResult {
  preset: PresetName;
  repeats: number;
  /** bytes up and down per round in the run's codecs, and each side's time (codec-round.ts) */
  rounds: CodecRoundRow[];
}

/** `roundsOnly`: skip the table of every encoding (at 124M each is seconds of work). */
export function runCodecBench(
  opts: { repeats?: number; preset?: PresetName; roundsOnly?: boolean; log?: (s: string) => void } = {},
): CodecBenchReport {
  const repeats = Math.max(1, opts.repeats ?? 5);
  const preset = opts.preset ?? 'base';
  const n = numParams(getPreset(preset));
  const table = opts.roundsOnly ? { count: n, results: [] } : benchCodec(n, { repeats });
  return { preset, repeats, ...table, rounds: benchCodecRounds(n, { repeats, log: opts.log }) };
}

export function formatCodecBench(r: CodecBenchReport): string {
  const lines = [
    `codec on a ${r.preset}-sized delta: ${r.count.toLocaleString()} f32 values ` +
      `(${((4 * r.count) / 1e6).toFixed(1)} MB), median of ${r.repeats}`,
    '  encoding  deflate   encode MB/s   decode MB/s        bytes   smaller than f32',
  ];
  for (const x of r.results) {
    lines.push(
      `  ${x.encoding.padEnd(8)}  ${(x.deflate ? 'yes' : 'no').padEnd(7)} ` +
        `${x.encodeMBps.toFixed(0).padStart(13)} ${x.decodeMBps.toFixed(0).padStart(13)} ` +
        `${x.bytes.toLocaleString().padStart(12)}   ×${x.ratioVsF32.toFixed(1)}`,
    );
  }
  if (r.rounds.length) lines.push(formatCodecRounds(r.rounds));
  return lines.join('\n');
}
