// The training step's kernels in AssemblyScript on 128-bit SIMD (f32x4): the Wasm twins of
// core/model/ops.ts. `npm run build:wasm` compiles this file (not TypeScript for tsc: v128, load<T>).
//
// Conventions: every tensor argument is a byte address in the module's one memory; every kernel
// takes a half-open range [lo, hi) of its partition dimension last, so a thread pool splits the work
// by rows (or columns, or heads) with no two threads writing the same element. Each output element
// is computed by the same sequence of f32 operations whatever the range, so results are the same
// bits for any thread count. Plain SIMD only: mul then add (no relaxed FMA), no reassociation
// that depends on the split.

// ---------------------------------------------------------------------------- helpers

@inline function at(base: usize, index: i32): usize {
  return base + (<usize>index << 2);
}

@inline function splat(x: f32): v128 {
  return f32x4.splat(x);
}

@inline function hsum(v: v128): f32 {
  return (
    f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3))
  );
}

/** exp on four lanes (Cephes expf: 2^n · p(r), |r| ≤ ln2/2); inputs clamped to f32's normal range. */
@inline function exp4(x0: v128): v128 {
  const x = f32x4.max(f32x4.min(x0, splat(88.37626)), splat(-87.33654));
  const n = f32x4.nearest(f32x4.mul(x, splat(1.44269504088896341)));
  let r = f32x4.sub(x, f32x4.mul(n, splat(0.693359375)));
  r = f32x4.sub(r, f32x4.mul(n, splat(-2.12194440e-4)));
  let p = splat(1.9875691500e-4);
  p = f32x4.add(f32x4.mul(p, r), splat(1.3981999507e-3));
  p = f32x4.add(f32x4.mul(p, r), splat(8.3334519073e-3));
  p = f32x4.add(f32x4.mul(p, r), splat(4.1665795894e-2));
  p = f32x4.add(f32x4.mul(p, r), splat(1.6666665459e-1));
  p = f32x4.add(f32x4.mul(p, r), splat(5.0000001201e-1));
  const y = f32x4.add(f32x4.add(f32x4.mul(f32x4.mul(p, r), r), r), splat(1));
  const pow2n = i32x4.shl(i32x4.add(i32x4.trunc_sat_f32x4_s(n), i32x4.splat(127)), 23);
  return f32x4.mul(y, pow2n);
}

@inline function exp1(x: f32): f32 {
  return f32x4.extract_lane(exp4(splat(x)), 0);
}

/** tanh on four lanes: a 13/6 rational approximation on [−7.9, 7.9] (Eigen's float tanh). */
@inline function tanh4(x0: v128): v128 {
  const x = f32x4.max(f32x4.min(x0, splat(7.90531110763549805)), splat(-7.90531110763549805));
  const x2 = f32x4.mul(x, x);
  let p = f32x4.add(f32x4.mul(x2, splat(-2.76076847742355e-16)), splat(2.00018790482477e-13));
  p = f32x4.add(f32x4.mul(x2, p), splat(-8.60467152213735e-11));
  p = f32x4.add(f32x4.mul(x2, p), splat(5.12229709037114e-8));
  p = f32x4.add(f32x4.mul(x2, p), splat(1.48572235717979e-5));
  p = f32x4.add(f32x4.mul(x2, p), splat(6.37261928875436e-4));
  p = f32x4.add(f32x4.mul(x2, p), splat(4.89352455891786e-3));
  p = f32x4.mul(x, p);
  let q = f32x4.add(f32x4.mul(x2, splat(1.19825839466702e-6)), splat(1.18534705686654e-4));
  q = f32x4.add(f32x4.mul(x2, q), splat(2.26843463243900e-3));
  q = f32x4.add(f32x4.mul(x2, q), splat(4.89352518554385e-3));
  const tiny = f32x4.lt(f32x4.abs(x0), splat(0.0004));
  return v128.bitselect(x0, f32x4.div(p, q), tiny);
}

/** Σ a[i]·b[i] over n floats, four lanes then a horizontal sum. */
@inline function dot(a: usize, b: usize, n: i32): f32 {
  let acc = splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) acc = f32x4.add(acc, f32x4.mul(v128.load(at(a, i)), v128.load(at(b, i))));
  let s = hsum(acc);
  for (; i < n; i++) s += load<f32>(at(a, i)) * load<f32>(at(b, i));
  return s;
}

