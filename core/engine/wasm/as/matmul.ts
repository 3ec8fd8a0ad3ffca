// Matrix products: gemm (register-blocked f32x4) over B packed in panels, the packing, column sums.
// Part of the Wasm SIMD kernels (kernels.ts, the entry `npm run build:wasm` compiles; its conventions hold).

import { at, splat } from './simd';

// ---------------------------------------------------------------------------- matmul

// B is read from panels: stripe s (columns 8s..8s+7) is K rows of 8 floats, contiguous, so the GEMM's
// inner loop streams it from L1/L2 in order (a row-major B strides N floats per k). The last stripe is
// zero-padded to 8; its padded lanes are computed and never stored. Stripes: ceil(N/8), K·8 floats each.

/** Panels of B (K,N) row-major: stripes [s0, s1). */
export function packRows(out: usize, b: usize, K: i32, N: i32, s0: i32, s1: i32): void {
  for (let s = s0; s < s1; s++) {
    const n0 = s * 8,
      w = min(8, N - n0);
    const p = at(out, s * K * 8);
    for (let k = 0; k < K; k++) {
      const src = at(b, k * N + n0),
        dst = at(p, k * 8);
      if (w == 8) {
        v128.store(dst, v128.load(src));
        v128.store(dst, v128.load(src, 16), 16);
      } else {
        for (let j = 0; j < 8; j++) store<f32>(at(dst, j), j < w ? load<f32>(at(src, j)) : 0);
      }
    }
  }
}

/** Panels of B = Wᵀ for W (N,K) row-major (a weight (OC,C): B (C,OC)): stripes [s0, s1). */
export function packColumns(out: usize, w: usize, K: i32, N: i32, s0: i32, s1: i32): void {
  for (let s = s0; s < s1; s++) {
    const p = at(out, s * K * 8);
    for (let j = 0; j < 8; j++) {
      const n = s * 8 + j;
      if (n < N) {
        const row = at(w, n * K);
        for (let k = 0; k < K; k++) store<f32>(at(p, k * 8 + j), load<f32>(at(row, k)));
      } else {
        for (let k = 0; k < K; k++) store<f32>(at(p, k * 8 + j), 0);
      }
    }
  }
}

// out (M,N) = start + A(M,K)·B(K,N), rows [m0, m1). A's element (m,k) is at a[m·sam + k·sak] (a transposed A is
// strides (1, M)); B is in panels (above). start: out's own values when accumulate, else bias[n] (bias 0: zero).
// Register blocking 4 rows × 8 columns: 8 accumulators, 2 loads of B and 4 splats of A per k.

/** Start of 4 columns from n (w of them valid, 1..4): out's values, the bias, or zero; lanes past w are 0. */
@inline function startOf(out: usize, bias: usize, accumulate: i32, n: i32, w: i32): v128 {
  if (w >= 4) {
    if (accumulate) return v128.load(at(out, n));
    return bias ? v128.load(at(bias, n)) : splat(0);
  }
  let v = splat(0);
  if (w <= 0 || (!accumulate && !bias)) return v;
  const src = accumulate ? out : bias;
  v = f32x4.replace_lane(v, 0, load<f32>(at(src, n)));
  if (w > 1) v = f32x4.replace_lane(v, 1, load<f32>(at(src, n + 1)));
  if (w > 2) v = f32x4.replace_lane(v, 2, load<f32>(at(src, n + 2)));
  return v;
}

/** Stores the first w (≤ 4) lanes of v at out[n..]. */
@inline function storeOf(out: usize, n: i32, v: v128, w: i32): void {
  if (w >= 4) {
    v128.store(at(out, n), v);
    return;
  }
  if (w > 0) store<f32>(at(out, n), f32x4.extract_lane(v, 0));
  if (w > 1) store<f32>(at(out, n + 1), f32x4.extract_lane(v, 1));
  if (w > 2) store<f32>(at(out, n + 2), f32x4.extract_lane(v, 2));
}

