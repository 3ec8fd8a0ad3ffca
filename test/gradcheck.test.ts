// Gradient checks in float64: analytic backward vs central finite differences.
// In float64 with h = 1e-5 the truncation error is O(h²) ≈ 1e-10 and the
// rounding error O(ε/h) ≈ 1e-11, so a relative error above 1e-6 is a real bug.
// Entries whose true gradient is ~0 (e.g. the key bias, which softmax cancels)
// are compared absolutely: the denominator has a floor of 1e-3.

import { describe, expect, it } from 'vitest';
import { PRESETS, paramLayout } from '../core/model/config.ts';
import { GPT } from '../core/model/gpt.ts';
import * as ops from '../core/model/ops.ts';
import { gaussian, mulberry32 } from '../core/random.ts';

const H = 1e-5;
const TOL = 1e-6;

function randArr(n: number, seed: number, scale = 1): Float64Array {
  const r = gaussian(mulberry32(seed));
  return Float64Array.from({ length: n }, () => r() * scale);
}

/** max over i of |a−n| / max(1e-3, |a|+|n|) */
function relErr(analytic: ArrayLike<number>, numeric: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < analytic.length; i++) {
    const a = analytic[i],
      n = numeric[i];
    worst = Math.max(worst, Math.abs(a - n) / Math.max(1e-3, Math.abs(a) + Math.abs(n)));
  }
  return worst;
}

/**
 * Checks d(Σ w·f(inputs))/d input for each named input.
 * `forward` returns f's output; `backward(dout)` returns the analytic gradients.
 */
function checkOp(
  inputs: Record<string, Float64Array>,
  forward: () => Float64Array,
  backward: (dout: Float64Array) => Record<string, Float64Array>,
) {
  const out0 = forward();
  const w = randArr(out0.length, 99);
  const loss = () => {
    const o = forward();
    let s = 0;
    for (let i = 0; i < o.length; i++) s += o[i] * w[i];
    return s;
  };
  const grads = backward(w);
  const errors: Record<string, number> = {};
  for (const [name, x] of Object.entries(inputs)) {
    const numeric = new Float64Array(x.length);
    for (let i = 0; i < x.length; i++) {
      const keep = x[i];
      x[i] = keep + H;
      const lp = loss();
      x[i] = keep - H;
      const lm = loss();
      x[i] = keep;
      numeric[i] = (lp - lm) / (2 * H);
    }
    errors[name] = relErr(grads[name], numeric);
  }
  return errors;
}