/** y[i] += s·x[i] over n floats. */
@inline function axpy(y: usize, s: f32, x: usize, n: i32): void {
  const sv = splat(s);
  let i = 0;
  for (; i + 4 <= n; i += 4) v128.store(at(y, i), f32x4.add(v128.load(at(y, i)), f32x4.mul(sv, v128.load(at(x, i)))));
  for (; i < n; i++) store<f32>(at(y, i), load<f32>(at(y, i)) + s * load<f32>(at(x, i)));
}

export function heapBase(): usize {
  return __heap_base;
}

// ---------------------------------------------------------------------------- matmul

// out (M,N) = start + A(M,K)·B(K,N), rows [m0, m1). A's element (m,k) is at a[m·sam + k·sak] (a transposed A is
// strides (1, M)); B is row-major. start: out's own values when accumulate, else bias[n] (bias 0: zero).
// Register blocking 4 rows × 8 columns: 8 accumulators, 2 loads of B and 4 splats of A per k.

@inline function startOf(out: usize, bias: usize, accumulate: i32, n: i32): v128 {
  if (accumulate) return v128.load(at(out, n));
  return bias ? v128.load(at(bias, n)) : splat(0);
}

@inline function start1(out: usize, bias: usize, accumulate: i32, n: i32): f32 {
  if (accumulate) return load<f32>(at(out, n));
  return bias ? load<f32>(at(bias, n)) : 0;
}

export function gemm(
  out: usize,
  a: usize,
  sam: i32,
  sak: i32,
  b: usize,
  bias: usize,
  accumulate: i32,
  K: i32,
  N: i32,
  m0: i32,
  m1: i32,
): void {
  let m = m0;
  for (; m + 4 <= m1; m += 4) {
    const o0 = at(out, m * N),
      o1 = at(out, (m + 1) * N),
      o2 = at(out, (m + 2) * N),
      o3 = at(out, (m + 3) * N);
    const r0 = m * sam,
      r1 = r0 + sam,
      r2 = r1 + sam,
      r3 = r2 + sam;
    let n = 0;
    for (; n + 8 <= N; n += 8) {
      let c00 = startOf(o0, bias, accumulate, n),
        c01 = startOf(o0, bias, accumulate, n + 4);
      let c10 = startOf(o1, bias, accumulate, n),
        c11 = startOf(o1, bias, accumulate, n + 4);
      let c20 = startOf(o2, bias, accumulate, n),
        c21 = startOf(o2, bias, accumulate, n + 4);
      let c30 = startOf(o3, bias, accumulate, n),
        c31 = startOf(o3, bias, accumulate, n + 4);
      for (let k = 0; k < K; k++) {
        const bk = at(b, k * N + n);
        const b0 = v128.load(bk),
          b1 = v128.load(bk, 16);
        const kk = k * sak;
        const a0 = splat(load<f32>(at(a, r0 + kk))),
          a1 = splat(load<f32>(at(a, r1 + kk)));
        const a2 = splat(load<f32>(at(a, r2 + kk))),
          a3 = splat(load<f32>(at(a, r3 + kk)));
        c00 = f32x4.add(c00, f32x4.mul(a0, b0));
        c01 = f32x4.add(c01, f32x4.mul(a0, b1));
        c10 = f32x4.add(c10, f32x4.mul(a1, b0));
        c11 = f32x4.add(c11, f32x4.mul(a1, b1));
        c20 = f32x4.add(c20, f32x4.mul(a2, b0));
        c21 = f32x4.add(c21, f32x4.mul(a2, b1));
        c30 = f32x4.add(c30, f32x4.mul(a3, b0));
        c31 = f32x4.add(c31, f32x4.mul(a3, b1));
      }
      v128.store(at(o0, n), c00);
      v128.store(at(o0, n + 4), c01);
      v128.store(at(o1, n), c10);
      v128.store(at(o1, n + 4), c11);
      v128.store(at(o2, n), c20);
      v128.store(at(o2, n + 4), c21);
      v128.store(at(o3, n), c30);
      v128.store(at(o3, n + 4), c31);
    }
    for (; n + 4 <= N; n += 4) {
      let c0 = startOf(o0, bias, accumulate, n),
        c1 = startOf(o1, bias, accumulate, n);
      let c2 = startOf(o2, bias, accumulate, n),
        c3 = startOf(o3, bias, accumulate, n);
      for (let k = 0; k < K; k++) {
        const b0 = v128.load(at(b, k * N + n));
        const kk = k * sak;
        c0 = f32x4.add(c0, f32x4.mul(splat(load<f32>(at(a, r0 + kk))), b0));
        c1 = f32x4.add(c1, f32x4.mul(splat(load<f32>(at(a, r1 + kk))), b0));
        c2 = f32x4.add(c2, f32x4.mul(splat(load<f32>(at(a, r2 + kk))), b0));
        c3 = f32x4.add(c3, f32x4.mul(splat(load<f32>(at(a, r3 + kk))), b0));
      }
      v128.store(at(o0, n), c0);
      v128.store(at(o1, n), c1);
      v128.store(at(o2, n), c2);
      v128.store(at(o3, n), c3);
    }
    for (; n < N; n++) gemmColumn(out, a, sam, sak, b, bias, accumulate, K, N, m, m + 4, n);
  }
  for (; m < m1; m++) gemmRow(out, a, sam, sak, b, bias, accumulate, K, N, m);
}

