// `atoll bench codec`'s rounds: the bytes one island sends up and gets down per round, in the codecs a
// run uses, and the time of each side's work in Node, at a preset's size (`--preset gpt2`: 124M).
//   up:   the island encodes Δ with its error feedback (encodeWithFeedback, as client/island/runtime.ts),
//         the server decodes it (decodeDelta, as core/coord/submit.ts);
//   down: the server encodes the outer update with its error feedback (core/coord/downlink.ts), the island
//         decodes it. An island one version behind gets one update frame a round; k versions, k frames.
// Settings: `sparse` (the default run: 1-bit strided half of each 4096-chunk up, int4 per 4096 deflated
// down), `int8` (a dense run: int8 per 64 both ways), and `sparse-down` (`serve --downlink sparse`: the
// update in the uplink's own sparse code, SPARSE_CODE_DOWNLINK). Δ and the update are syntheticDelta's
// (synthetic-delta.ts): Gaussian, per-row scales over two decades.

import {
  type CodecOptions,
  CodecScratch,
  ErrorFeedback,
  decodeDelta,
  encodeWithFeedback,
} from '../../core/codec/index.ts';
import { type RunFlags, buildRunConfig } from '../../server/run/config.ts';
import { syntheticDelta } from './synthetic-delta.ts';
import { median } from './timing.ts';

/** The budget per round at 124M: 8 MB up, 16 MB down (10^6 bytes). */
export const ROUND_TARGET = { up: 8e6, down: 16e6 } as const;

export const ROUND_SETTINGS = ['sparse', 'int8', 'sparse-down'] as const;
export type RoundSetting = (typeof ROUND_SETTINGS)[number];

export interface CodecRoundRow {
  setting: RoundSetting;
  /** Every row is a setting a run can take. */
  runSetting: boolean;
  /** The flags that give it to `atoll serve`. */
  serve: string;
  uplink: CodecOptions;
  downlink: CodecOptions;
  /** frame bytes, header included: one Δ up, one update frame down */
  bytesUp: number;
  bytesDown: number;
  /** medians, ms: island encode and server decode of Δ; server encode and island decode of the update */
  ms: { upEncode: number; upDecode: number; downEncode: number; downDecode: number };
  meetsTarget: { up: boolean; down: boolean };
}

/** Each setting's flags: the codecs come from them (buildRunConfig), as a run gets them. */
const SERVE_FLAGS: Record<RoundSetting, RunFlags> = {
  sparse: { codec: 'sparse' },
  int8: { codec: 'int8' },
  'sparse-down': { codec: 'sparse', downlink: 'sparse' },
};

const flagText = (f: RunFlags) =>
  Object.entries(f)
    .map(([k, v]) => `--${k} ${v}`)
    .join(' ');

function codecsOf(s: RoundSetting): { uplink: CodecOptions; downlink: CodecOptions } {
  const c = buildRunConfig(null, { preset: 'tiny', ...SERVE_FLAGS[s] }).coordinator;
  return { uplink: { ...c.uplink }, downlink: { ...c.downlink } };
}

/** One side: `repeats` encodes with error feedback (after a warm-up), each decoded; medians and the last frame. */
function side(x: Float32Array, opts: CodecOptions, repeats: number, out: Float32Array) {
  const fb = new ErrorFeedback(x.length);
  const scratch = new CodecScratch();
  const enc: number[] = [];
  const dec: number[] = [];
  let bytes = 0;
  for (let r = 0; r <= repeats; r++) {
    let t0 = performance.now();
    const q = encodeWithFeedback(x, fb, opts, scratch);
    const tEnc = performance.now() - t0;
    if (!q.ok) throw new Error(`bench codec: ${opts.encoding} failed to encode: ${q.error.message}`);
    t0 = performance.now();
    const d = decodeDelta(q.value.frame, x.length, out);
    const tDec = performance.now() - t0;
    if (!d.ok) throw new Error(`bench codec: ${opts.encoding} frame failed to decode: ${d.error.code}`);
    bytes = q.value.frame.length;
    if (r === 0) continue; // warm-up
    enc.push(tEnc);
    dec.push(tDec);
  }
  return { bytes, encodeMs: median(enc), decodeMs: median(dec) };
}

/** Each setting's bytes up and down per round and its four timings, on `n` parameters. */
export function benchCodecRounds(
  n: number,
  o: { repeats?: number; settings?: readonly RoundSetting[]; log?: (s: string) => void } = {},
): CodecRoundRow[] {
  const repeats = Math.max(1, o.repeats ?? 3);
  const delta = syntheticDelta(n, 1234);
  const update = syntheticDelta(n, 4321);
  const out = new Float32Array(n);
  const rows: CodecRoundRow[] = [];
  for (const setting of o.settings ?? ROUND_SETTINGS) {
    const { uplink, downlink } = codecsOf(setting);
    const up = side(delta, uplink, repeats, out);
    const down = side(update, downlink, repeats, out);
    rows.push({
      setting,
      runSetting: true,
      serve: flagText(SERVE_FLAGS[setting]),
      uplink,
      downlink,
      bytesUp: up.bytes,
      bytesDown: down.bytes,
      ms: { upEncode: up.encodeMs, upDecode: up.decodeMs, downEncode: down.encodeMs, downDecode: down.decodeMs },
      meetsTarget: { up: up.bytes <= ROUND_TARGET.up, down: down.bytes <= ROUND_TARGET.down },
    });
    o.log?.(`bench codec: ${setting}: ${up.bytes} B up, ${down.bytes} B down`);
  }
  return rows;
}

const mb = (b: number) => `${(b / 1e6).toFixed(2)} MB`;

export function formatCodecRounds(rows: CodecRoundRow[]): string {
  const lines = [
    `per round (targets ≤ ${mb(ROUND_TARGET.up)} up, ≤ ${mb(ROUND_TARGET.down)} down), ms in Node, median:`,
    '  setting       up            down          Δ enc  Δ dec  upd enc  upd dec',
  ];
  for (const r of rows) {
    const flag = (ok: boolean) => (ok ? ' ' : '!');
    lines.push(
      `  ${r.setting.padEnd(12)}  ` +
        `${mb(r.bytesUp).padStart(10)}${flag(r.meetsTarget.up)}  ` +
        `${mb(r.bytesDown).padStart(10)}${flag(r.meetsTarget.down)}  ${r.ms.upEncode.toFixed(0).padStart(5)}  ` +
        `${r.ms.upDecode.toFixed(0).padStart(5)}  ${r.ms.downEncode.toFixed(0).padStart(7)}  ` +
        `${r.ms.downDecode.toFixed(0).padStart(7)}`,
    );
  }
  for (const r of rows) lines.push(`  ${r.setting.padEnd(12)}  serve ${r.serve}`);
  lines.push('  ! over the target');
  return lines.join('\n');
}
