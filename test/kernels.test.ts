// Every WGSL kernel against its CPU twin (core/model/ops.ts) on seeded random inputs,
// with shapes that are not multiples of the tiles: T=17, C=48, V=51, OC=144, offsets
// that break vec4 alignment. Error = max|gpu − cpu| / max|cpu| per output tensor
// (a normwise relative error, robust to entries near 0), required ≤ 1e-4.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as cpu from '../core/model/ops.ts';
import { gaussian, mulberry32 } from '../core/random.ts';
import { KernelSet, STEP_UNIFORM_BYTES, encodeStepUniform } from '../client/island/engine/webgpu-kernels.ts';
import type { DispatchSpec, Shape } from '../shaders/kernel.ts';
import * as gpu from '../shaders/ops.ts';
import type { MatmulTile } from '../shaders/matmul.ts';
import { TILE_VARIANTS } from '../client/island/engine/webgpu-tune.ts';
import { getTestDevice, maxRelErr, readF32, releaseTestDevice, runDispatches, upload } from './helpers/gpu.ts';

const RTOL = 1e-4;
let device: GPUDevice;
let kernels: KernelSet;
let sgKernels: KernelSet; // the same kernels with subgroup reductions
/** The reductions (LayerNorm, cross-entropy, grad norm) run on both paths. */
const REDUCTION_PATHS = [
  ['workgroup', () => kernels],
  ['subgroups', () => sgKernels],
] as const;
let stepBuf: GPUBuffer;
const errors: Record<string, number> = {};