export function gemm(
  out: usize,
  a: usize,
  sam: i32,
  sak: i32,
  bp: usize,
  bias: usize,
  accumulate: i32,
  K: i32,
  N: i32,
  m0: i32,
  m1: i32,
): void {
  const stripes = (N + 7) >> 3,
    sk = <usize>sak << 2;
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
    for (let s = 0; s < stripes; s++) {
      const n = s * 8,
        w0 = N - n,
        w1 = w0 - 4;
      let c00 = startOf(o0, bias, accumulate, n, w0),
        c01 = startOf(o0, bias, accumulate, n + 4, w1);
      let c10 = startOf(o1, bias, accumulate, n, w0),
        c11 = startOf(o1, bias, accumulate, n + 4, w1);
      let c20 = startOf(o2, bias, accumulate, n, w0),
        c21 = startOf(o2, bias, accumulate, n + 4, w1);
      let c30 = startOf(o3, bias, accumulate, n, w0),
        c31 = startOf(o3, bias, accumulate, n + 4, w1);
      let bk = at(bp, s * K * 8);
      // A's four rows by pointer: one add each per k (an index times a stride costs more)
      let p0 = at(a, r0),
        p1 = at(a, r1),
        p2 = at(a, r2),
        p3 = at(a, r3);
      for (let k = 0; k < K; k++) {
        const b0 = v128.load(bk),
          b1 = v128.load(bk, 16);
        bk += 32;
        const a0 = splat(load<f32>(p0)),
          a1 = splat(load<f32>(p1));
        const a2 = splat(load<f32>(p2)),
          a3 = splat(load<f32>(p3));
        p0 += sk;
        p1 += sk;
        p2 += sk;
        p3 += sk;
        c00 = f32x4.add(c00, f32x4.mul(a0, b0));
        c01 = f32x4.add(c01, f32x4.mul(a0, b1));
        c10 = f32x4.add(c10, f32x4.mul(a1, b0));
        c11 = f32x4.add(c11, f32x4.mul(a1, b1));
        c20 = f32x4.add(c20, f32x4.mul(a2, b0));
        c21 = f32x4.add(c21, f32x4.mul(a2, b1));
        c30 = f32x4.add(c30, f32x4.mul(a3, b0));
        c31 = f32x4.add(c31, f32x4.mul(a3, b1));
      }
      storeOf(o0, n, c00, w0);
      storeOf(o0, n + 4, c01, w1);
      storeOf(o1, n, c10, w0);
      storeOf(o1, n + 4, c11, w1);
      storeOf(o2, n, c20, w0);
      storeOf(o2, n + 4, c21, w1);
      storeOf(o3, n, c30, w0);
      storeOf(o3, n + 4, c31, w1);
    }
  }
  for (; m < m1; m++) gemmRow(out, a, sam, sak, bp, bias, accumulate, K, N, m);
}

/** One row of the matmul (the rows a 4-block leaves over), 8 columns at a time from the panels. */
function gemmRow(
  out: usize,
  a: usize,
  sam: i32,
  sak: i32,
  bp: usize,
  bias: usize,
  accumulate: i32,
  K: i32,
  N: i32,
  m: i32,
): void {
  const o = at(out, m * N),
    r = m * sam,
    stripes = (N + 7) >> 3;
  for (let s = 0; s < stripes; s++) {
    const n = s * 8,
      w0 = N - n,
      w1 = w0 - 4;
    let c0 = startOf(o, bias, accumulate, n, w0),
      c1 = startOf(o, bias, accumulate, n + 4, w1);
    let bk = at(bp, s * K * 8);
    for (let k = 0; k < K; k++) {
      const x = splat(load<f32>(at(a, r + k * sak)));
      c0 = f32x4.add(c0, f32x4.mul(x, v128.load(bk)));
      c1 = f32x4.add(c1, f32x4.mul(x, v128.load(bk, 16)));
      bk += 32;
    }
    storeOf(o, n, c0, w0);
    storeOf(o, n + 4, c1, w1);
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
