// Each Wasm SIMD kernel (core/engine/wasm/as/kernels.ts) against its CPU reference in core/model/ops.ts, on
// odd shapes (every SIMD loop's tail runs), by a norm-relative error: f32 sums in lanes against the JS loops'
// f64 accumulation differ per element near zero, not in the norm.

import { beforeAll, describe, expect, it } from 'vitest';
import { KernelRunner } from '../core/engine/wasm/kernels.ts';
import * as ops from '../core/model/ops.ts';
import { mulberry32 } from '../core/random.ts';

let run: KernelRunner;
let f32: Float32Array;
let top = 0;

beforeAll(async () => {
  run = await KernelRunner.create(8 << 20, 1);
  f32 = new Float32Array(run.memory.buffer);
});

/** A fresh tensor in the module's memory (byte address) holding `data`, or n zeros. */
function put(data: Float32Array | number): number {
  const n = typeof data === 'number' ? data : data.length;
  if (top === 0) top = run.control + 256;
  const at = top;
  top += Math.ceil((n * 4) / 64) * 64;
  f32.set(typeof data === 'number' ? new Float32Array(n) : data, at >> 2);
  return at;
}
const get = (at: number, n: number) => f32.slice(at >> 2, (at >> 2) + n);
const putTokens = (t: Int32Array) => {
  const at = put(t.length);
  new Int32Array(run.memory.buffer).set(t, at >> 2);
  return at;
};

function randn(n: number, seed: number, scale = 1): Float32Array {
  const r = mulberry32(seed);
  return Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
}

/** ‖a − b‖ / ‖b‖ (b the reference). */
function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let d = 0,
    n = 0;
  for (let i = 0; i < b.length; i++) {
    d += (a[i] - b[i]) ** 2;
    n += b[i] ** 2;
  }
  return Math.sqrt(d / Math.max(n, 1e-30));
}

