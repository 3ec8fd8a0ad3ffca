// GELU, the residual add, softmax + cross-entropy, AdamW, the grad norm's sums, the Δ.
// Part of the Wasm SIMD kernels (kernels.ts, the entry `npm run build:wasm` compiles; its conventions hold).

import { at, splat, hsum, tanh4, expRow, scaleRow } from './simd';

// ---------------------------------------------------------------------------- GELU, residual

const GELU_S: f32 = 0.7978845608028654; // √(2/π)

/** out = ½x(1 + tanh(√(2/π)(x + 0.044715x³))) over [lo, hi). */
export function geluForward(out: usize, inp: usize, lo: i32, hi: i32): void {
  let i = lo;
  for (; i + 4 <= hi; i += 4) {
    const x = v128.load(at(inp, i));
    const u = f32x4.mul(splat(GELU_S), f32x4.add(x, f32x4.mul(splat(0.044715), f32x4.mul(x, f32x4.mul(x, x)))));
    v128.store(at(out, i), f32x4.mul(f32x4.mul(splat(0.5), x), f32x4.add(splat(1), tanh4(u))));
  }
  for (; i < hi; i++) {
    const x = splat(load<f32>(at(inp, i)));
    const u = f32x4.mul(splat(GELU_S), f32x4.add(x, f32x4.mul(splat(0.044715), f32x4.mul(x, f32x4.mul(x, x)))));
    store<f32>(at(out, i), f32x4.extract_lane(f32x4.mul(f32x4.mul(splat(0.5), x), f32x4.add(splat(1), tanh4(u))), 0));
  }
}

// The backward reads tanh back from the forward's output, th = 2·out/x − 1 (out = ½x(1 + th)), not
// from a second rational tanh: one division instead of twenty operations. Near x = 0, th ≈ √(2/π)·x.
@inline function geluGrad4(x: v128, out: v128): v128 {
  const x2 = f32x4.mul(x, x);
  const near0 = f32x4.lt(f32x4.abs(x), splat(1e-6));
  const th = v128.bitselect(
    f32x4.mul(splat(GELU_S), x),
    f32x4.sub(f32x4.div(f32x4.add(out, out), x), splat(1)),
    near0,
  );
  const sech2 = f32x4.sub(splat(1), f32x4.mul(th, th));
  const left = f32x4.mul(splat(0.5), f32x4.add(splat(1), th));
  const right = f32x4.mul(
    f32x4.mul(f32x4.mul(splat(0.5), x), sech2),
    f32x4.mul(splat(GELU_S), f32x4.add(splat(1), f32x4.mul(splat(3 * 0.044715), x2))),
  );
  return f32x4.add(left, right);
}

/** dinp = gelu'(x)·dout over [lo, hi), out the forward's output (overwrites: dinp has no other contributor). */
export function geluBackward(dinp: usize, inp: usize, out: usize, dout: usize, lo: i32, hi: i32): void {
  let i = lo;
  for (; i + 4 <= hi; i += 4) {
    const g = geluGrad4(v128.load(at(inp, i)), v128.load(at(out, i)));
    v128.store(at(dinp, i), f32x4.mul(g, v128.load(at(dout, i))));
  }
  for (; i < hi; i++) {
    const g = f32x4.extract_lane(geluGrad4(splat(load<f32>(at(inp, i))), splat(load<f32>(at(out, i)))), 0);
    store<f32>(at(dinp, i), g * load<f32>(at(dout, i)));
  }
}

/** out = a + b over [lo, hi). */
export function residualForward(out: usize, a: usize, b: usize, lo: i32, hi: i32): void {
  let i = lo;
  for (; i + 4 <= hi; i += 4) v128.store(at(out, i), f32x4.add(v128.load(at(a, i)), v128.load(at(b, i))));
  for (; i < hi; i++) store<f32>(at(out, i), load<f32>(at(a, i)) + load<f32>(at(b, i)));
}

// ---------------------------------------------------------------------------- softmax + cross-entropy

/** In place: logits (rows of V) become probs; losses[r] = log Σ exp − (logit[target] − max); rows [r0, r1). */
export function crossEntropyForward(losses: usize, logits: usize, targets: usize, V: i32, r0: i32, r1: i32): void {
  for (let r = r0; r < r1; r++) {
    const x = at(logits, r * V);
    let mv = splat(-Infinity);
    let i = 0;
    for (; i + 4 <= V; i += 4) mv = f32x4.max(mv, v128.load(at(x, i)));
    let maxv = Mathf.max(
      Mathf.max(f32x4.extract_lane(mv, 0), f32x4.extract_lane(mv, 1)),
      Mathf.max(f32x4.extract_lane(mv, 2), f32x4.extract_lane(mv, 3)),
    );
    for (; i < V; i++) maxv = Mathf.max(maxv, load<f32>(at(x, i)));
    const target = load<i32>(at(targets, r));
    const lt = load<f32>(at(x, target)) - maxv;
    const sum = expRow(x, V, maxv);
    scaleRow(x, V, 1 / sum);
    store<f32>(at(losses, r), Mathf.log(sum) - lt);
  }
}

