// The f16-storage kernels (shaders/half.wgsl; LayerNorm, the encoder, matmul, attention and adamw_update with their f16
// defines or entry) against their CPU twins (core/model/ops-f16.ts), which model the rounding:
// inputs read as halves, outputs stored as halves. Packed halves (pack2x16float, core WGSL) run on every adapter; the native-f16 form needs
// `shader-f16`, which SwiftShader lacks, so here it is only generated (the same bytes, checked on
// a real GPU only). Each output stored as halves must be within 2e-3 normwise of its twin (two
// f16 ulps of the largest entry) AND bit-equal to the twin in ≥ 95 % of entries: the rounding is
// modelled, not merely tolerated. f32 outputs (gradients, the masters) within 1e-4 as for the f32
// kernels, except where noted. Odd N (a half-used last word).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as cpu from '../core/model/ops.ts';
import * as h from '../core/model/ops-f16.ts';
import { gaussian, mulberry32 } from '../core/random.ts';
import { KernelSet, STEP_UNIFORM_BYTES, encodeStepUniform } from '../client/island/engine/webgpu-kernels.ts';
import type { DispatchSpec, Shape } from '../shaders/kernel.ts';
import * as gpu from '../shaders/ops.ts';
import { getTestDevice, releaseTestDevice, runDispatches } from './helpers/gpu.ts';

const RTOL = 2e-3;
const RTOL_F32 = 1e-4;
const MIN_EXACT = 0.95;
let device: GPUDevice;
let kernels: KernelSet;
let sgKernels: KernelSet; // subgroup reductions, as the engine on SwiftShader
let stepBuf: GPUBuffer;
const report: Record<string, string> = {};