/** One row of the matmul (the rows a 4-block leaves over): 4 columns at a time, then one. */
function gemmRow(
  out: usize,
  a: usize,
  sam: i32,
  sak: i32,
  b: usize,
  bias: usize,
  accumulate: i32,
  K: i32,
  N: i32,
  m: i32,
): void {
  const o = at(out, m * N),
    r = m * sam;
  let n = 0;
  for (; n + 4 <= N; n += 4) {
    let c = startOf(o, bias, accumulate, n);
    for (let k = 0; k < K; k++)
      c = f32x4.add(c, f32x4.mul(splat(load<f32>(at(a, r + k * sak))), v128.load(at(b, k * N + n))));
    v128.store(at(o, n), c);
  }
  for (; n < N; n++) gemmColumn(out, a, sam, sak, b, bias, accumulate, K, N, m, m + 1, n);
}

/** Column n of rows [m0, m1): one scalar sum each, in the same order as a SIMD lane. */
function gemmColumn(
  out: usize,
  a: usize,
  sam: i32,
  sak: i32,
  b: usize,
  bias: usize,
  accumulate: i32,
  K: i32,
  N: i32,
  m0: i32,
  m1: i32,
  n: i32,
): void {
  for (let m = m0; m < m1; m++) {
    const o = at(out, m * N);
    let c = start1(o, bias, accumulate, n);
    for (let k = 0; k < K; k++) c += load<f32>(at(a, m * sam + k * sak)) * load<f32>(at(b, k * N + n));
    store<f32>(at(o, n), c);
  }
}

/** out (C,R) = inp (R,C)ᵀ, rows [r0, r1) of inp. */
export function transpose(out: usize, inp: usize, R: i32, C: i32, r0: i32, r1: i32): void {
  for (let r = r0; r < r1; r++) {
    for (let c = 0; c < C; c++) store<f32>(at(out, c * R + r), load<f32>(at(inp, r * C + c)));
  }
}

/** out[n] += Σ_m a[m·N + n] for columns [n0, n1) (a matmul's bias gradient). */
export function columnSum(out: usize, a: usize, M: i32, N: i32, n0: i32, n1: i32): void {
  let n = n0;
  for (; n + 4 <= n1; n += 4) {
    let c = v128.load(at(out, n));
    for (let m = 0; m < M; m++) c = f32x4.add(c, v128.load(at(a, m * N + n)));
    v128.store(at(out, n), c);
  }
  for (; n < n1; n++) {
    let c = load<f32>(at(out, n));
    for (let m = 0; m < M; m++) c += load<f32>(at(a, m * N + n));
    store<f32>(at(out, n), c);
  }
}

// ---------------------------------------------------------------------------- encoder

/** out (B,T,C) = wte[tok] + wpe[t], rows [r0, r1) of B·T; tokens are i32. */
export function encoderForward(
  out: usize, tokens: usize, wte: usize, wpe: usize, T: i32, C: i32, r0: i32, r1: i32,
): void {
  for (let r = r0; r < r1; r++) {
    const o = at(out, r * C),
      w = at(wte, load<i32>(at(tokens, r)) * C),
      p = at(wpe, (r % T) * C);
    let i = 0;
    for (; i + 4 <= C; i += 4) v128.store(at(o, i), f32x4.add(v128.load(at(w, i)), v128.load(at(p, i))));
    for (; i < C; i++) store<f32>(at(o, i), load<f32>(at(w, i)) + load<f32>(at(p, i)));
  }
}

