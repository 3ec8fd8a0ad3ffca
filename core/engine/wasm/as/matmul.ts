// Matrix products: gemm (register-blocked f32x4), transpose, column sums.
// Part of the Wasm SIMD kernels (kernels.ts, the entry `npm run build:wasm` compiles; its conventions hold).

import { at, splat } from './simd';

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
