// Causal self-attention, forward and backward, split by (batch, head) pairs.
// Part of the Wasm SIMD kernels (kernels.ts, the entry `npm run build:wasm` compiles; its conventions hold).

import { at, splat, dot, dot4, expRow, scaleRow } from './simd';

// ---------------------------------------------------------------------------- attention

// qkv (B,T,3C) holds q, k, v; att (B,NH,T,T) the softmax rows (t2 ≤ t); out (B,T,C).
// Split by (b, h) pairs [p0, p1): a pair's rows write only its own head's slices.

/**
 * y (n floats) = Σ_j w[j·ws]·x_j over j < count, x_j at x + j·xs floats: 16 (then 4) lanes of y at a time in
 * registers, each summed in j order.
 */
@inline function weightedSum(y: usize, w: usize, ws: i32, x: usize, xs: i32, count: i32, n: i32): void {
  let i = 0;
  for (; i + 16 <= n; i += 16) {
    let a0 = splat(0),
      a1 = splat(0),
      a2 = splat(0),
      a3 = splat(0);
    for (let j = 0; j < count; j++) {
      const wj = splat(load<f32>(at(w, j * ws)));
      const xj = at(x, j * xs + i);
      a0 = f32x4.add(a0, f32x4.mul(wj, v128.load(xj)));
      a1 = f32x4.add(a1, f32x4.mul(wj, v128.load(xj, 16)));
      a2 = f32x4.add(a2, f32x4.mul(wj, v128.load(xj, 32)));
      a3 = f32x4.add(a3, f32x4.mul(wj, v128.load(xj, 48)));
    }
    const yi = at(y, i);
    v128.store(yi, a0);
    v128.store(yi, a1, 16);
    v128.store(yi, a2, 32);
    v128.store(yi, a3, 48);
  }
  for (; i + 4 <= n; i += 4) {
    let acc = splat(0);
    for (let j = 0; j < count; j++)
      acc = f32x4.add(acc, f32x4.mul(splat(load<f32>(at(w, j * ws))), v128.load(at(x, j * xs + i))));
    v128.store(at(y, i), acc);
  }
  for (; i < n; i++) {
    let acc: f32 = 0;
    for (let j = 0; j < count; j++) acc += load<f32>(at(w, j * ws)) * load<f32>(at(x, j * xs + i));
    store<f32>(at(y, i), acc);
  }
}

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
      // scores four keys at a time (one transpose-sum per four), then the last t + 1 mod 4 one by one
      const k = at(qkv, b * T * C3 + C + h * hs);
      let mv = splat(-Infinity);
      let t2 = 0;
      for (; t2 + 4 <= t + 1; t2 += 4) {
        const s4 = f32x4.mul(dot4(q, at(k, t2 * C3), C3, hs), splat(scale));
        v128.store(at(row, t2), s4);
        mv = f32x4.max(mv, s4);
      }
      let maxv = Mathf.max(
        Mathf.max(f32x4.extract_lane(mv, 0), f32x4.extract_lane(mv, 1)),
        Mathf.max(f32x4.extract_lane(mv, 2), f32x4.extract_lane(mv, 3)),
      );
      for (; t2 <= t; t2++) {
        const s = dot(q, at(k, t2 * C3), hs) * scale;
        store<f32>(at(row, t2), s);
        maxv = Mathf.max(maxv, s);
      }
      const sum = expRow(row, t + 1, maxv);
      const inv: f32 = 1 / sum;
      scaleRow(row, t + 1, inv);
      // out_t = Σ_t2 att[t2]·v_t2
      weightedSum(at(out, (b * T + t) * C + h * hs), row, 1, at(qkv, b * T * C3 + 2 * C + h * hs), C3, t + 1, hs);
    }
  }
}

/**
 * dqkv (this pair's slices overwritten), datt (B,NH,T,T) scratch; pairs [p0, p1). Row by row, datt's row t
 * becomes the softmax backward's g[t][t2] and dq_t = Σ_t2 g·k; then column by column dv_t2 = Σ_t att·dout_t and
 * dk_t2 = Σ_t g·q_t, each sum in t order in a register (the order of adding row by row, so the same bits).
 */
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
    const q0 = b * T * C3 + h * hs,
      k0 = q0 + C,
      v0 = q0 + 2 * C,
      d0 = at(dout, b * T * C + h * hs);
    for (let t = 0; t < T; t++) {
      const row = at(att, (p * T + t) * T),
        drow = at(datt, (p * T + t) * T);
      const d = at(d0, t * C);
      // out = att · v: datt[t2] = v_t2 · dout_t
      let t2 = 0;
      for (; t2 + 4 <= t + 1; t2 += 4) v128.store(at(drow, t2), dot4(d, at(qkv, v0 + t2 * C3), C3, hs));
      for (; t2 <= t; t2++) store<f32>(at(drow, t2), dot(at(qkv, v0 + t2 * C3), d, hs));
      // softmax: g = att ⊙ (datt − Σ att·datt) · scale (preatt = scale · q·k), in place of datt
      const s = dot(row, drow, t + 1);
      const sv = splat(s);
      for (t2 = 0; t2 + 4 <= t + 1; t2 += 4) {
        const g = f32x4.mul(v128.load(at(row, t2)), f32x4.sub(v128.load(at(drow, t2)), sv));
        v128.store(at(drow, t2), f32x4.mul(g, splat(scale)));
      }
      for (; t2 <= t; t2++)
        store<f32>(at(drow, t2), load<f32>(at(row, t2)) * (load<f32>(at(drow, t2)) - s) * scale);
      weightedSum(at(dqkv, q0 + t * C3), drow, 1, at(qkv, k0), C3, t + 1, hs);
    }
    for (let t2 = 0; t2 < T; t2++) {
      const col = (p * T + t2) * T + t2; // element (t2, t2); row t adds T
      weightedSum(at(dqkv, v0 + t2 * C3), at(att, col), T, at(d0, t2 * C), C, T - t2, hs);
      weightedSum(at(dqkv, k0 + t2 * C3), at(datt, col), T, at(qkv, q0 + t2 * C3), C3, T - t2, hs);
    }
  }
}