/** dwte[tok] += dout, dwpe[t] += dout for channels [c0, c1): a channel split never races on a token. */
export function encoderBackward(
  dwte: usize,
  dwpe: usize,
  dout: usize,
  tokens: usize,
  BT: i32,
  T: i32,
  C: i32,
  c0: i32,
  c1: i32,
): void {
  for (let r = 0; r < BT; r++) {
    const d = at(dout, r * C),
      w = at(dwte, load<i32>(at(tokens, r)) * C),
      p = at(dwpe, (r % T) * C);
    let c = c0;
    for (; c + 4 <= c1; c += 4) {
      const g = v128.load(at(d, c));
      v128.store(at(w, c), f32x4.add(v128.load(at(w, c)), g));
      v128.store(at(p, c), f32x4.add(v128.load(at(p, c)), g));
    }
    for (; c < c1; c++) {
      const g = load<f32>(at(d, c));
      store<f32>(at(w, c), load<f32>(at(w, c)) + g);
      store<f32>(at(p, c), load<f32>(at(p, c)) + g);
    }
  }
}

// ---------------------------------------------------------------------------- layernorm

/** out = (x − mean)·rstd·w + b per row of C; mean, rstd cached; rows [r0, r1). */
export function layernormForward(
  out: usize,
  mean: usize,
  rstd: usize,
  inp: usize,
  w: usize,
  b: usize,
  C: i32,
  r0: i32,
  r1: i32,
): void {
  const invC: f32 = 1 / <f32>C;
  for (let r = r0; r < r1; r++) {
    const x = at(inp, r * C),
      o = at(out, r * C);
    let acc = splat(0);
    let i = 0;
    for (; i + 4 <= C; i += 4) acc = f32x4.add(acc, v128.load(at(x, i)));
    let s = hsum(acc);
    for (; i < C; i++) s += load<f32>(at(x, i));
    const m = s * invC;
    const mv = splat(m);
    acc = splat(0);
    for (i = 0; i + 4 <= C; i += 4) {
      const d = f32x4.sub(v128.load(at(x, i)), mv);
      acc = f32x4.add(acc, f32x4.mul(d, d));
    }
    let v = hsum(acc);
    for (; i < C; i++) {
      const d = load<f32>(at(x, i)) - m;
      v += d * d;
    }
    const sd: f32 = 1 / Mathf.sqrt(v * invC + 1e-5);
    const sv = splat(sd);
    for (i = 0; i + 4 <= C; i += 4) {
      const n = f32x4.mul(f32x4.sub(v128.load(at(x, i)), mv), sv);
      v128.store(at(o, i), f32x4.add(f32x4.mul(n, v128.load(at(w, i))), v128.load(at(b, i))));
    }
    for (; i < C; i++) store<f32>(at(o, i), (load<f32>(at(x, i)) - m) * sd * load<f32>(at(w, i)) + load<f32>(at(b, i)));
    store<f32>(at(mean, r), m);
    store<f32>(at(rstd, r), sd);
  }
}

/** dinp += (dnorm − mean(dnorm) − norm·mean(dnorm·norm))·rstd, dnorm = w·dout; rows [r0, r1). */
export function layernormBackwardInput(
  dinp: usize,
  dout: usize,
  inp: usize,
  w: usize,
  mean: usize,
  rstd: usize,
  C: i32,
  r0: i32,
  r1: i32,
): void {
  const invC: f32 = 1 / <f32>C;
  for (let r = r0; r < r1; r++) {
    const x = at(inp, r * C),
      d = at(dout, r * C),
      di = at(dinp, r * C);
    const m = load<f32>(at(mean, r)),
      s = load<f32>(at(rstd, r));
    const mv = splat(m),
      sv = splat(s);
    let a1 = splat(0),
      a2 = splat(0);
    let i = 0;
    for (; i + 4 <= C; i += 4) {
      const norm = f32x4.mul(f32x4.sub(v128.load(at(x, i)), mv), sv);
      const dnorm = f32x4.mul(v128.load(at(w, i)), v128.load(at(d, i)));
      a1 = f32x4.add(a1, dnorm);
      a2 = f32x4.add(a2, f32x4.mul(dnorm, norm));
    }
    let dm = hsum(a1),
      dnm = hsum(a2);
    for (let j = i; j < C; j++) {
      const norm = (load<f32>(at(x, j)) - m) * s;
      const dnorm = load<f32>(at(w, j)) * load<f32>(at(d, j));
      dm += dnorm;
      dnm += dnorm * norm;
    }
    dm *= invC;
    dnm *= invC;
    const dmv = splat(dm),
      dnmv = splat(dnm);
    for (i = 0; i + 4 <= C; i += 4) {
      const norm = f32x4.mul(f32x4.sub(v128.load(at(x, i)), mv), sv);
      const dnorm = f32x4.mul(v128.load(at(w, i)), v128.load(at(d, i)));
      const g = f32x4.mul(f32x4.sub(f32x4.sub(dnorm, dmv), f32x4.mul(norm, dnmv)), sv);
      v128.store(at(di, i), f32x4.add(v128.load(at(di, i)), g));
    }
    for (; i < C; i++) {
      const norm = (load<f32>(at(x, i)) - m) * s;
      const dnorm = load<f32>(at(w, i)) * load<f32>(at(d, i));
      store<f32>(at(di, i), load<f32>(at(di, i)) + (dnorm - dm - norm * dnm) * s);
    }
  }
}

