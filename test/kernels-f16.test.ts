// The f16-storage kernels (shaders/half.wgsl, adamw_update_f16) against their CPU twins
// (core/model/ops-f16.ts), which model the rounding: inputs read as halves, outputs stored as
// halves. Packed halves (pack2x16float, core WGSL) run on every adapter; the native-f16 form needs
// `shader-f16`, which SwiftShader lacks, so here it is only generated (the same bytes, checked on
// a real GPU only). Each output must be within 2e-3 normwise of its twin (two f16 ulps of the
// largest entry) AND bit-equal to the twin in ≥ 95 % of entries: the rounding is modelled, not
// merely tolerated. Odd N (a half-used last word) and C = 50 (not a multiple of 4).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as h from '../core/model/ops-f16.ts';
import { gaussian, mulberry32 } from '../core/random.ts';
import { HALF_FORMS, halfSource } from '../client/engine/half.ts';
import { getTestDevice, releaseTestDevice } from './helpers/gpu.ts';

const RTOL = 2e-3;
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

/** Params of half.wgsl: N, C, off0, off1, T, accumulate, alpha (f32), pad. */
function params(v: { N: number; C?: number; off0?: number; off1?: number; T?: number; accumulate?: boolean; alpha?: number }): GPUBuffer {
  const a = new ArrayBuffer(32);
  new Uint32Array(a).set([v.N, v.C ?? 0, v.off0 ?? 0, v.off1 ?? 0, v.T ?? 0, v.accumulate ? 1 : 0, 0, 0]);
  new Float32Array(a)[6] = v.alpha ?? 1;
  const b = device.createBuffer({ size: 32, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(b, 0, a);
  return b;
}

const modules = new Map<string, GPUShaderModule>();
async function run(entry: string, bindings: Record<number, GPUBuffer>, groups: number): Promise<void> {
  device.pushErrorScope('validation');
  let module = modules.get('packed');
  if (!module) modules.set('packed', (module = device.createShaderModule({ code: halfSource('packed') })));
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: entry } });
  const bg = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: Object.entries(bindings).map(([k, b]) => ({ binding: Number(k), resource: { buffer: b } })) });
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bg);
  pass.dispatchWorkgroups(groups);
  pass.end();
  device.queue.submit([enc.finish()]);
  const e = await device.popErrorScope();
  if (e) throw new Error(`${entry}: ${e.message}`);
}

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

const readHalves = async (b: GPUBuffer, n: number) => h.unpackHalves(new Uint32Array(await read(b, 4 * h.halfWords(n))), n);

/** Compares the kernel's halves with the twin's; the word's unused high half must be 0. */
async function expectTwin(name: string, b: GPUBuffer, want: Float32Array): Promise<void> {
  const n = want.length;
  const words = new Uint32Array(await read(b, 4 * h.halfWords(n)));
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
  expect(share, `${name}: share bit-equal to the twin`).toBeGreaterThanOrEqual(MIN_EXACT);
  if (n % 2 === 1) expect(words[words.length - 1] >>> 16, `${name}: padding half`).toBe(0);
}

const N = 1001; // odd: the last word holds one element
const wg256 = (words: number) => Math.ceil(words / 256);