/** In place: probs become dlogits = (probs − onehot(target))·dloss; rows [r0, r1). */
export function crossEntropyBackward(probs: usize, targets: usize, dloss: f32, V: i32, r0: i32, r1: i32): void {
  for (let r = r0; r < r1; r++) {
    const x = at(probs, r * V);
    const target = load<i32>(at(targets, r));
    store<f32>(at(x, target), load<f32>(at(x, target)) - 1);
    scaleRow(x, V, dloss);
  }
}

// ---------------------------------------------------------------------------- optimizer, Δ

/** AdamW over [lo, hi): g·scale, bias-corrected moments (bc1 = 1 − β1^t, bc2 = 1 − β2^t), decoupled decay. */
export function adamw(
  params: usize,
  grads: usize,
  m: usize,
  v: usize,
  lr: f32,
  beta1: f32,
  beta2: f32,
  eps: f32,
  wd: f32,
  bc1: f32,
  bc2: f32,
  scale: f32,
  lo: i32,
  hi: i32,
): void {
  const b1 = splat(beta1),
    b2 = splat(beta2),
    c1 = splat(1 - beta1),
    c2 = splat(1 - beta2);
  const lrv = splat(lr),
    epsv = splat(eps),
    wdv = splat(wd),
    bc1v = splat(bc1),
    bc2v = splat(bc2),
    sv = splat(scale);
  let i = lo;
  for (; i + 4 <= hi; i += 4) {
    const g = f32x4.mul(v128.load(at(grads, i)), sv);
    const mi = f32x4.add(f32x4.mul(b1, v128.load(at(m, i))), f32x4.mul(c1, g));
    const vi = f32x4.add(f32x4.mul(b2, v128.load(at(v, i))), f32x4.mul(c2, f32x4.mul(g, g)));
    v128.store(at(m, i), mi);
    v128.store(at(v, i), vi);
    const step = f32x4.div(f32x4.div(mi, bc1v), f32x4.add(f32x4.sqrt(f32x4.div(vi, bc2v)), epsv));
    const p = v128.load(at(params, i));
    v128.store(at(params, i), f32x4.sub(p, f32x4.mul(lrv, f32x4.add(step, f32x4.mul(wdv, p)))));
  }
  for (; i < hi; i++) {
    const g = load<f32>(at(grads, i)) * scale;
    const mi = beta1 * load<f32>(at(m, i)) + (1 - beta1) * g;
    const vi = beta2 * load<f32>(at(v, i)) + (1 - beta2) * (g * g);
    store<f32>(at(m, i), mi);
    store<f32>(at(v, i), vi);
    const p = load<f32>(at(params, i));
    store<f32>(at(params, i), p - lr * (mi / bc1 / (Mathf.sqrt(vi / bc2) + eps) + wd * p));
  }
}

/** out[c] = Σ g² over chunk c (elements [c·chunk, min((c+1)·chunk, n))) for chunks [c0, c1). */
export function sumSquares(out: usize, g: usize, n: i32, chunk: i32, c0: i32, c1: i32): void {
  for (let c = c0; c < c1; c++) {
    const lo = c * chunk,
      hi = min(lo + chunk, n);
    let acc = splat(0);
    let i = lo;
    for (; i + 4 <= hi; i += 4) {
      const x = v128.load(at(g, i));
      acc = f32x4.add(acc, f32x4.mul(x, x));
    }
    let s = hsum(acc);
    for (; i < hi; i++) s += load<f32>(at(g, i)) * load<f32>(at(g, i));
    store<f32>(at(out, c), s);
  }
}

/** out = a − b over [lo, hi) (Δ = θ_start − θ). */
export function subtract(out: usize, a: usize, b: usize, lo: i32, hi: i32): void {
  let i = lo;
  for (; i + 4 <= hi; i += 4) v128.store(at(out, i), f32x4.sub(v128.load(at(a, i)), v128.load(at(b, i))));
  for (; i < hi; i++) store<f32>(at(out, i), load<f32>(at(a, i)) - load<f32>(at(b, i)));
}