/** dw += Σ_rows norm·dout, db += Σ_rows dout for channels [c0, c1) over R rows. */
export function layernormBackwardParams(
  dw: usize,
  db: usize,
  dout: usize,
  inp: usize,
  mean: usize,
  rstd: usize,
  R: i32,
  C: i32,
  c0: i32,
  c1: i32,
): void {
  let c = c0;
  for (; c + 4 <= c1; c += 4) {
    let aw = v128.load(at(dw, c)),
      ab = v128.load(at(db, c));
    for (let r = 0; r < R; r++) {
      const g = v128.load(at(dout, r * C + c));
      const norm = f32x4.mul(
        f32x4.sub(v128.load(at(inp, r * C + c)), splat(load<f32>(at(mean, r)))),
        splat(load<f32>(at(rstd, r))),
      );
      aw = f32x4.add(aw, f32x4.mul(norm, g));
      ab = f32x4.add(ab, g);
    }
    v128.store(at(dw, c), aw);
    v128.store(at(db, c), ab);
  }
  for (; c < c1; c++) {
    let aw = load<f32>(at(dw, c)),
      ab = load<f32>(at(db, c));
    for (let r = 0; r < R; r++) {
      const g = load<f32>(at(dout, r * C + c));
      aw += (load<f32>(at(inp, r * C + c)) - load<f32>(at(mean, r))) * load<f32>(at(rstd, r)) * g;
      ab += g;
    }
    store<f32>(at(dw, c), aw);
    store<f32>(at(db, c), ab);
  }
}

// ---------------------------------------------------------------------------- attention

// qkv (B,T,3C) holds q, k, v; att (B,NH,T,T) the softmax rows (t2 ≤ t); out (B,T,C).
// Split by (b, h) pairs [p0, p1): a pair's rows write only its own head's slices.

export function attentionForward(out: usize, att: usize, qkv: usize, T: i32, C: i32, NH: i32, p0: i32, p1: i32): void {
  const hs = C / NH,
    C3 = 3 * C;
  const scale: f32 = 1 / Mathf.sqrt(<f32>hs);
  for (let p = p0; p < p1; p++) {
    const b = p / NH,
      h = p % NH;
    for (let t = 0; t < T; t++) {
      const q = at(qkv, (b * T + t) * C3 + h * hs);
      const row = at(att, (p * T + t) * T);
      let maxv: f32 = -Infinity;
      for (let t2 = 0; t2 <= t; t2++) {
        const s = dot(q, at(qkv, (b * T + t2) * C3 + C + h * hs), hs) * scale;
        store<f32>(at(row, t2), s);
        if (s > maxv) maxv = s;
      }
      const sum = expRow(row, t + 1, maxv);
      const inv: f32 = 1 / sum;
      scaleRow(row, t + 1, inv);
      const o = at(out, (b * T + t) * C + h * hs);
      memory.fill(o, 0, <usize>hs << 2);
      for (let t2 = 0; t2 <= t; t2++) axpy(o, load<f32>(at(row, t2)), at(qkv, (b * T + t2) * C3 + 2 * C + h * hs), hs);
    }
  }
}

