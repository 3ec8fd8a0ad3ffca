// The f16-storage kernels (shaders/half.wgsl; matmul, attention and adamw_update with their f16
// defines or entry) against their CPU twins (core/model/ops-f16.ts), which model the rounding:
// inputs read as halves, outputs stored as halves. Packed halves (pack2x16float, core WGSL) run on every adapter; the native-f16 form needs
// `shader-f16`, which SwiftShader lacks, so here it is only generated (the same bytes, checked on
// a real GPU only). Each output stored as halves must be within 2e-3 normwise of its twin (two
// f16 ulps of the largest entry) AND bit-equal to the twin in ≥ 95 % of entries: the rounding is
// modelled, not merely tolerated. f32 outputs (gradients, the masters) within 1e-4 as for the f32
// kernels, except where noted. Odd N (a half-used last word) and C = 50 (not a multiple of 4).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as cpu from '../core/model/ops.ts';
import * as h from '../core/model/ops-f16.ts';
import { gaussian, mulberry32 } from '../core/random.ts';
import { HALF_FORMS, halfSource } from '../client/engine/half.ts';
import { shaderSource } from '../client/engine/webgpu-kernels.ts';
import { getTestDevice, releaseTestDevice } from './helpers/gpu.ts';

const RTOL = 2e-3;
const RTOL_F32 = 1e-4;
const MIN_EXACT = 0.95;
let device: GPUDevice;
const report: Record<string, string> = {};

beforeAll(async () => {
  ({ device } = await getTestDevice());
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
  const b = device.createBuffer({ size: Math.max(16, Math.ceil(bytes / 16) * 16), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(b, 0, data);
  return b;
};
const halvesBuf = (x: Float32Array) => buf(h.packHalves(x));

/** A uniform of u32 words (a {f32} entry is written as f32). */
function uniform(words: Array<number | { f32: number }>): GPUBuffer {
  const a = new ArrayBuffer(Math.ceil((words.length * 4) / 16) * 16);
  const dv = new DataView(a);
  words.forEach((w, i) => (typeof w === 'number' ? dv.setUint32(4 * i, w, true) : dv.setFloat32(4 * i, w.f32, true)));
  const b = device.createBuffer({ size: a.byteLength, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(b, 0, a);
  return b;
}
/** half.wgsl's Params: N, C, w_off, b_off, accumulate. */
const halfParams = (v: { N: number; C?: number; wOff?: number; bOff?: number; accumulate?: boolean }) => uniform([v.N, v.C ?? 0, v.wOff ?? 0, v.bOff ?? 0, v.accumulate ? 1 : 0, 0]);

const modules = new Map<string, GPUShaderModule>();
/** Runs one entry point of `code` with buffers at binding numbers, on a grid. */
async function run(code: string, entry: string, bindings: Record<number, GPUBuffer>, grid: [number, number?, number?]): Promise<void> {
  device.pushErrorScope('validation');
  let module = modules.get(code);
  if (!module) modules.set(code, (module = device.createShaderModule({ code })));
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: entry } });
  const bg = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: Object.entries(bindings).map(([k, b]) => ({ binding: Number(k), resource: { buffer: b } })) });
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bg);
  pass.dispatchWorkgroups(grid[0], grid[1] ?? 1, grid[2] ?? 1);
  pass.end();
  device.queue.submit([enc.finish()]);
  const e = await device.popErrorScope();
  if (e) throw new Error(`${entry}: ${e.message}`);
}
const half = halfSource('packed');

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
async function expectHalves(name: string, b: GPUBuffer, want: Float32Array, offset = 0, minExact = MIN_EXACT): Promise<void> {
  const n = want.length;
  const words = new Uint32Array(await read(b, 4 * h.halfWords(offset + n))).subarray(offset / 2);
  const got = h.unpackHalves(words, n);
  let abs = 0, scale = 0, exact = 0;
  for (let i = 0; i < n; i++) {
    abs = Math.max(abs, Math.abs(got[i] - want[i]));
    scale = Math.max(scale, Math.abs(want[i]));
    if (got[i] === want[i]) exact++;
  }
  const rel = abs / scale, share = exact / n;
  report[name] = `${rel.toExponential(1)}, ${(100 * share).toFixed(1)} %`;
  expect(rel, `${name}: rel err`).toBeLessThanOrEqual(RTOL);
  expect(share, `${name}: share bit-equal to the twin`).toBeGreaterThanOrEqual(minExact);
  if (n % 2 === 1) expect(words[h.halfWords(n) - 1] >>> 16, `${name}: padding half`).toBe(0);
}

