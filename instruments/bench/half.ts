// `atoll bench kernels`, f16 part: the bandwidth-bound kernels of a `small` step at B = 8 (the
// engine's shapes), f32 against the f16-storage form the engine runs with --precision f16, on the
// same data in the same run, interleaved. Each pair is what one engine or the other dispatches:
//   adamw       adamw_update                 | adamw_update_f16 (also writes the weight copy)
//   layernorm   layernorm_forward            | layernorm_forward_f16 (stream in, out as halves)
//   residual    residual_layernorm_forward   | residual_layernorm_forward_f16 (all four as halves)
//   encoder     encoder_forward              | encoder_forward_f16 (the weight copy in, halves out)
//   gelu        gelu_backward                | gelu_backward_f16 (in place, input as halves)
//   delta       residual_forward (Δ, α = −1) | pseudo_gradient_f16 (Δ as halves)
// The kernels run with subgroup reductions where the device has them, as the engine does.

import {
  KernelSet,
  Program,
  STEP_UNIFORM_BYTES,
  encodeStepUniform,
} from '../../client/island/engine/webgpu-kernels.ts';
import type { DispatchSpec } from '../../shaders/kernel.ts';
import * as op from '../../shaders/ops.ts';
import { DEFAULT_BATCH, type PresetName, getPreset, paramLayout } from '../../core/model/config.ts';
import { submitPasses, type TimeInterleaved } from './attention.ts';

export interface HalfRow {
  kernel: 'adamw' | 'layernorm' | 'residual' | 'encoder' | 'gelu' | 'delta';
  /** e.g. "small B=8 T=128: 1024x192" */
  shape: string;
  f32_ms: number;
  f16_ms: number;
  /** f32 / f16: how much faster f16 storage is */
  speedup: number;
}

/** Each pair timed interleaved on `preset`'s shapes (default small, B = 8, T = blockSize). */
export async function benchHalf(
  device: GPUDevice,
  o: {
    time: TimeInterleaved;
    drain: (device: GPUDevice, ms: number) => Promise<void>;
    repeats: number;
    targetMs: number;
    log: (s: string) => void;
    preset?: PresetName;
  },
): Promise<HalfRow[]> {
  const preset = o.preset ?? 'small';
  const c = getPreset(preset);
  const B = DEFAULT_BATCH[preset],
    T = c.blockSize,
    C = c.nEmbd,
    rows = B * T,
    N = paramLayout(c).total;
  const form = op.halfForm(device.features);
  const owned: GPUBuffer[] = [];
  const buf = (n: number, fill = 0.5) => {
    const b = device.createBuffer({
      size: Math.max(16, Math.ceil(n / 4) * 16),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
    });
    device.queue.writeBuffer(b, 0, new Float32Array(Math.ceil(n / 4) * 4).fill(fill));
    owned.push(b);
    return b;
  };
  const stepBuf = device.createBuffer({
    size: STEP_UNIFORM_BYTES,
    usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
  });
  owned.push(stepBuf);
  device.queue.writeBuffer(
    stepBuf,
    0,
    encodeStepUniform({
      lr: 1e-4,
      beta1: 0.9,
      beta2: 0.95,
      eps: 1e-8,
      weightDecay: 0.1,
      bc1: 0.1,
      bc2: 0.05,
      maxNorm: 1,
      lossSlot: 0,
      step: 1,
    }),
  );
  const ranges: Array<[number, number, boolean]> = [[0, N, true]];
  const ln = { C, wOff: 0, bOff: C };
  const kernels = new KernelSet(device, { subgroups: device.features.has('subgroups') });
  const tokens = device.createBuffer({ size: rows * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(
    tokens,
    0,
    Uint32Array.from({ length: rows }, (_, i) => (i * 37) % c.vocabSize),
  );
  owned.push(tokens);
  const enc = {
    C,
    V: c.vocabSize,
    maxT: T,
    wteOff: paramLayout(c).byName.wte.offset,
    wpeOff: paramLayout(c).byName.wpe.offset,
  };
  const shape = { B, T };
  const act = `${preset} B=${B} T=${T}: ${rows}x${C}`;
  const pairs: Array<[HalfRow['kernel'], string, () => DispatchSpec, () => DispatchSpec]> = [
    [
      'adamw',
      `${preset}: ${N} params`,
      () => op.adamwUpdate(buf(N), buf(N), buf(N), buf(N), buf(4), { N, ranges }),
      () => op.adamwUpdate(buf(N), buf(N), buf(N), buf(N), buf(4), { N, ranges, copy: buf(N / 2) }),
    ],
    [
      'layernorm',
      act,
      () => op.layernormForward(buf(rows * C), buf(rows), buf(rows), buf(rows * C), buf(2 * C), ln),
      () =>
        op.layernormForwardF16(buf((rows * C) / 2), buf(rows), buf(rows), buf((rows * C) / 2), buf(2 * C), {
          ...ln,
          form,
        }),
    ],
    [
      'residual',
      act,
      () =>
        op.residualLayernormForward(
          buf(rows * C),
          buf(rows * C),
          buf(rows),
          buf(rows),
          buf(rows * C),
          buf(rows * C),
          buf(2 * C),
          ln,
        ),
      () =>
        op.residualLayernormForwardF16(
          buf((rows * C) / 2),
          buf((rows * C) / 2),
          buf(rows),
          buf(rows),
          buf((rows * C) / 2),
          buf((rows * C) / 2),
          buf(2 * C),
          { ...ln, form },
        ),
    ],
    [
      'encoder',
      act,
      () => op.encoderForward(buf(rows * C), tokens, buf(N), enc),
      () => op.encoderForwardF16(buf((rows * C) / 2), tokens, buf(N / 2), enc),
    ],
    [
      'gelu',
      `${preset} B=${B} T=${T}: ${rows}x${4 * C}`,
      () => op.geluBackward(buf(rows * 4 * C), buf(rows * 4 * C), buf(rows * 4 * C), { width: 4 * C }),
      () => op.geluBackwardF16(buf(rows * 4 * C), buf(rows * 2 * C), { width: 4 * C, form }),
    ],
    [
      'delta',
      `${preset}: ${N} params`,
      () => op.pseudoGradient(buf(N), buf(N), buf(N), { N }),
      () => op.pseudoGradientF16(buf(N / 2), buf(N), buf(N), { N, form }),
    ],
  ];
  const out: HalfRow[] = [];
  for (const [kernel, label, f32, f16] of pairs) {
    const sides = await Promise.all(
      [f32(), f16()].map(async (spec) => {
        const p = await Program.build(kernels, [spec], shape, stepBuf, `bench.${kernel}`);
        p.setShape(shape);
        return {
          program: p,
          run: async (n: number, expectMs: number) => {
            submitPasses(device, n, (pass) => p.encode(pass, shape));
            await o.drain(device, expectMs);
          },
        };
      }),
    );
    const [f32Ms, f16Ms] = await o.time(
      sides.map((s) => s.run),
      o.targetMs,
      o.repeats,
    );
    const row: HalfRow = { kernel, shape: label, f32_ms: f32Ms, f16_ms: f16Ms, speedup: f32Ms / f16Ms };
    o.log(
      `f16 ${kernel.padEnd(9)} ${label.padEnd(30)} f32 ${f32Ms.toFixed(3)} ms  f16 ${f16Ms.toFixed(3)} ms  ` +
        `×${row.speedup.toFixed(2)}`,
    );
    out.push(row);
    for (const s of sides) s.program.destroy();
  }
  for (const b of owned) b.destroy();
  return out;
}
