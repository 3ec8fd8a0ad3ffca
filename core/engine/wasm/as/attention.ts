// Causal self-attention, forward and backward, split by (batch, head) pairs.
// Part of the Wasm SIMD kernels (kernels.ts, the entry `npm run build:wasm` compiles; its conventions hold).

import { at, splat, hsum, exp4, exp1, dot, axpy, expRow, scaleRow } from './simd';

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