async function expectF32(name: string, b: GPUBuffer, want: Float32Array, rtol = RTOL_F32, offset = 0): Promise<void> {
  const got = new Float32Array(await read(b, 4 * (offset + want.length))).subarray(offset);
  let abs = 0, scale = 0;
  for (let i = 0; i < want.length; i++) { abs = Math.max(abs, Math.abs(got[i] - want[i])); scale = Math.max(scale, Math.abs(want[i])); }
  report[name] = (abs / scale).toExponential(1);
  expect(abs / scale, `${name}: rel err`).toBeLessThanOrEqual(rtol);
}

const N = 1001; // odd: the last word holds one element
const wg256 = (n: number): [number] => [Math.ceil(n / 256)];

describe('half.wgsl', () => {
  it('gelu_backward_f16 (the fc pre-activation read as halves; f32 gradients), overwriting and accumulating', async () => {
    const n = 1000; // 4C per row: even
    const x = h.roundHalves(randn(n, 1, 2)), dout = randn(n, 2);
    for (const accumulate of [false, true]) {
      const d0 = randn(n, 3);
      const want = accumulate ? d0.slice() : new Float32Array(n);
      h.geluBackwardF16(want, x, dout, n);
      const dinp = buf(d0);
      await run(half, 'gelu_backward_f16', { 0: halfParams({ N: n, accumulate }), 1: dinp, 2: halvesBuf(x), 3: buf(dout) }, wg256(n / 2));
      await expectF32(`gelu_backward_f16${accumulate ? '+=' : ''}`, dinp, want);
    }
  });

  it('pseudo_gradient_f16 and pack_f16 read f32 masters and round once', async () => {
    const start = randn(N, 4, 0.1), theta = start.map((v, i) => v - 1e-3 * Math.sin(i));
    const want = new Float32Array(N);
    h.pseudoGradientF16(want, start, theta, N);
    const out = buf(new Uint32Array(h.halfWords(N)));
    await run(half, 'pseudo_gradient_f16', { 0: halfParams({ N }), 1: out, 2: buf(start), 3: buf(theta) }, wg256(h.halfWords(N)));
    await expectHalves('pseudo_gradient_f16', out, want);
    // rounded once from the f32 difference: the difference of rounded masters is another thing
    const ofRounded = new Float32Array(N);
    cpu.pseudoGradient(ofRounded, h.roundHalves(start.slice()), h.roundHalves(theta.slice()), N);
    expect(Array.from(ofRounded).filter((v, i) => v !== want[i]).length).toBeGreaterThan(N / 4);

    const packed = buf(new Uint32Array(h.halfWords(N)));
    await run(half, 'pack_f16', { 0: halfParams({ N }), 1: packed, 2: buf(start) }, wg256(h.halfWords(N)));
    const copy = new Float32Array(N);
    h.packF16(copy, start, N);
    await expectHalves('pack_f16', packed, copy);
  });

  it('layernorm_forward_f16 and residual_layernorm_forward_f16, C = 50: f32 stream in, halves out', async () => {
    const B = 3, T = 17, C = 50, rows = B * T;
    const a = randn(rows * C, 5, 3).map((v, i) => v + (i % C) * 0.1), b2 = randn(rows * C, 8);
    const wOff = 3, bOff = 3 + C + 1;
    const p = randn(bOff + C, 6);
    const w = p.subarray(wOff, wOff + C), bias = p.subarray(bOff, bOff + C);
    const params = halfParams({ N: rows, C, wOff, bOff });
    const want = new Float32Array(rows * C), mean = new Float32Array(rows), rstd = new Float32Array(rows);
    h.layernormForwardF16(want, mean, rstd, a, w, bias, B, T, C);
    const out = buf(new Uint32Array(h.halfWords(rows * C)));
    const m = buf(new Float32Array(rows)), r = buf(new Float32Array(rows));
    await run(half, 'layernorm_forward_f16', { 0: params, 1: out, 2: m, 3: r, 4: buf(a), 5: buf(p) }, [rows]);
    await expectHalves('layernorm_forward_f16', out, want);
    await expectF32('layernorm_forward_f16.mean', m, mean);
    await expectF32('layernorm_forward_f16.rstd', r, rstd);

    const res = new Float32Array(rows * C);
    cpu.residualForward(res, a, b2, rows * C);
    h.layernormForwardF16(want, mean, rstd, res, w, bias, B, T, C);
    const gRes = buf(new Float32Array(rows * C));
    await run(half, 'residual_layernorm_forward_f16', { 0: params, 1: out, 2: m, 3: r, 4: gRes, 5: buf(p), 6: buf(a), 7: buf(b2) }, [rows]);
    await expectF32('residual_layernorm_forward_f16.res', gRes, res);
    await expectHalves('residual_layernorm_forward_f16', out, want);
    await expectF32('residual_layernorm_forward_f16.rstd', r, rstd);
  });
});