/** row[i] = exp(row[i] − maxv) over n; returns Σ (lanes, then the tail). */
@inline function expRow(row: usize, n: i32, maxv: f32): f32 {
  const mv = splat(maxv);
  let acc = splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const e = exp4(f32x4.sub(v128.load(at(row, i)), mv));
    v128.store(at(row, i), e);
    acc = f32x4.add(acc, e);
  }
  let s = hsum(acc);
  for (; i < n; i++) {
    const e = exp1(load<f32>(at(row, i)) - maxv);
    store<f32>(at(row, i), e);
    s += e;
  }
  return s;
}

@inline function scaleRow(row: usize, n: i32, k: f32): void {
  const kv = splat(k);
  let i = 0;
  for (; i + 4 <= n; i += 4) v128.store(at(row, i), f32x4.mul(v128.load(at(row, i)), kv));
  for (; i < n; i++) store<f32>(at(row, i), load<f32>(at(row, i)) * k);
}

/** dqkv (this pair's slices overwritten), datt (B,NH,T,T) scratch; pairs [p0, p1). */
export function attentionBackward(
  dqkv: usize,
  datt: usize,
  dout: usize,
  qkv: usize,
  att: usize,
  T: i32,
  C: i32,
  NH: i32,
  p0: i32,
  p1: i32,
): void {
  const hs = C / NH,
    C3 = 3 * C;
  const scale: f32 = 1 / Mathf.sqrt(<f32>hs);
  for (let p = p0; p < p1; p++) {
    const b = p / NH,
      h = p % NH;
    for (let t = 0; t < T; t++) {
      const base = (b * T + t) * C3 + h * hs;
      memory.fill(at(dqkv, base), 0, <usize>hs << 2);
      memory.fill(at(dqkv, base + C), 0, <usize>hs << 2);
      memory.fill(at(dqkv, base + 2 * C), 0, <usize>hs << 2);
    }
    for (let t = 0; t < T; t++) {
      const row = at(att, (p * T + t) * T),
        drow = at(datt, (p * T + t) * T);
      const d = at(dout, (b * T + t) * C + h * hs);
      const q = (b * T + t) * C3 + h * hs;
      // out = att · v
      for (let t2 = 0; t2 <= t; t2++) {
        const v = (b * T + t2) * C3 + 2 * C + h * hs;
        store<f32>(at(drow, t2), dot(at(qkv, v), d, hs));
        axpy(at(dqkv, v), load<f32>(at(row, t2)), d, hs);
      }
      // softmax: dpre = att ⊙ (datt − Σ att·datt), then preatt = scale · q·k
      const s = dot(row, drow, t + 1);
      for (let t2 = 0; t2 <= t; t2++) {
        const k = (b * T + t2) * C3 + C + h * hs;
        const g = load<f32>(at(row, t2)) * (load<f32>(at(drow, t2)) - s) * scale;
        axpy(at(dqkv, q), g, at(qkv, k), hs);
        axpy(at(dqkv, k), g, at(qkv, q), hs);
      }
    }
  }
}

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

@inline function geluGrad4(x: v128): v128 {
  const x2 = f32x4.mul(x, x);
  const th = tanh4(f32x4.mul(splat(GELU_S), f32x4.add(x, f32x4.mul(splat(0.044715), f32x4.mul(x, x2)))));
  const sech2 = f32x4.sub(splat(1), f32x4.mul(th, th));
  const left = f32x4.mul(splat(0.5), f32x4.add(splat(1), th));
  const right = f32x4.mul(
    f32x4.mul(f32x4.mul(splat(0.5), x), sech2),
    f32x4.mul(splat(GELU_S), f32x4.add(splat(1), f32x4.mul(splat(3 * 0.044715), x2))),
  );
  return f32x4.add(left, right);
}

/** dinp = gelu'(x)·dout over [lo, hi) (overwrites: dinp has no other contributor). */
export function geluBackward(dinp: usize, inp: usize, dout: usize, lo: i32, hi: i32): void {
  let i = lo;
  for (; i + 4 <= hi; i += 4)
    v128.store(at(dinp, i), f32x4.mul(geluGrad4(v128.load(at(inp, i))), v128.load(at(dout, i))));
  for (; i < hi; i++)
    store<f32>(at(dinp, i), f32x4.extract_lane(geluGrad4(splat(load<f32>(at(inp, i)))), 0) * load<f32>(at(dout, i)));
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