beforeAll(async () => {
  ({ device } = await getTestDevice({ optionalFeatures: ['subgroups'] }));
  kernels = new KernelSet(device);
  sgKernels = new KernelSet(device, { subgroups: true });
  stepBuf = device.createBuffer({ size: STEP_UNIFORM_BYTES, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
});

afterAll(async () => {
  // the per-op errors, for the report
  console.log(
    'kernel errors vs CPU twin (max|Δ|/max|cpu|):',
    JSON.stringify(errors, (_, v) => (typeof v === 'number' ? Number(v.toExponential(2)) : v)),
  );
  await releaseTestDevice();
});

function randn(n: number, seed: number, scale = 1): Float32Array {
  const g = gaussian(mulberry32(seed));
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = g() * scale;
  return a;
}

function tokens(n: number, V: number, seed: number): Uint32Array {
  const r = mulberry32(seed);
  return Uint32Array.from({ length: n }, () => Math.floor(r() * V));
}

function runOn(specs: DispatchSpec[], shape: Shape, ks = kernels): Promise<void> {
  return runDispatches(device, ks, specs, shape, stepBuf);
}

async function expectClose(name: string, buf: GPUBuffer, want: Float32Array, rtol = RTOL, offset = 0): Promise<void> {
  const got = await readF32(device, buf, want.length, offset);
  const { rel } = maxRelErr(got, want);
  errors[name] = Math.max(errors[name] ?? 0, rel);
  expect(rel, `${name}: max rel err ${rel}`).toBeLessThanOrEqual(rtol);
}

const B = 3,
  T = 17,
  C = 48;
const shape = { B, T };
const BT = B * T;

describe('encoder', () => {
  const V = 51,
    maxT = 20,
    wteOff = 4,
    wpeOff = 4 + V * C + 4; // a thread a vec4: C and the offsets ÷ 4
  const params = randn(wpeOff + maxT * C + 7, 1);
  const wte = params.subarray(wteOff, wteOff + V * C);
  const wpe = params.subarray(wpeOff, wpeOff + maxT * C);
  const inp = tokens(BT, V, 2);
  const d = { C, V, maxT, wteOff, wpeOff };

  it('encoder_forward', async () => {
    const want = new Float32Array(BT * C);
    cpu.encoderForward(want, inp, wte, wpe, B, T, C);
    const out = upload(device, new Float32Array(BT * C));
    await runOn([gpu.encoderForward(out, upload(device, inp), upload(device, params), d)], shape);
    await expectClose('encoder_forward', out, want);
    expect(() => gpu.encoderForward(out, out, out, { ...d, wteOff: 5 })).toThrow(
      'encoder_forward needs wteOff a multiple of 4, got 5',
    );
  });

  it('encoder_backward (accumulating, and overwriting)', async () => {
    const dout = randn(BT * C, 3);
    const grads0 = randn(params.length, 4);
    const want = grads0.slice();
    cpu.encoderBackward(
      want.subarray(wteOff, wteOff + V * C),
      want.subarray(wpeOff, wpeOff + maxT * C),
      dout,
      inp,
      B,
      T,
      C,
    );
    const g = upload(device, grads0);
    await runOn(
      gpu.encoderBackward(g, upload(device, dout), upload(device, inp), {
        ...d,
        accumulateWte: true,
        accumulateWpe: true,
      }),
      shape,
    );
    await expectClose('encoder_backward', g, want);

    const zero = new Float32Array(params.length);
    cpu.encoderBackward(
      zero.subarray(wteOff, wteOff + V * C),
      zero.subarray(wpeOff, wpeOff + maxT * C),
      dout,
      inp,
      B,
      T,
      C,
    );
    const g2 = upload(device, grads0);
    await runOn(gpu.encoderBackward(g2, upload(device, dout), upload(device, inp), d), shape);
    await expectClose('encoder_backward', g2, zero.subarray(wteOff, wteOff + V * C), RTOL, wteOff);
    await expectClose('encoder_backward', g2, zero.subarray(wpeOff, wpeOff + maxT * C), RTOL, wpeOff);
  });
});

it('the test adapter has subgroups (SwiftShader: size 4), so both reduction paths run', () => {
  expect(device.features.has('subgroups')).toBe(true);
});

for (const [path, ks] of REDUCTION_PATHS)
  describe(`layernorm (${path} reductions)`, () => {
    // The forward in vec4 chunks, p.tpr threads a row: C=48 (12 chunks: 8 threads, 2 subgroups of
    // SwiftShader's 4, 8 rows a workgroup, the last of 51 rows partial), C=52 (13 chunks: some threads
    // take 2), C=16 (4 chunks, one subgroup a row); B·T=200: the weight and bias gradients over 3 row
    // slices of 67
    for (const [Cn, shape] of [
      [48, { B, T }],
      [52, { B, T }],
      [16, { B, T }],
      [52, { B: 4, T: 50 }],
    ] as const) {
      const BT = shape.B * shape.T;
      it(`layernorm_forward and backward, C=${Cn}, B·T=${BT}`, async () => {
        if (BT === 200) expect(gpu.rowSlices(BT)).toEqual({ slices: 3, chunk: 67 });
        const wOff = 3,
          bOff = 3 + Cn + 1;
        const params = randn(bOff + Cn, 10);
        const w = params.subarray(wOff, wOff + Cn),
          b = params.subarray(bOff, bOff + Cn);
        const inp = randn(BT * Cn, 11, 2);
        const out = new Float32Array(BT * Cn),
          mean = new Float32Array(BT),
          rstd = new Float32Array(BT);
        cpu.layernormForward(out, mean, rstd, inp, w, b, shape.B, shape.T, Cn);
        const [gOut, gMean, gRstd, gInp, gParams] = [
          new Float32Array(BT * Cn),
          new Float32Array(BT),
          new Float32Array(BT),
          inp,
          params,
        ].map((a) => upload(device, a));
        const d = { C: Cn, wOff, bOff };
        await runOn([gpu.layernormForward(gOut, gMean, gRstd, gInp, gParams, d)], shape, ks());
        await expectClose('layernorm_forward', gOut, out);
        await expectClose('layernorm_forward', gMean, mean);
        await expectClose('layernorm_forward', gRstd, rstd);
        expect(() => gpu.layernormForward(gOut, gMean, gRstd, gInp, gParams, { ...d, C: 50 })).toThrow(
          'layernorm forward needs C a multiple of 4, got C = 50',
        );

        const dout = randn(BT * Cn, 12);
        const dinp0 = randn(BT * Cn, 13),
          grads0 = randn(params.length, 14);
        const dinp = dinp0.slice(),
          grads = grads0.slice();
        cpu.layernormBackward(
          dinp,
          grads.subarray(wOff, wOff + Cn),
          grads.subarray(bOff, bOff + Cn),
          dout,
          inp,
          w,
          mean,
          rstd,
          shape.B,
          shape.T,
          Cn,
        );
        const gDinp = upload(device, dinp0),
          gGrads = upload(device, grads0);
        await runOn(
          gpu.layernormBackward(gDinp, gGrads, upload(device, dout), gInp, gParams, gMean, gRstd, {
            ...d,
            partials: upload(device, new Float32Array(gpu.partialsScratch(0, BT, 2 * Cn))),
            accumulateDinp: true,
            accumulateParams: true,
          }),
          shape,
          ks(),
        );
        await expectClose('layernorm_backward', gDinp, dinp);
        await expectClose('layernorm_backward', gGrads, grads);
      });

      it(`residual_layernorm_forward (the residual add fused into the LayerNorm), C=${Cn}, B·T=${BT}`, async () => {
        const wOff = 1,
          bOff = 1 + Cn;
        const params = randn(bOff + Cn, 15);
        const a = randn(BT * Cn, 16, 2),
          b2 = randn(BT * Cn, 17);
        const res = new Float32Array(BT * Cn),
          out = new Float32Array(BT * Cn),
          mean = new Float32Array(BT),
          rstd = new Float32Array(BT);
        cpu.residualForward(res, a, b2, BT * Cn);
        cpu.layernormForward(
          out,
          mean,
          rstd,
          res,
          params.subarray(wOff, wOff + Cn),
          params.subarray(bOff, bOff + Cn),
          shape.B,
          shape.T,
          Cn,
        );
        const [gRes, gOut, gMean, gRstd] = [BT * Cn, BT * Cn, BT, BT].map((n) => upload(device, new Float32Array(n)));
        await runOn(
          [
            gpu.residualLayernormForward(
              gRes,
              gOut,
              gMean,
              gRstd,
              upload(device, a),
              upload(device, b2),
              upload(device, params),
              { C: Cn, wOff, bOff },
            ),
          ],
          shape,
          ks(),
        );
        await expectClose('residual_layernorm_forward', gRes, res);
        await expectClose('residual_layernorm_forward', gOut, out);
        await expectClose('residual_layernorm_forward', gMean, mean);
        await expectClose('residual_layernorm_forward', gRstd, rstd);
      });
    }
  });

describe('matmul', () => {
  // [C, OC, wOff, bias, tile]: vec4 path (C, OC, offsets ÷ 4) and scalar paths, on the
  // default tile (B=3, T=17) and on each tile the autotuner tries (B=2, T=65: several tiles of rows)
  const cases: Array<[number, number, number, boolean, MatmulTile?]> = [
    [48, 144, 8, true], // vec4; OC not a multiple of the 64 tile
    [48, 51, 0, false], // V-like OC not a multiple of 4 → scalar, no bias (tied LM head)
    [50, 70, 3, true], // K not a multiple of 4 or 16, unaligned offset → scalar
    [48, 144, 8, false], // aligned, but scalar as the autotuner may choose (vec4: false)
    ...TILE_VARIANTS.flatMap(
      (t): Array<[number, number, number, boolean, MatmulTile]> => [
        [48, 144, 8, true, t],
        [50, 70, 3, true, t],
      ],
    ),
  ];
  const tileName = (t?: MatmulTile) =>
    t ? ` ${t.direct ? 'direct' : 'tile'} ${t.bm}x${t.bn}/${t.tm}${t.tn ? `x${t.tn}` : ''}` : '';
  for (const [i, [Ci, OC, wOff, hasBias, tile]] of cases.entries()) {
    const vec4 = i === 3 ? false : undefined;
    const shape = tile ? { B: 2, T: 65 } : { B, T };
    const BT = shape.B * shape.T;
    it(`matmul forward and backward, C=${Ci} OC=${OC} wOff=${wOff}${hasBias ? ' +bias' : ''}${vec4 === false ? ' scalar' : ''}${tileName(tile)}`, async () => {
      const biasOff = hasBias ? wOff + OC * Ci + 1 : null;
      const params = randn(wOff + OC * Ci + 1 + OC, 20);
      const W = params.subarray(wOff, wOff + OC * Ci);
      const bias = biasOff === null ? null : params.subarray(biasOff, biasOff + OC);
      const inp = randn(BT * Ci, 21);
      const out = new Float32Array(BT * OC);
      cpu.matmulForward(out, inp, W, bias, shape.B, shape.T, Ci, OC);
      const gOut = upload(device, new Float32Array(BT * OC)),
        gInp = upload(device, inp),
        gParams = upload(device, params);
      const d = { C: Ci, OC, wOff, biasOff, vec4, dwVec4: vec4, tile, dwTile: tile };
      if (vec4 === false) expect(gpu.matmulForward(gOut, gInp, gParams, d).entry).toBe('matmul_forward');
      await runOn([gpu.matmulForward(gOut, gInp, gParams, d)], shape);
      await expectClose('matmul_forward', gOut, out);

      const dout = randn(BT * OC, 22);
      const dinp0 = randn(BT * Ci, 23),
        grads0 = randn(params.length, 24);
      const dinp = dinp0.slice(),
        grads = grads0.slice();
      cpu.matmulBackward(
        dinp,
        grads.subarray(wOff, wOff + OC * Ci),
        biasOff === null ? null : grads.subarray(biasOff, biasOff + OC),
        dout,
        inp,
        W,
        shape.B,
        shape.T,
        Ci,
        OC,
      );
      const gDinp = upload(device, dinp0),
        gGrads = upload(device, grads0);
      const partials = upload(device, new Float32Array(gpu.partialsScratch(OC * Ci, BT, OC)));
      await runOn(
        gpu.matmulBackward(gDinp, gGrads, upload(device, dout), gInp, gParams, {
          ...d,
          partials,
          accumulateDinp: true,
          accumulateParams: true,
        }),
        shape,
      );
      await expectClose('matmul_backward', gDinp, dinp);
      await expectClose('matmul_backward', gGrads, grads);

      // dW split along K = B·T into 4 slices of 16 rows (B·T = 51) or 3 of 48 (130), summed by the reduce pass
      const gGrads2 = upload(device, grads0);
      const partials4 = upload(device, new Float32Array(4 * OC * Ci));
      await runOn(
        gpu.matmulBackward(null, gGrads2, upload(device, dout), gInp, gParams, {
          ...d,
          accumulateParams: true,
          partials: partials4,
          splitK: 4,
        }),
        shape,
      );
      await expectClose('matmul_backward_splitk', gGrads2, grads);
    });
  }

  for (const tile of [undefined, ...TILE_VARIANTS])
    for (const [Ci, OC, wOff] of [
      [48, 144, 8],
      [50, 70, 3],
    ]) {
      it(`matmul_forward with the fused bias + GELU epilogue and an input offset, C=${Ci} OC=${OC}${tileName(tile)}`, async () => {
        const M = BT,
          inOff = 4,
          geluOff = M * OC + ((4 - ((M * OC) % 4)) % 4);
        const params = randn(wOff + OC * Ci + OC, 25);
        const W = params.subarray(wOff, wOff + OC * Ci),
          bias = params.subarray(wOff + OC * Ci);
        const inp = randn(inOff + M * Ci, 26);
        const pre = new Float32Array(M * OC),
          act = new Float32Array(M * OC);
        cpu.matmulForward(pre, inp.subarray(inOff), W, bias, B, T, Ci, OC);
        cpu.geluForward(act, pre, M * OC);
        const gOut = upload(device, new Float32Array(geluOff + M * OC));
        const spec = gpu.matmulForward(gOut, upload(device, inp), upload(device, params), {
          C: Ci,
          OC,
          wOff,
          biasOff: wOff + OC * Ci,
          inOff,
          geluOff,
          tile,
        });
        expect(spec.entry).toBe(`matmul_forward${tile?.direct ? '_direct' : ''}${Ci === 48 ? '_vec4' : ''}`);
        await runOn([spec], shape);
        await expectClose('matmul_forward_gelu', gOut, pre);
        await expectClose('matmul_forward_gelu', gOut, act, RTOL, geluOff);
      });
    }

  it('matmul over several tiles in every dimension (M=130, K=100, N=70), dbias over two row slices', async () => {
    const s = { B: 2, T: 65 };
    const M = 130,
      K = 100,
      N = 70;
    const params = randn(N * K + N, 30);
    const W = params.subarray(0, N * K),
      bias = params.subarray(N * K);
    const inp = randn(M * K, 31);
    const out = new Float32Array(M * N);
    cpu.matmulForward(out, inp, W, bias, s.B, s.T, K, N);
    const gOut = upload(device, new Float32Array(M * N)),
      gInp = upload(device, inp),
      gParams = upload(device, params);
    const d = { C: K, OC: N, wOff: 0, biasOff: N * K };
    await runOn([gpu.matmulForward(gOut, gInp, gParams, d)], s);
    await expectClose('matmul_forward', gOut, out);
    expect(gpu.rowSlices(M).slices).toBe(2);
    const dout = randn(M * N, 32),
      grads = new Float32Array(params.length),
      dinp = new Float32Array(M * K);
    cpu.matmulBackward(dinp, grads.subarray(0, N * K), grads.subarray(N * K), dout, inp, W, s.B, s.T, K, N);
    const gGrads = upload(device, new Float32Array(params.length)),
      gDinp = upload(device, new Float32Array(M * K));
    const partials = upload(device, new Float32Array(gpu.partialsScratch(N * K, M, N)));
    await runOn(gpu.matmulBackward(gDinp, gGrads, upload(device, dout), gInp, gParams, { ...d, partials }), s);
    await expectClose('matmul_backward', gDinp, dinp);
    await expectClose('matmul_backward', gGrads, grads);
  });
});

describe('attention', () => {
  // odd shapes: T not a multiple of the 4-row blocks nor of the 64-row workgroups, T = 1, head sizes 4, 16 and 20
  for (const [Bn, Tn, Cn, NH] of [
    [3, 17, 48, 3],
    [2, 70, 60, 3],
    [2, 1, 32, 2],
    [1, 5, 8, 2],
  ]) {
    it(`attention_forward and backward (B=${Bn}, T=${Tn}, C=${Cn}, NH=${NH})`, async () => {
      const s = { B: Bn, T: Tn },
        BTn = Bn * Tn,
        rows = Bn * NH * Tn;
      const inp = randn(BTn * 3 * Cn, 40);
      const out = new Float32Array(BTn * Cn),
        preatt = new Float32Array(rows * Tn),
        att = new Float32Array(rows * Tn);
      cpu.attentionForward(out, preatt, att, inp, Bn, Tn, Cn, NH);
      const gOut = upload(device, new Float32Array(BTn * Cn)),
        gLse = upload(device, new Float32Array(rows)),
        gInp = upload(device, inp);
      await runOn([gpu.attentionForward(gOut, gLse, gInp, { C: Cn, NH })], s);
      await expectClose('attention_forward', gOut, out);
      // lse = log Σ_t2≤t exp(preatt), from the twin's scores
      const lse = new Float32Array(rows);
      for (let r = 0; r < rows; r++) {
        const t = r % Tn,
          row = preatt.subarray(r * Tn, r * Tn + t + 1);
        const m = Math.max(...row);
        lse[r] = m + Math.log(row.reduce((acc, x) => acc + Math.exp(x - m), 0));
      }
      await expectClose('attention_forward_lse', gLse, lse);

      const dout = randn(BTn * Cn, 41);
      const dinp0 = randn(BTn * 3 * Cn, 42);
      const dinp = dinp0.slice();
      cpu.attentionBackward(
        dinp,
        new Float32Array(att.length),
        new Float32Array(att.length),
        dout,
        inp,
        att,
        Bn,
        Tn,
        Cn,
        NH,
      );
      const gDinp = upload(device, dinp0);
      await runOn(
        gpu.attentionBackward(gDinp, upload(device, new Float32Array(rows)), upload(device, dout), gInp, gOut, gLse, {
          C: Cn,
          NH,
          accumulate: true,
        }),
        s,
      );
      await expectClose('attention_backward', gDinp, dinp);
    });
  }
  it('refuses a head size that is not a multiple of 4 (rows go as vec4s)', () => {
    expect(() =>
      gpu.attentionForward(
        upload(device, new Float32Array(4)),
        upload(device, new Float32Array(4)),
        upload(device, new Float32Array(4)),
        { C: 30, NH: 5 },
      ),
    ).toThrow('multiple of 4');
  });
});

describe('elementwise', () => {
  const width = 4 * C,
    N = BT * width;
  it('gelu_forward and gelu_backward', async () => {
    const inp = randn(N, 50, 3);
    const out = new Float32Array(N);
    cpu.geluForward(out, inp, N);
    const gOut = upload(device, new Float32Array(N)),
      gInp = upload(device, inp);
    await runOn([gpu.geluForward(gOut, gInp, { width })], shape);
    await expectClose('gelu_forward', gOut, out);
    const dout = randn(N, 51),
      dinp0 = randn(N, 52);
    const dinp = dinp0.slice();
    cpu.geluBackward(dinp, inp, dout, N);
    const gDinp = upload(device, dinp0);
    await runOn([gpu.geluBackward(gDinp, gInp, upload(device, dout), { width, accumulate: true })], shape);
    await expectClose('gelu_backward', gDinp, dinp);
  });
});

// the per-row losses and their gradients of the chunked head: test/webgpu-head.test.ts
for (const [path, ks] of REDUCTION_PATHS)
  describe(`mean loss (${path} reductions)`, () => {
    it('into its slot of the loss ring', async () => {
      const losses = randn(BT, 60, 3).map(Math.abs);
      const ring = upload(device, new Float32Array(8));
      device.queue.writeBuffer(
        stepBuf,
        0,
        encodeStepUniform({
          lr: 0,
          beta1: 0,
          beta2: 0,
          eps: 0,
          weightDecay: 0,
          bc1: 1,
          bc2: 1,
          maxNorm: 0,
          lossSlot: 5,
          step: 0,
        }),
      );
      await runOn([gpu.meanLoss(ring, upload(device, losses))], shape, ks());
      await expectClose('mean_loss', ring, Float32Array.of(cpu.meanLoss(losses, BT)), RTOL, 5);
    });
  });

describe('optimizer', () => {
  const N = 20011;
  const grads = randn(N, 70, 0.1);
  const normSq = cpu.gradNormSquared(grads, N);

  for (const [maxNorm, [path, ks]] of [
    [0, REDUCTION_PATHS[0]],
    [1, REDUCTION_PATHS[1]],
  ] as const) {
    it(`grad norm and clip scale on the GPU (maxNorm ${maxNorm}, ${path} reductions)`, async () => {
      const clip = upload(device, new Float32Array(4));
      device.queue.writeBuffer(
        stepBuf,
        0,
        encodeStepUniform({
          lr: 0,
          beta1: 0,
          beta2: 0,
          eps: 0,
          weightDecay: 0,
          bc1: 1,
          bc2: 1,
          maxNorm,
          lossSlot: 0,
          step: 0,
        }),
      );
      await runOn(
        gpu.gradNorm(clip, upload(device, new Float32Array(gpu.gradNormPartials(N))), upload(device, grads), { N }),
        { B: 1, T: 1 },
        ks(),
      );
      await expectClose('grad_norm', clip, Float32Array.of(normSq, cpu.clipScale(normSq, maxNorm)));
    });
  }

  it('adamw_update: per-tensor decay, bias correction, clip scale', async () => {
    const tensors = [
      // range ends not multiples of 4: a thread's 4 elements straddle one (adamw.wgsl)
      { offset: 0, size: 5001, decay: true },
      { offset: 5001, size: 37, decay: false },
      { offset: 5038, size: 62, decay: false },
      { offset: 5100, size: 9000, decay: true },
      { offset: 14100, size: N - 14100, decay: false },
    ];
    const params = randn(N, 71),
      m0 = randn(N, 72, 0.01),
      v0 = randn(N, 73, 0.001).map((x) => x * x);
    const h = { lr: 3e-3, ...cpu.ADAMW_DEFAULTS },
      step = 3,
      scale = 0.7;
    const want = params.slice(),
      m = m0.slice(),
      v = v0.slice();
    for (const t of tensors) {
      const s = (a: Float32Array) => a.subarray(t.offset, t.offset + t.size);
      cpu.adamwUpdate(
        s(want),
        s(grads),
        s(m),
        s(v),
        t.size,
        h.lr,
        h.beta1,
        h.beta2,
        h.eps,
        t.decay ? h.weightDecay : 0,
        step,
        scale,
      );
    }
    const [gP, gG, gM, gV] = [params, grads, m0, v0].map((a) => upload(device, a));
    const clip = upload(device, Float32Array.of(0, scale, 0, 0));
    device.queue.writeBuffer(
      stepBuf,
      0,
      encodeStepUniform({
        lr: h.lr,
        beta1: h.beta1,
        beta2: h.beta2,
        eps: h.eps,
        weightDecay: h.weightDecay,
        bc1: 1 - h.beta1 ** step,
        bc2: 1 - h.beta2 ** step,
        maxNorm: 0,
        lossSlot: 0,
        step,
      }),
    );
    const ranges = gpu.decayRanges(tensors);
    expect(ranges.length).toBe(4);
    await runOn([gpu.adamwUpdate(gP, gG, gM, gV, clip, { N, ranges })], { B: 1, T: 1 });
    await expectClose('adamw_update', gP, want);
    await expectClose('adamw_update', gM, m);
    await expectClose('adamw_update', gV, v);
  });

  it('pseudo_gradient', async () => {
    const start = randn(N, 80),
      theta = randn(N, 81);
    const want = new Float32Array(N);
    cpu.pseudoGradient(want, start, theta, N);
    const delta = upload(device, new Float32Array(N));
    await runOn([gpu.pseudoGradient(delta, upload(device, start), upload(device, theta), { N })], { B: 1, T: 1 });
    await expectClose('pseudo_gradient', delta, want);
  });
});