describe('matmul with f16 operands (vec4 variants)', () => {
  const B = 3, T = 17, C = 48, OC = 144, rows = B * T, wOff = 8, biasOff = wOff + OC * C + 4;
  const p = randn(biasOff + OC, 20);
  const W = p.subarray(wOff, wOff + OC * C), bias = p.subarray(biasOff, biasOff + OC);
  const inp = h.roundHalves(randn(rows * C, 21)); // the forward's input, stored as halves
  const mm = (d: Record<string, string>) => shaderSource('matmul', d);
  const grid: [number, number] = [Math.ceil(OC / 64), Math.ceil(rows / 64)];

  it('forward: halves in (input and weight copy), halves out, bias + fused GELU', async () => {
    const geluOff = rows * OC;
    const want = new Float32Array(rows * OC), gelu = new Float32Array(rows * OC);
    h.matmulForwardF16(want, inp, W, bias, B, T, C, OC, { halfIn: true, halfOut: true, gelu });
    const out = buf(new Uint32Array(h.halfWords(2 * rows * OC)));
    const params = uniform([rows, OC, C, 1 | 4, 0, wOff, 0, biasOff, 0, geluOff]);
    await run(mm({ A4: 'f16', B4: 'f16', C4: 'f16' }), 'matmul_forward_vec4', { 0: params, 1: out, 2: halvesBuf(inp), 3: halvesBuf(p) }, grid);
    await expectHalves('matmul_forward_f16', out, want);
    // SwiftShader's tanh differs from JS's by ~1e-5 relative: more f16 ties fall the other way
    await expectHalves('matmul_forward_f16.gelu', out, gelu, geluOff, 0.9);
  });

  it('forward into f32 (the projections feeding the residual stream)', async () => {
    const want = new Float32Array(rows * OC);
    h.matmulForwardF16(want, inp, W, bias, B, T, C, OC, { halfIn: true, halfOut: false });
    const out = buf(new Float32Array(rows * OC));
    await run(mm({ A4: 'f16', B4: 'f16' }), 'matmul_forward_vec4', { 0: uniform([rows, OC, C, 1, 0, wOff, 0, biasOff, 0, 0]), 1: out, 2: halvesBuf(inp), 3: halvesBuf(p) }, grid);
    await expectF32('matmul_forward_f16→f32', out, want);
  });

  it('backward: dinp from the weight copy, dW from the input as halves, both f32 and accumulating', async () => {
    const dout = randn(rows * OC, 22), dinp0 = randn(rows * C, 23), g0 = randn(p.length, 24);
    const dinp = dinp0.slice(), grads = g0.slice();
    h.matmulBackwardF16(dinp, grads.subarray(wOff, wOff + OC * C), null, dout, inp, W, B, T, C, OC, { halfIn: true });
    const gDinp = buf(dinp0), gGrads = buf(g0);
    await run(mm({ B4: 'f16' }), 'matmul_backward_dinp_vec4', { 0: uniform([rows, C, OC, 2, 0, wOff, 0, 0, 0, 0]), 1: gDinp, 2: buf(dout), 3: halvesBuf(p) }, [Math.ceil(C / 64), Math.ceil(rows / 64)]);
    await expectF32('matmul_backward_dinp_f16', gDinp, dinp);
    await run(mm({ B4: 'f16' }), 'matmul_backward_dweight_vec4', { 0: uniform([OC, C, rows, 2, 0, 0, wOff, 0, rows, 0]), 1: gGrads, 2: buf(dout), 3: halvesBuf(inp) }, [Math.ceil(C / 64), Math.ceil(OC / 64)]);
    await expectF32('matmul_backward_dweight_f16', gGrads, grads.subarray(0, wOff + OC * C));
  });
});

