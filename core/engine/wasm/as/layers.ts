// The encoder (token + position embeddings) and LayerNorm, forward and backward.
// Part of the Wasm SIMD kernels (kernels.ts, the entry `npm run build:wasm` compiles; its conventions hold).

import { at, splat, hsum } from './simd';

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