describe('elementwise f16 kernels', () => {
  const x = h.roundHalves(randn(N, 1, 2)), y = h.roundHalves(randn(N, 2));

  it('gelu_forward_f16', async () => {
    const want = new Float32Array(N);
    h.geluForwardF16(want, x, N);
    const out = buf(new Uint32Array(h.halfWords(N)));
    await run('gelu_forward_f16', { 0: params({ N }), 1: out, 2: halvesBuf(x) }, wg256(h.halfWords(N)));
    await expectTwin('gelu_forward_f16', out, want);
  });

  it('gelu_backward_f16, overwriting and accumulating', async () => {
    for (const accumulate of [false, true]) {
      const d0 = h.roundHalves(randn(N, 3));
      const want = accumulate ? d0.slice() : new Float32Array(N);
      h.geluBackwardF16(want, x, y, N);
      const out = halvesBuf(d0);
      await run('gelu_backward_f16', { 0: params({ N, accumulate }), 1: out, 2: halvesBuf(x), 3: halvesBuf(y) }, wg256(h.halfWords(N)));
      await expectTwin(`gelu_backward_f16${accumulate ? '+=' : ''}`, out, want);
    }
  });

  it('residual_forward_f16 (alpha 1 and −1)', async () => {
    for (const alpha of [1, -1]) {
      const want = new Float32Array(N);
      h.residualForwardF16(want, x, y, N, alpha);
      const out = buf(new Uint32Array(h.halfWords(N)));
      await run('residual_forward_f16', { 0: params({ N, alpha }), 1: out, 2: halvesBuf(x), 3: halvesBuf(y) }, wg256(h.halfWords(N)));
      await expectTwin(`residual_forward_f16(${alpha})`, out, want);
    }
  });

  it('pseudo_gradient_f16 and pack_f16 read f32 masters and round once', async () => {
    const start = randn(N, 4, 0.1), theta = start.map((v, i) => v - 1e-3 * Math.sin(i));
    const want = new Float32Array(N);
    h.pseudoGradientF16(want, start, theta, N);
    const out = buf(new Uint32Array(h.halfWords(N)));
    await run('pseudo_gradient_f16', { 0: params({ N }), 1: out, 2: buf(start), 3: buf(theta) }, wg256(h.halfWords(N)));
    await expectTwin('pseudo_gradient_f16', out, want);
    // rounded once from the f32 difference, not the difference of rounded masters
    const twice = new Float32Array(N);
    h.residualForwardF16(twice, start, theta, N, -1);
    expect(Array.from(twice).filter((v, i) => v !== want[i]).length).toBeGreaterThan(N / 4);

    const packed = buf(new Uint32Array(h.halfWords(N)));
    await run('pack_f16', { 0: params({ N }), 1: packed, 2: buf(start) }, wg256(h.halfWords(N)));
    await expectTwin('pack_f16', packed, h.roundHalves(start.slice()));
  });
});

describe('row f16 kernels', () => {
  it('layernorm_forward_f16, C = 50', async () => {
    const B = 3, T = 17, C = 50, rows = B * T;
    const inp = h.roundHalves(randn(rows * C, 5, 3).map((v, i) => v + (i % C) * 0.1));
    const wOff = 3, bOff = 3 + C + 1;
    const p = randn(bOff + C, 6);
    const want = new Float32Array(rows * C), mean = new Float32Array(rows), rstd = new Float32Array(rows);
    h.layernormForwardF16(want, mean, rstd, inp, p.subarray(wOff, wOff + C), p.subarray(bOff, bOff + C), B, T, C);
    const out = buf(new Uint32Array(h.halfWords(rows * C)));
    const m = buf(new Float32Array(rows)), r = buf(new Float32Array(rows));
    await run('layernorm_forward_f16', { 0: params({ N: rows, C, off0: wOff, off1: bOff }), 1: out, 2: halvesBuf(inp), 4: m, 5: r, 6: buf(p) }, rows);
    await expectTwin('layernorm_forward_f16', out, want);
    const gotMean = new Float32Array(await read(m, 4 * rows)), gotRstd = new Float32Array(await read(r, 4 * rows));
    for (let i = 0; i < rows; i++) {
      expect(Math.abs(gotMean[i] - mean[i])).toBeLessThan(1e-4 * (1 + Math.abs(mean[i])));
      expect(Math.abs(gotRstd[i] - rstd[i])).toBeLessThan(1e-4 * rstd[i]);
    }
  });

  it('encoder_forward_f16 reads the weight copy', async () => {
    const B = 3, T = 17, C = 50, V = 51, maxT = 20, wteOff = 4, wpeOff = 4 + V * C + 2;
    const w = h.roundHalves(randn(wpeOff + maxT * C + 3, 7));
    const tokens = Uint32Array.from({ length: B * T }, (_, i) => (i * 7919) % V);
    const want = new Float32Array(B * T * C);
    h.encoderForwardF16(want, tokens, w.subarray(wteOff, wteOff + V * C), w.subarray(wpeOff, wpeOff + maxT * C), B, T, C);
    const out = buf(new Uint32Array(h.halfWords(B * T * C)));
    await run('encoder_forward_f16', { 0: params({ N: B * T, C, off0: wteOff, off1: wpeOff, T }), 1: out, 2: buf(tokens), 3: halvesBuf(w) }, wg256(B * T * C / 2));
    await expectTwin('encoder_forward_f16', out, want);
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