describe('attention with qkv and out as halves', () => {
  const B = 2, T = 37, C = 48, NH = 4, rows = B * NH * T;
  const inp = h.roundHalves(randn(B * T * 3 * C, 30));
  const att = (d: Record<string, string>) => shaderSource('attention', { HS: C / NH, ...d });
  const grid: [number, number] = [Math.ceil(T / 32), B * NH];

  it('forward and backward', async () => {
    const params = uniform([B, T, C, NH, 1, { f32: 1 / Math.sqrt(C / NH) }]);
    const out = new Float32Array(B * T * C), preatt = new Float32Array(B * NH * T * T), probs = new Float32Array(B * NH * T * T);
    h.attentionForwardF16(out, preatt, probs, inp, B, T, C, NH);
    const gOut = buf(new Uint32Array(h.halfWords(B * T * C))), gLse = buf(new Float32Array(rows)), gInp = halvesBuf(inp);
    const code = att({ QKV: 'f16', OUT: 'f16' });
    await run(code, 'attention_forward', { 0: params, 1: gOut, 2: gLse, 3: gInp }, grid);
    await expectHalves('attention_forward_f16', gOut, out);

    const dout = randn(B * T * C, 31), dinp0 = randn(B * T * 3 * C, 32);
    const dinp = dinp0.slice();
    h.attentionBackwardF16(dinp, new Float32Array(preatt.length), new Float32Array(preatt.length), dout, inp, probs, B, T, C, NH);
    const gDinp = buf(dinp0), gDsum = buf(new Float32Array(rows)), gDout = buf(dout);
    await run(code, 'attention_backward_dq', { 0: params, 1: gDinp, 2: gDsum, 3: gInp, 4: gLse, 5: gDout, 6: gOut }, grid);
    await run(code, 'attention_backward_dkv', { 0: params, 1: gDinp, 2: gDsum, 3: gInp, 4: gLse, 5: gDout }, grid);
    // D = dout·out reads the forward's out as halves, which the twin (from the probabilities) does not
    await expectF32('attention_backward_f16', gDinp, dinp, 2e-3);
  });
});

describe('adamw_update_f16', () => {
  it('the f32 step on the masters, and the weight copy rounded once from the new weights', async () => {
    const n = 1001, lr = 1e-2, step = 3, scale = 0.7;
    const [b1, b2, eps, wd] = [0.9, 0.95, 1e-8, 0.1];
    const params = randn(n, 40), grads = randn(n, 41), m = randn(n, 42, 0.1), v = randn(n, 43, 0.1).map(Math.abs);
    const gP = buf(params), gG = buf(grads), gM = buf(m), gV = buf(v);
    const copy = new Float32Array(n);
    h.adamwUpdateF16(params, copy, grads, m, v, n, lr, b1, b2, eps, wd, step, scale);
    const gCopy = buf(new Uint32Array(h.halfWords(n) + 1));
    const ranges = new Uint32Array(4 + 64);
    ranges.set([n, 1, 0, 0, 0, n, 1, 0]);
    const stepU = uniform([{ f32: lr }, { f32: b1 }, { f32: b2 }, { f32: eps }, { f32: wd }, { f32: 1 - b1 ** step }, { f32: 1 - b2 ** step }, { f32: 0 }, 0, step, 0, 0]);
    await run(shaderSource('adamw'), 'adamw_update_f16', { 0: uniform(Array.from(ranges)), 8: stepU, 1: gP, 2: gG, 3: gM, 4: gV, 5: buf(Float32Array.from([0, scale])), 6: gCopy }, wg256(Math.ceil(n / 4)));
    await expectF32('adamw_update_f16.params', gP, params);
    await expectF32('adamw_update_f16.m', gM, m);
    await expectHalves('adamw_update_f16.copy', gCopy, copy);
  });
});
describe('storage forms', () => {
  it('packed is core WGSL; native writes the same words as vec2<f16> behind `enable f16`', () => {
    expect(HALF_FORMS).toEqual(['packed', 'native']);
    const code = (s: string) => s.replace(/\/\/.*$/gm, ''); // without comments
    const packed = code(halfSource('packed')), native = code(halfSource('native'));
    expect(packed).not.toMatch(/enable f16|f16>|vec2h/);
    expect(packed).toMatch(/pack2x16float/);
    expect(halfSource('native').startsWith('enable f16;')).toBe(true);
    expect(native).toMatch(/alias H2 = vec2h;/);
    expect(native).not.toMatch(/pack2x16float\(/);
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