beforeAll(async () => {
  ({ device } = await getTestDevice({ optionalFeatures: ['subgroups'] }));
  kernels = new KernelSet(device);
  sgKernels = new KernelSet(device, { subgroups: true });
  stepBuf = device.createBuffer({ size: STEP_UNIFORM_BYTES, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
});

afterAll(async () => {
  console.log('f16 kernels vs twin (rel err, share bit-equal):', JSON.stringify(report));
  await releaseTestDevice();
});

function randn(n: number, seed: number, scale = 1): Float32Array {
  const g = gaussian(mulberry32(seed));
  return Float32Array.from({ length: n }, () => g() * scale);
}

const buf = (data: Uint32Array | Float32Array, bytes = data.byteLength) => {
  const b = device.createBuffer({
    size: Math.max(16, Math.ceil(bytes / 16) * 16),
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  device.queue.writeBuffer(b, 0, data);
  return b;
};
const halvesBuf = (x: Float32Array) => buf(h.packHalves(x));

function runOn(specs: DispatchSpec[], shape: Shape = { B: 1, T: 1 }, ks = kernels): Promise<void> {
  return runDispatches(device, ks, specs, shape, stepBuf);
}
const form = 'packed' as const;

async function read(b: GPUBuffer, bytes: number): Promise<ArrayBuffer> {
  const size = Math.ceil(bytes / 16) * 16;
  const s = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(b, 0, s, 0, size);
  device.queue.submit([enc.finish()]);
  await s.mapAsync(GPUMapMode.READ);
  const out = s.getMappedRange().slice(0, bytes);
  s.destroy();
  return out;
}

/** The kernel's halves against the twin's; the unused high half of an odd last word must be 0. */
async function expectHalves(
  name: string,
  b: GPUBuffer,
  want: Float32Array,
  offset = 0,
  minExact = MIN_EXACT,
): Promise<void> {
  const n = want.length;
  const words = new Uint32Array(await read(b, 4 * h.halfWords(offset + n))).subarray(offset / 2);
  const got = h.unpackHalves(words, n);
  let abs = 0,
    scale = 0,
    exact = 0;
  for (let i = 0; i < n; i++) {
    abs = Math.max(abs, Math.abs(got[i] - want[i]));
    scale = Math.max(scale, Math.abs(want[i]));
    if (got[i] === want[i]) exact++;
  }
  const rel = abs / scale,
    share = exact / n;
  report[name] = `${rel.toExponential(1)}, ${(100 * share).toFixed(1)} %`;
  expect(rel, `${name}: rel err`).toBeLessThanOrEqual(RTOL);
  expect(share, `${name}: share bit-equal to the twin`).toBeGreaterThanOrEqual(minExact);
  if (n % 2 === 1) expect(words[h.halfWords(n) - 1] >>> 16, `${name}: padding half`).toBe(0);
}

async function expectF32(name: string, b: GPUBuffer, want: Float32Array, rtol = RTOL_F32, offset = 0): Promise<void> {
  const got = new Float32Array(await read(b, 4 * (offset + want.length))).subarray(offset);
  let abs = 0,
    scale = 0;
  for (let i = 0; i < want.length; i++) {
    abs = Math.max(abs, Math.abs(got[i] - want[i]));
    scale = Math.max(scale, Math.abs(want[i]));
  }
  report[name] = (abs / scale).toExponential(1);
  expect(abs / scale, `${name}: rel err`).toBeLessThanOrEqual(rtol);
}

const N = 1001; // odd: the last word holds one element

describe('half.wgsl', () => {
  it('gelu_backward_f16 in place (the fc pre-activation read as halves; f32 gradients)', async () => {
    const width = 200,
      shape = { B: 1, T: 5 },
      n = width * 5;
    const x = h.roundHalves(randn(n, 1, 2)),
      dout = randn(n, 2);
    const want = dout.slice();
    h.geluBackwardF16(want, x, n);
    const ref = new Float32Array(n);
    cpu.geluBackward(ref, x, dout, n);
    expect(Array.from(want)).toEqual(Array.from(ref)); // in place = the f32 twin on the stored halves
    const grad = buf(dout);
    await runOn([gpu.geluBackwardF16(grad, halvesBuf(x), { width, form })], shape);
    await expectF32('gelu_backward_f16', grad, want);
  });

  it('pseudo_gradient_f16 and pack_f16 read f32 masters and round once', async () => {
    const start = randn(N, 4, 0.1),
      theta = start.map((v, i) => v - 1e-3 * Math.sin(i));
    const want = new Float32Array(N);
    h.pseudoGradientF16(want, start, theta, N);
    const out = buf(new Uint32Array(h.halfWords(N)));
    await runOn([gpu.pseudoGradientF16(out, buf(start), buf(theta), { N, form })]);
    await expectHalves('pseudo_gradient_f16', out, want);
    // rounded once from the f32 difference: the difference of rounded masters is another thing
    const ofRounded = new Float32Array(N);
    cpu.pseudoGradient(ofRounded, h.roundHalves(start.slice()), h.roundHalves(theta.slice()), N);
    expect(Array.from(ofRounded).filter((v, i) => v !== want[i]).length).toBeGreaterThan(N / 4);

    const packed = buf(new Uint32Array(h.halfWords(N)));
    await runOn([gpu.packF16(packed, buf(start), { N, form })]);
    const copy = new Float32Array(N);
    h.packF16(copy, start, N);
    await expectHalves('pack_f16', packed, copy);
  });
});

describe('the residual stream as halves (layernorm.wgsl, encoder.wgsl)', () => {
  // C = 56: 7 chunks of 8 halves, 4 threads a row (SwiftShader's subgroup), 16 rows a workgroup, the
  // last of 51 partial; C = 16: 2 chunks, 2 threads a row (a part of a subgroup). Both on subgroup
  // reductions (the engine's path here), C = 56 also on the workgroup tree
  for (const [C, path] of [
    [56, 'subgroups'],
    [16, 'subgroups'],
    [56, 'workgroup'],
  ] as const)
    it(`layernorm_forward_f16, residual_layernorm_forward_f16 and the backward on halves, C = ${C}, ${path} reductions`, async () => {
      const ks = path === 'subgroups' ? sgKernels : kernels;
      const B = 3,
        T = 17,
        rows = B * T,
        shape = { B, T };
      const a = h.roundHalves(randn(rows * C, 5, 3).map((v, i) => v + (i % C) * 0.1)),
        b2 = h.roundHalves(randn(rows * C, 8));
      const wOff = 3,
        bOff = 3 + C + 1;
      const p = randn(bOff + C, 6);
      const w = p.subarray(wOff, wOff + C),
        bias = p.subarray(bOff, bOff + C);
      const d = { C, wOff, bOff, form };
      const want = new Float32Array(rows * C),
        mean = new Float32Array(rows),
        rstd = new Float32Array(rows);
      h.layernormForwardF16(want, mean, rstd, a, w, bias, B, T, C);
      const out = buf(new Uint32Array(h.halfWords(rows * C)));
      const m = buf(new Float32Array(rows)),
        r = buf(new Float32Array(rows));
      await runOn([gpu.layernormForwardF16(out, m, r, halvesBuf(a), buf(p), d)], shape, ks);
      await expectHalves(`layernorm_forward_f16 C=${C}`, out, want);
      await expectF32(`layernorm_forward_f16.mean C=${C}`, m, mean);
      await expectF32(`layernorm_forward_f16.rstd C=${C}`, r, rstd);

      // the sum is stored rounded, and normalised as stored
      const res = new Float32Array(rows * C);
      h.residualLayernormForwardF16(res, want, mean, rstd, a, b2, w, bias, B, T, C);
      const sum = new Float32Array(rows * C);
      cpu.residualForward(sum, a, b2, rows * C);
      expect(Array.from(res)).toEqual(Array.from(h.roundHalves(sum)));
      const gRes = buf(new Uint32Array(h.halfWords(rows * C)));
      await runOn(
        [gpu.residualLayernormForwardF16(gRes, out, m, r, halvesBuf(a), halvesBuf(b2), buf(p), d)],
        shape,
        ks,
      );
      await expectHalves(`residual_layernorm_forward_f16.res C=${C}`, gRes, res, 0, 1); // one rounding of an exact f32 sum: bit-equal
      await expectHalves(`residual_layernorm_forward_f16 C=${C}`, out, want);
      await expectF32(`residual_layernorm_forward_f16.rstd C=${C}`, r, rstd);

      // the backward reads the stream it normalised as halves; its gradients f32
      const dout = randn(rows * C, 9),
        dinp0 = randn(rows * C, 10),
        g0 = randn(p.length, 11);
      const dinp = dinp0.slice(),
        grads = g0.slice();
      cpu.layernormBackward(
        dinp,
        grads.subarray(wOff, wOff + C),
        grads.subarray(bOff, bOff + C),
        dout,
        res,
        w,
        mean,
        rstd,
        B,
        T,
        C,
      );
      const gDinp = buf(dinp0),
        gGrads = buf(g0);
      const partials = buf(new Float32Array(gpu.partialsScratch(0, rows, 2 * C)));
      await runOn(
        gpu.layernormBackward(gDinp, gGrads, buf(dout), gRes, buf(p), m, r, {
          C,
          wOff,
          bOff,
          partials,
          accumulateDinp: true,
          accumulateParams: true,
          half: form,
        }),
        shape,
        ks,
      );
      await expectF32(`layernorm_backward_f16.dinp C=${C}`, gDinp, dinp);
      await expectF32(`layernorm_backward_f16.dparams C=${C}`, gGrads, grads);
    });

  it('encoder_forward_f16: wte and wpe from the half weight copy, the stream out as halves', async () => {
    const B = 3,
      T = 17,
      C = 48,
      V = 51,
      maxT = 20,
      wteOff = 8,
      wpeOff = 8 + V * C + 8;
    const p = randn(wpeOff + maxT * C + 5, 12);
    const inp = Uint32Array.from({ length: B * T }, (_, i) => (i * 7 + 3) % V);
    const want = new Float32Array(B * T * C);
    h.encoderForwardF16(want, inp, p.subarray(wteOff, wteOff + V * C), p.subarray(wpeOff, wpeOff + maxT * C), B, T, C);
    const out = buf(new Uint32Array(h.halfWords(B * T * C)));
    const d = { C, V, maxT, wteOff, wpeOff };
    await runOn([gpu.encoderForwardF16(out, buf(inp), halvesBuf(p), d)], { B, T });
    await expectHalves('encoder_forward_f16', out, want, 0, 1); // one f32 add of two halves, rounded once: bit-equal
    expect(() => gpu.encoderForwardF16(out, out, out, { ...d, wpeOff: 4 })).toThrow(
      'encoder_forward_f16 needs wpeOff a multiple of 8, got 4',
    );
  });
});

describe('matmul with f16 operands (vec4 variants)', () => {
  const B = 3,
    T = 17,
    C = 48,
    OC = 144,
    rows = B * T,
    wOff = 8,
    biasOff = wOff + OC * C + 4,
    shape = { B, T };
  const p = randn(biasOff + OC, 20);
  const W = p.subarray(wOff, wOff + OC * C),
    bias = p.subarray(biasOff, biasOff + OC);
  const inp = h.roundHalves(randn(rows * C, 21)); // the forward's input, stored as halves
  const d = { C, OC, wOff, biasOff };

  it('forward: halves in (input and weight copy), halves out, bias + fused GELU', async () => {
    const geluOff = rows * OC;
    const want = new Float32Array(rows * OC),
      gelu = new Float32Array(rows * OC);
    h.matmulForwardF16(want, inp, W, bias, B, T, C, OC, { halfIn: true, halfOut: true, gelu });
    const out = buf(new Uint32Array(h.halfWords(2 * rows * OC)));
    await runOn(
      [
        gpu.matmulForward(out, halvesBuf(inp), halvesBuf(p), {
          ...d,
          geluOff,
          half: { inp: true, w: true, out: true },
        }),
      ],
      shape,
    );
    await expectHalves('matmul_forward_f16', out, want);
    // SwiftShader's tanh differs from JS's by ~1e-5 relative: more f16 ties fall the other way
    await expectHalves('matmul_forward_f16.gelu', out, gelu, geluOff, 0.9);
  });

  it('forward into f32 (the projections feeding the residual stream); scalar loads refuse halves', async () => {
    const want = new Float32Array(rows * OC);
    h.matmulForwardF16(want, inp, W, bias, B, T, C, OC, { halfIn: true, halfOut: false });
    const out = buf(new Float32Array(rows * OC));
    await runOn([gpu.matmulForward(out, halvesBuf(inp), halvesBuf(p), { ...d, half: { inp: true, w: true } })], shape);
    await expectF32('matmul_forward_f16→f32', out, want);
    expect(() => gpu.matmulForward(out, out, out, { ...d, vec4: false, half: { w: true } })).toThrow(
      'f16 operands need the vec4 variant',
    );
  });

  it('backward: dinp from the weight copy, dW from the input as halves, both f32 and accumulating', async () => {
    const dout = randn(rows * OC, 22),
      dinp0 = randn(rows * C, 23),
      g0 = randn(p.length, 24);
    const dinp = dinp0.slice(),
      grads = g0.slice();
    h.matmulBackwardF16(
      dinp,
      grads.subarray(wOff, wOff + OC * C),
      grads.subarray(biasOff, biasOff + OC),
      dout,
      inp,
      W,
      B,
      T,
      C,
      OC,
      { halfIn: true },
    );
    const gDinp = buf(dinp0),
      gGrads = buf(g0);
    const partials = buf(new Float32Array(gpu.partialsScratch(OC * C, rows, OC)));
    await runOn(
      gpu.matmulBackward(gDinp, gGrads, buf(dout), halvesBuf(inp), halvesBuf(p), {
        ...d,
        partials,
        accumulateDinp: true,
        accumulateParams: true,
        half: { inp: true, w: true },
      }),
      shape,
    );
    await expectF32('matmul_backward_dinp_f16', gDinp, dinp);
    await expectF32('matmul_backward_dweight_f16', gGrads, grads);
  });
});

describe('attention with qkv and out as halves', () => {
  const B = 2,
    T = 37,
    C = 48,
    NH = 4,
    rows = B * NH * T,
    shape = { B, T };
  const inp = h.roundHalves(randn(B * T * 3 * C, 30));

  it('forward and backward', async () => {
    const out = new Float32Array(B * T * C),
      preatt = new Float32Array(B * NH * T * T),
      probs = new Float32Array(B * NH * T * T);
    h.attentionForwardF16(out, preatt, probs, inp, B, T, C, NH);
    const gOut = buf(new Uint32Array(h.halfWords(B * T * C))),
      gLse = buf(new Float32Array(rows)),
      gInp = halvesBuf(inp);
    await runOn([gpu.attentionForward(gOut, gLse, gInp, { C, NH, half: true })], shape);
    await expectHalves('attention_forward_f16', gOut, out);

    const dout = randn(B * T * C, 31),
      dinp0 = randn(B * T * 3 * C, 32);
    const dinp = dinp0.slice();
    h.attentionBackwardF16(
      dinp,
      new Float32Array(preatt.length),
      new Float32Array(preatt.length),
      dout,
      inp,
      probs,
      B,
      T,
      C,
      NH,
    );
    const gDinp = buf(dinp0);
    await runOn(
      gpu.attentionBackward(gDinp, buf(new Float32Array(rows)), buf(dout), gInp, gOut, gLse, {
        C,
        NH,
        accumulate: true,
        half: true,
      }),
      shape,
    );
    // D = dout·out reads the forward's out as halves, which the twin (from the probabilities) does not
    await expectF32('attention_backward_f16', gDinp, dinp, 2e-3);
    expect(() => gpu.attentionForward(gOut, gLse, gInp, { C: 30, NH: 5, half: true })).toThrow('multiple of 4');
  });
});

describe('adamw_update_f16', () => {
  it('the f32 step on the masters, and the weight copy rounded once from the new weights', async () => {
    const n = 1001,
      lr = 1e-2,
      step = 3,
      scale = 0.7;
    const [b1, b2, eps, wd] = [0.9, 0.95, 1e-8, 0.1];
    const params = randn(n, 40),
      grads = randn(n, 41),
      m = randn(n, 42, 0.1),
      v = randn(n, 43, 0.1).map(Math.abs);
    const gP = buf(params),
      gG = buf(grads),
      gM = buf(m),
      gV = buf(v);
    const copy = new Float32Array(n);
    const split = 333; // decay on [0, 333) only
    const s = (a: Float32Array, from: number, to: number) => a.subarray(from, to);
    for (const [from, to, decay] of [
      [0, split, true],
      [split, n, false],
    ] as const) {
      h.adamwUpdateF16(
        s(params, from, to),
        s(copy, from, to),
        s(grads, from, to),
        s(m, from, to),
        s(v, from, to),
        to - from,
        lr,
        b1,
        b2,
        eps,
        decay ? wd : 0,
        step,
        scale,
      );
    }
    const gCopy = buf(new Uint32Array(h.halfWords(n) + 1));
    device.queue.writeBuffer(
      stepBuf,
      0,
      encodeStepUniform({
        lr,
        beta1: b1,
        beta2: b2,
        eps,
        weightDecay: wd,
        bc1: 1 - b1 ** step,
        bc2: 1 - b2 ** step,
        maxNorm: 0,
        lossSlot: 0,
        step,
      }),
    );
    await runOn([
      gpu.adamwUpdate(gP, gG, gM, gV, buf(Float32Array.from([0, scale])), {
        N: n,
        ranges: [
          [0, split, true],
          [split, n, false],
        ],
        copy: gCopy,
      }),
    ]);
    await expectF32('adamw_update_f16.params', gP, params);
    await expectF32('adamw_update_f16.m', gM, m);
    await expectHalves('adamw_update_f16.copy', gCopy, copy);
  });
});

describe('storage forms', () => {
  it('packed is core WGSL; native writes the same words as vec2<f16> behind `enable f16`', () => {
    expect(gpu.HALF_FORMS).toEqual(['packed', 'native']);
    const code = (s: string) => s.replace(/\/\/.*$/gm, ''); // without comments
    const packed = code(gpu.half.source(gpu.HALF_DEFINES.packed)),
      native = code(gpu.half.source(gpu.HALF_DEFINES.native));
    expect(packed).not.toMatch(/enable f16|f16>|vec2h/);
    expect(packed).toMatch(/pack2x16float/);
    expect(native.startsWith('enable f16;')).toBe(true);
    expect(native).toMatch(/alias H2 = vec2h;/);
    expect(native).not.toMatch(/pack2x16float\(/);
    // the LayerNorm's 16-byte chunks of 8 halves: vec4<u32> packed, mat2x4<f16> native
    const ln = code(gpu.layernorm.source(gpu.HALF_LN_DEFINES.native));
    expect(ln.startsWith('enable f16;')).toBe(true);
    expect(ln).toMatch(/alias H8 = mat2x4h;/);
    expect(code(gpu.layernorm.source({}))).toMatch(/alias H8 = vec4u;/);
    expect(gpu.halfForm(new Set(['shader-f16']))).toBe('native');
    expect(gpu.halfForm(new Set())).toBe('packed');
  });

  it('the test adapter lacks shader-f16 (SwiftShader), so the native form cannot compile here', () => {
    expect(device.features.has('shader-f16')).toBe(false);
  });

  it('packHalves / unpackHalves: the little-endian layout pack2x16float writes', async () => {
    const v = Float32Array.from([1, -2, 0.5]);
    const words = h.packHalves(v);
    expect(Array.from(words)).toEqual([0xc000_3c00, 0x0000_3800]);
    expect(Array.from(h.unpackHalves(words, 3))).toEqual([1, -2, 0.5]);
  });
});