describe('wasm kernels against core/model/ops.ts', () => {
  const B = 3,
    T = 5,
    C = 13,
    OC = 19,
    BT = B * T;

  const stripes = (N: number) => Math.ceil(N / 8);

  it('matmul forward: Wᵀ packed in panels, then the 4×8-blocked GEMM with bias', () => {
    const inp = randn(BT * C, 1),
      w = randn(OC * C, 2),
      bias = randn(OC, 3);
    const want = new Float32Array(BT * OC);
    ops.matmulForward(want, inp, w, bias, B, T, C, OC);
    const bp = put(stripes(OC) * 8 * C),
      out = put(BT * OC);
    run.run('packColumns', stripes(OC), 1, bp, put(w), C, OC);
    run.run('gemm', BT, 4, out, put(inp), C, 1, bp, put(bias), 0, C, OC);
    expect(relErr(get(out, BT * OC), want)).toBeLessThan(1e-6);
  });

  it('matmul backward: dinp, dweight (accumulated), dbias', () => {
    const inp = randn(BT * C, 4),
      w = randn(OC * C, 5),
      dout = randn(BT * OC, 6);
    const dw0 = randn(OC * C, 7),
      db0 = randn(OC, 8);
    const dinp = new Float32Array(BT * C),
      dw = dw0.slice(),
      db = db0.slice();
    ops.matmulBackward(dinp, dw, db, dout, inp, w, B, T, C, OC);
    const [ai, aw, ad, ado, adw, adb] = [put(BT * C), put(w), put(inp), put(dout), put(dw0), put(db0)];
    const bp = put(stripes(C) * 8 * Math.max(OC, BT));
    run.run('packRows', stripes(C), 1, bp, aw, OC, C);
    run.run('gemm', BT, 4, ai, ado, OC, 1, bp, 0, 0, OC, C);
    run.run('packRows', stripes(C), 1, bp, ad, BT, C);
    run.run('gemm', OC, 4, adw, ado, 1, OC, bp, 0, 1, BT, C);
    run.run('columnSum', OC, 4, adb, ado, BT, OC);
    expect(relErr(get(ai, BT * C), dinp)).toBeLessThan(1e-6);
    expect(relErr(get(adw, OC * C), dw)).toBeLessThan(1e-6);
    expect(relErr(get(adb, OC), db)).toBeLessThan(1e-6);
  });

  it('encoder forward and backward', () => {
    const V = 11;
    const tokens = Int32Array.from({ length: BT }, (_, i) => (i * 7) % V);
    const wte = randn(V * C, 9),
      wpe = randn(T * C, 10),
      dout = randn(BT * C, 11);
    const want = new Float32Array(BT * C),
      dwte = new Float32Array(V * C),
      dwpe = new Float32Array(T * C);
    ops.encoderForward(want, tokens, wte, wpe, B, T, C);
    ops.encoderBackward(dwte, dwpe, dout, tokens, B, T, C);
    const at = putTokens(tokens),
      out = put(BT * C),
      [gte, gpe] = [put(V * C), put(T * C)];
    run.run('encoderForward', BT, 1, out, at, put(wte), put(wpe), T, C);
    run.run('encoderBackward', C, 4, gte, gpe, put(dout), at, BT, T, C);
    expect(get(out, BT * C)).toEqual(want);
    expect(relErr(get(gte, V * C), dwte)).toBeLessThan(1e-6);
    expect(relErr(get(gpe, T * C), dwpe)).toBeLessThan(1e-6);
  });

  it('layernorm forward and backward (input, then gains and biases by channel)', () => {
    const inp = randn(BT * C, 12, 3),
      w = randn(C, 13),
      b = randn(C, 14),
      dout = randn(BT * C, 15);
    const out = new Float32Array(BT * C),
      mean = new Float32Array(BT),
      rstd = new Float32Array(BT);
    ops.layernormForward(out, mean, rstd, inp, w, b, B, T, C);
    const dinp0 = randn(BT * C, 16);
    const dinp = dinp0.slice(),
      dw = new Float32Array(C),
      db = new Float32Array(C);
    ops.layernormBackward(dinp, dw, db, dout, inp, w, mean, rstd, B, T, C);
    const [ao, am, ar, ai, aw, ab] = [put(BT * C), put(BT), put(BT), put(inp), put(w), put(b)];
    run.run('layernormForward', BT, 1, ao, am, ar, ai, aw, ab, C);
    expect(relErr(get(ao, BT * C), out)).toBeLessThan(1e-6);
    expect(relErr(get(am, BT), mean)).toBeLessThan(1e-6);
    expect(relErr(get(ar, BT), rstd)).toBeLessThan(1e-6);
    const [adi, adw, adb, ado] = [put(dinp0), put(C), put(C), put(dout)];
    run.run('layernormBackwardInput', BT, 1, adi, ado, ai, aw, am, ar, C);
    run.run('layernormBackwardParams', C, 4, adw, adb, ado, ai, am, ar, BT, C);
    expect(relErr(get(adi, BT * C), dinp)).toBeLessThan(1e-5);
    expect(relErr(get(adw, C), dw)).toBeLessThan(1e-5);
    expect(relErr(get(adb, C), db)).toBeLessThan(1e-6);
  });

  it('attention forward and backward (head size 5, T 7)', () => {
    const [aB, aT, aC, NH] = [2, 7, 15, 3];
    const qkv = randn(aB * aT * 3 * aC, 17, 2),
      dout = randn(aB * aT * aC, 18);
    const att = aB * NH * aT * aT;
    const out = new Float32Array(aB * aT * aC),
      pre = new Float32Array(att),
      a = new Float32Array(att);
    ops.attentionForward(out, pre, a, qkv, aB, aT, aC, NH);
    const dqkv = new Float32Array(qkv.length);
    ops.attentionBackward(dqkv, new Float32Array(att), new Float32Array(att), dout, qkv, a, aB, aT, aC, NH);
    const [ao, aa, aq] = [put(out.length), put(att), put(qkv)];
    run.run('attentionForward', aB * NH, 1, ao, aa, aq, aT, aC, NH);
    expect(relErr(get(ao, out.length), out)).toBeLessThan(1e-5);
    const mine = get(aa, att);
    // only the causal half is stored (t2 ≤ t); the reference zeroes the rest
    for (let r = 0; r < aB * NH * aT; r++) for (let t2 = (r % aT) + 1; t2 < aT; t2++) mine[r * aT + t2] = 0;
    expect(relErr(mine, a)).toBeLessThan(1e-5);
    const adq = put(randn(qkv.length, 19)); // overwritten, not accumulated
    run.run('attentionBackward', aB * NH, 1, adq, put(att), put(dout), aq, aa, aT, aC, NH);
    expect(relErr(get(adq, qkv.length), dqkv)).toBeLessThan(1e-5);
  });

  it('GELU forward and backward, residual', () => {
    const N = 37;
    const x = randn(N, 20, 6),
      dout = randn(N, 21),
      y = randn(N, 22);
    x[0] = 0; // the backward reads tanh back from the output, 2·out/x − 1, except near 0
    x[1] = 3e-7;
    const want = new Float32Array(N),
      dwant = new Float32Array(N),
      sum = new Float32Array(N);
    ops.geluForward(want, x, N);
    ops.geluBackward(dwant, x, dout, N);
    ops.residualForward(sum, x, y, N);
    const [ax, ao, ad, ag, ay, as] = [put(x), put(N), put(dout), put(N), put(y), put(N)];
    run.run('geluForward', N, 4, ao, ax);
    run.run('geluBackward', N, 4, ag, ax, ao, ad);
    run.run('residualForward', N, 4, as, ax, ay);
    // tanh is a rational approximation (within 2.3e-7 of Math.tanh)
    expect(relErr(get(ao, N), want)).toBeLessThan(3e-6);
    expect(relErr(get(ag, N), dwant)).toBeLessThan(3e-6);
    expect(get(as, N)).toEqual(sum);
  });

  it('softmax cross-entropy forward and backward (V 37)', () => {
    const V = 37;
    const logits = randn(BT * V, 23, 5),
      targets = Int32Array.from({ length: BT }, (_, i) => (i * 5) % V);
    const losses = new Float32Array(BT),
      probs = new Float32Array(BT * V),
      dlogits = new Float32Array(BT * V);
    ops.softmaxCrossEntropyForward(losses, probs, logits, targets, B, T, V);
    ops.softmaxCrossEntropyBackward(dlogits, probs, targets, 1 / BT, B, T, V);
    const [al, ax, at] = [put(BT), put(logits), putTokens(targets)];
    run.run('crossEntropyForward', BT, 1, al, ax, at, V);
    expect(relErr(get(al, BT), losses)).toBeLessThan(1e-6);
    expect(relErr(get(ax, BT * V), probs)).toBeLessThan(1e-6);
    run.run('crossEntropyBackward', BT, 1, ax, at, 1 / BT, V);
    expect(relErr(get(ax, BT * V), dlogits)).toBeLessThan(1e-6);
  });

  it('AdamW with clipping and decay, the gradient norm, Δ', () => {
    const N = 1001;
    const p = randn(N, 24),
      g = randn(N, 25),
      m = randn(N, 26, 0.1),
      v = randn(N, 27, 0.1).map(Math.abs);
    const [ap, ag, am, av] = [put(p), put(g), put(m), put(v)];
    const [lr, b1, b2, eps, wd, step, scale] = [3e-3, 0.9, 0.95, 1e-8, 0.1, 3, 0.7];
    ops.adamwUpdate(p, g, m, v, N, lr, b1, b2, eps, wd, step, scale);
    run.run('adamw', N, 4, ap, ag, am, av, lr, b1, b2, eps, wd, 1 - b1 ** step, 1 - b2 ** step, scale);
    expect(relErr(get(ap, N), p)).toBeLessThan(1e-6);
    expect(relErr(get(am, N), m)).toBeLessThan(1e-6);
    expect(relErr(get(av, N), v)).toBeLessThan(1e-6);
    const parts = put(3);
    run.run('sumSquares', 3, 1, parts, ag, N, 400);
    const sq = get(parts, 3).reduce((s, x) => s + x, 0);
    expect(Math.abs(sq - ops.gradNormSquared(g, N)) / ops.gradNormSquared(g, N)).toBeLessThan(1e-6);
    const delta = new Float32Array(N),
      ad = put(N),
      start = randn(N, 28);
    ops.pseudoGradient(delta, start, get(ap, N), N);
    run.run('subtract', N, 4, ad, put(start), ap);
    expect(get(ad, N)).toEqual(delta);
  });
});