describe('gradient check, each op (float64)', () => {
  const B = 2,
    T = 5,
    C = 8,
    OC = 6,
    NH = 2;

  it('encoder', () => {
    const V = 11;
    const inp = Int32Array.from({ length: B * T }, (_, i) => (i * 7) % V);
    const wte = randArr(V * C, 1),
      wpe = randArr(T * C, 2);
    const out = new Float64Array(B * T * C);
    const errs = checkOp(
      { wte, wpe },
      () => {
        ops.encoderForward(out, inp, wte, wpe, B, T, C);
        return out;
      },
      (dout) => {
        const dwte = new Float64Array(V * C),
          dwpe = new Float64Array(T * C);
        ops.encoderBackward(dwte, dwpe, dout, inp, B, T, C);
        return { wte: dwte, wpe: dwpe };
      },
    );
    for (const e of Object.values(errs)) expect(e).toBeLessThan(TOL);
  });

  it('layernorm', () => {
    const inp = randArr(B * T * C, 3),
      weight = randArr(C, 4),
      bias = randArr(C, 5);
    const out = new Float64Array(B * T * C),
      mean = new Float64Array(B * T),
      rstd = new Float64Array(B * T);
    const errs = checkOp(
      { inp, weight, bias },
      () => {
        ops.layernormForward(out, mean, rstd, inp, weight, bias, B, T, C);
        return out;
      },
      (dout) => {
        ops.layernormForward(out, mean, rstd, inp, weight, bias, B, T, C);
        const dinp = new Float64Array(inp.length),
          dw = new Float64Array(C),
          db = new Float64Array(C);
        ops.layernormBackward(dinp, dw, db, dout, inp, weight, mean, rstd, B, T, C);
        return { inp: dinp, weight: dw, bias: db };
      },
    );
    for (const e of Object.values(errs)) expect(e).toBeLessThan(TOL);
  });

  it('matmul with bias, including a row count that is not a multiple of 4', () => {
    for (const [b, t] of [
      [2, 5],
      [1, 3],
    ]) {
      const inp = randArr(b * t * C, 6),
        weight = randArr(OC * C, 7),
        bias = randArr(OC, 8);
      const out = new Float64Array(b * t * OC);
      const errs = checkOp(
        { inp, weight, bias },
        () => {
          ops.matmulForward(out, inp, weight, bias, b, t, C, OC);
          return out;
        },
        (dout) => {
          const dinp = new Float64Array(inp.length),
            dw = new Float64Array(weight.length),
            db = new Float64Array(OC);
          ops.matmulBackward(dinp, dw, db, dout, inp, weight, b, t, C, OC);
          return { inp: dinp, weight: dw, bias: db };
        },
      );
      for (const e of Object.values(errs)) expect(e).toBeLessThan(TOL);
    }
  });

  it('causal attention', () => {
    const inp = randArr(B * T * 3 * C, 9);
    const out = new Float64Array(B * T * C),
      pre = new Float64Array(B * NH * T * T),
      att = new Float64Array(B * NH * T * T);
    const errs = checkOp(
      { inp },
      () => {
        ops.attentionForward(out, pre, att, inp, B, T, C, NH);
        return out;
      },
      (dout) => {
        ops.attentionForward(out, pre, att, inp, B, T, C, NH);
        const dinp = new Float64Array(inp.length);
        ops.attentionBackward(
          dinp,
          new Float64Array(pre.length),
          new Float64Array(att.length),
          dout,
          inp,
          att,
          B,
          T,
          C,
          NH,
        );
        return { inp: dinp };
      },
    );
    expect(errs.inp).toBeLessThan(TOL);
  });

  it('gelu and residual', () => {
    const N = 40;
    const inp = randArr(N, 10, 2),
      other = randArr(N, 11);
    const out = new Float64Array(N);
    const g = checkOp(
      { inp },
      () => {
        ops.geluForward(out, inp, N);
        return out;
      },
      (dout) => {
        const d = new Float64Array(N);
        ops.geluBackward(d, inp, dout, N);
        return { inp: d };
      },
    );
    expect(g.inp).toBeLessThan(TOL);
    const r = checkOp(
      { inp, other },
      () => {
        ops.residualForward(out, inp, other, N);
        return out;
      },
      (dout) => {
        const d1 = new Float64Array(N),
          d2 = new Float64Array(N);
        ops.residualBackward(d1, d2, dout, N);
        return { inp: d1, other: d2 };
      },
    );
    expect(Math.max(r.inp, r.other)).toBeLessThan(TOL);
  });

  it('softmax + cross-entropy (mean loss)', () => {
    const V = 13;
    const logits = randArr(B * T * V, 12, 3);
    const targets = Int32Array.from({ length: B * T }, (_, i) => (i * 5) % V);
    const losses = new Float64Array(B * T),
      probs = new Float64Array(B * T * V);
    const mean = new Float64Array(1);
    const errs = checkOp(
      { logits },
      () => {
        ops.softmaxCrossEntropyForward(losses, probs, logits, targets, B, T, V);
        mean[0] = losses.reduce((a, b) => a + b, 0) / (B * T);
        return mean;
      },
      (dout) => {
        ops.softmaxCrossEntropyForward(losses, probs, logits, targets, B, T, V);
        const d = new Float64Array(logits.length);
        ops.softmaxCrossEntropyBackward(d, probs, targets, dout[0] / (B * T), B, T, V);
        return { logits: d };
      },
    );
    expect(errs.logits).toBeLessThan(TOL);
  });
});

describe('gradient check, whole model (float64, tiny preset)', () => {
  it('every parameter tensor matches central differences', () => {
    const config = PRESETS.tiny;
    const B = 2,
      T = 8;
    const model = new GPT<Float64Array>(config, B, T, Float64Array);
    const r = gaussian(mulberry32(5));
    for (let i = 0; i < model.params.length; i++) model.params[i] = r() * 0.1;
    // LayerNorm gains near 1 so activations are in a realistic range
    for (const k of ['ln1w', 'ln2w', 'lnfw']) for (let i = 0; i < model.p[k].length; i++) model.p[k][i] += 1;
    const inputs = Int32Array.from({ length: B * T }, (_, i) => (i * 37 + 11) % 256);
    const targets = Int32Array.from({ length: B * T }, (_, i) => (i * 53 + 7) % 256);
    model.forward(inputs, targets, B, T);
    model.backward();
    const analytic = model.grads.slice();
    const pick = mulberry32(17);
    const report: Record<string, number> = {};
    for (const t of paramLayout(config).tensors) {
      // 12 random entries of each tensor, plus its first and last
      const idx = [0, t.size - 1, ...Array.from({ length: 12 }, () => Math.floor(pick() * t.size))];
      const a: number[] = [],
        n: number[] = [];
      for (const j of idx) {
        const i = t.offset + j,
          keep = model.params[i];
        model.params[i] = keep + H;
        const lp = model.forward(inputs, targets, B, T);
        model.params[i] = keep - H;
        const lm = model.forward(inputs, targets, B, T);
        model.params[i] = keep;
        a.push(analytic[i]);
        n.push((lp - lm) / (2 * H));
      }
      report[t.name] = relErr(a, n);
    }
    console.log('whole-model gradient check, max relative error per tensor:', JSON.stringify(report));
    expect(Object.keys(report)).toHaveLength(16);
    for (const [name, e] of Object.entries(report)) expect(e, name).toBeLessThan(TOL);
  });
});
