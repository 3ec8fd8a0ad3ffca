// CPU reference ops: the spec every WGSL kernel in shaders/ is tested against.
//
// llm.c conventions: outputs first, then inputs, then dims. Each `_backward`
// ACCUMULATES (+=) into its gradient outputs, so callers zero them once per step.
// Works on Float32Array (production) and Float64Array (gradient checks).

export type Arr = Float32Array | Float64Array;
export type Tokens = Uint8Array | Uint16Array | Int32Array | Uint32Array;

// ---------------------------------------------------------------------------- encoder

/** out (B,T,C) = wte[inp] + wpe[t]; inp (B,T) token ids; wte (V,C); wpe (maxT,C). */
export function encoderForward(out: Arr, inp: Tokens, wte: Arr, wpe: Arr, B: number, T: number, C: number): void {
  for (let bt = 0; bt < B * T; bt++) {
    const t = bt % T;
    const o = bt * C,
      w = inp[bt] * C,
      p = t * C;
    for (let i = 0; i < C; i++) out[o + i] = wte[w + i] + wpe[p + i];
  }
}

export function encoderBackward(dwte: Arr, dwpe: Arr, dout: Arr, inp: Tokens, B: number, T: number, C: number): void {
  for (let bt = 0; bt < B * T; bt++) {
    const t = bt % T;
    const o = bt * C,
      w = inp[bt] * C,
      p = t * C;
    for (let i = 0; i < C; i++) {
      const d = dout[o + i];
      dwte[w + i] += d;
      dwpe[p + i] += d;
    }
  }
}

// ---------------------------------------------------------------------------- layernorm

export const LN_EPS = 1e-5;

/** out (B,T,C); mean, rstd (B,T) cached for the backward; inp (B,T,C); weight, bias (C). */
export function layernormForward(
  out: Arr,
  mean: Arr,
  rstd: Arr,
  inp: Arr,
  weight: Arr,
  bias: Arr,
  B: number,
  T: number,
  C: number,
): void {
  for (let bt = 0; bt < B * T; bt++) {
    const x = bt * C;
    let m = 0;
    for (let i = 0; i < C; i++) m += inp[x + i];
    m /= C;
    let v = 0;
    for (let i = 0; i < C; i++) {
      const d = inp[x + i] - m;
      v += d * d;
    }
    v /= C;
    const s = 1 / Math.sqrt(v + LN_EPS);
    for (let i = 0; i < C; i++) out[x + i] = (inp[x + i] - m) * s * weight[i] + bias[i];
    mean[bt] = m;
    rstd[bt] = s;
  }
}

export function layernormBackward(
  dinp: Arr,
  dweight: Arr,
  dbias: Arr,
  dout: Arr,
  inp: Arr,
  weight: Arr,
  mean: Arr,
  rstd: Arr,
  B: number,
  T: number,
  C: number,
): void {
  for (let bt = 0; bt < B * T; bt++) {
    const x = bt * C,
      m = mean[bt],
      s = rstd[bt];
    // two reductions: mean(dnorm) and mean(dnorm * norm)
    let dnormMean = 0,
      dnormNormMean = 0;
    for (let i = 0; i < C; i++) {
      const norm = (inp[x + i] - m) * s;
      const dnorm = weight[i] * dout[x + i];
      dnormMean += dnorm;
      dnormNormMean += dnorm * norm;
    }
    dnormMean /= C;
    dnormNormMean /= C;
    for (let i = 0; i < C; i++) {
      const norm = (inp[x + i] - m) * s;
      const dnorm = weight[i] * dout[x + i];
      dbias[i] += dout[x + i];
      dweight[i] += norm * dout[x + i];
      dinp[x + i] += (dnorm - dnormMean - norm * dnormNormMean) * s;
    }
  }
}

// ---------------------------------------------------------------------------- matmul

/** out (B,T,OC) = inp (B,T,C) · weight(OC,C)ᵀ + bias (OC); bias may be null. */
export function matmulForward(
  out: Arr,
  inp: Arr,
  weight: Arr,
  bias: Arr | null,
  B: number,
  T: number,
  C: number,
  OC: number,
): void {
  const BT = B * T;
  let bt = 0;
  // four rows at a time: each weight row is read once per four outputs
  for (; bt + 4 <= BT; bt += 4) {
    const x0 = bt * C,
      x1 = x0 + C,
      x2 = x1 + C,
      x3 = x2 + C;
    for (let o = 0; o < OC; o++) {
      const w = o * C;
      const b = bias ? bias[o] : 0;
      let a0 = b,
        a1 = b,
        a2 = b,
        a3 = b;
      for (let i = 0; i < C; i++) {
        const wi = weight[w + i];
        a0 += inp[x0 + i] * wi;
        a1 += inp[x1 + i] * wi;
        a2 += inp[x2 + i] * wi;
        a3 += inp[x3 + i] * wi;
      }
      out[bt * OC + o] = a0;
      out[(bt + 1) * OC + o] = a1;
      out[(bt + 2) * OC + o] = a2;
      out[(bt + 3) * OC + o] = a3;
    }
  }
  for (; bt < BT; bt++) {
    const x = bt * C;
    for (let o = 0; o < OC; o++) {
      const w = o * C;
      let a = bias ? bias[o] : 0;
      for (let i = 0; i < C; i++) a += inp[x + i] * weight[w + i];
      out[bt * OC + o] = a;
    }
  }
}

/** dinp (B,T,C) += dout·weight; dweight (OC,C) += doutᵀ·inp; dbias (OC) += Σ dout. */
export function matmulBackward(
  dinp: Arr,
  dweight: Arr,
  dbias: Arr | null,
  dout: Arr,
  inp: Arr,
  weight: Arr,
  B: number,
  T: number,
  C: number,
  OC: number,
): void {
  const BT = B * T;
  // dinp: four weight rows per pass, so each dinp element is loaded/stored once per four FMAs
  for (let bt = 0; bt < BT; bt++) {
    const x = bt * C,
      d = bt * OC;
    let o = 0;
    for (; o + 4 <= OC; o += 4) {
      const g0 = dout[d + o],
        g1 = dout[d + o + 1],
        g2 = dout[d + o + 2],
        g3 = dout[d + o + 3];
      const w0 = o * C,
        w1 = w0 + C,
        w2 = w1 + C,
        w3 = w2 + C;
      for (let i = 0; i < C; i++)
        dinp[x + i] += g0 * weight[w0 + i] + g1 * weight[w1 + i] + g2 * weight[w2 + i] + g3 * weight[w3 + i];
    }
    for (; o < OC; o++) {
      const g = dout[d + o],
        w = o * C;
      for (let i = 0; i < C; i++) dinp[x + i] += g * weight[w + i];
    }
  }
  // dweight: four input rows per pass, likewise
  for (let o = 0; o < OC; o++) {
    const w = o * C;
    let db = 0;
    let bt = 0;
    for (; bt + 4 <= BT; bt += 4) {
      const g0 = dout[bt * OC + o],
        g1 = dout[(bt + 1) * OC + o],
        g2 = dout[(bt + 2) * OC + o],
        g3 = dout[(bt + 3) * OC + o];
      db += g0 + g1 + g2 + g3;
      const x0 = bt * C,
        x1 = x0 + C,
        x2 = x1 + C,
        x3 = x2 + C;
      for (let i = 0; i < C; i++)
        dweight[w + i] += g0 * inp[x0 + i] + g1 * inp[x1 + i] + g2 * inp[x2 + i] + g3 * inp[x3 + i];
    }
    for (; bt < BT; bt++) {
      const g = dout[bt * OC + o],
        x = bt * C;
      db += g;
      for (let i = 0; i < C; i++) dweight[w + i] += g * inp[x + i];
    }
    if (dbias) dbias[o] += db;
  }
}

// ---------------------------------------------------------------------------- attention

/**
 * Calls `body` for every (b, t, h) attention row with its offsets: q, the query of head h at
 * position t in inp (B,T,3C); row, its row in att (B,NH,T,T); o, its slot in out (B,T,C).
 */
function forEachHeadRow(
  B: number,
  T: number,
  C: number,
  NH: number,
  body: (b: number, t: number, h: number, q: number, row: number, o: number) => void,
): void {
  const C3 = 3 * C,
    hs = C / NH;
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < NH; h++)
        body(b, t, h, b * T * C3 + t * C3 + h * hs, b * NH * T * T + h * T * T + t * T, b * T * C + t * C + h * hs);
    }
  }
}

/**
 * Causal multi-head self-attention.
 * inp (B,T,3C) holds q,k,v; preatt, att (B,NH,T,T); out (B,T,C).
 * The softmax is fused and max-subtracted; entries t2 > t are zero in att.
 */
export function attentionForward(
  out: Arr,
  preatt: Arr,
  att: Arr,
  inp: Arr,
  B: number,
  T: number,
  C: number,
  NH: number,
): void {
  const C3 = 3 * C,
    hs = C / NH,
    scale = 1 / Math.sqrt(hs);
  forEachHeadRow(B, T, C, NH, (b, t, h, q, row, o) => {
    let maxv = -Infinity;
    for (let t2 = 0; t2 <= t; t2++) {
      const k = b * T * C3 + t2 * C3 + h * hs + C;
      let dot = 0;
      for (let i = 0; i < hs; i++) dot += inp[q + i] * inp[k + i];
      dot *= scale;
      preatt[row + t2] = dot;
      if (dot > maxv) maxv = dot;
    }
    let sum = 0;
    for (let t2 = 0; t2 <= t; t2++) {
      const e = Math.exp(preatt[row + t2] - maxv);
      att[row + t2] = e;
      sum += e;
    }
    const inv = 1 / sum;
    for (let t2 = 0; t2 < T; t2++) {
      if (t2 <= t) att[row + t2] *= inv;
      else {
        att[row + t2] = 0;
        preatt[row + t2] = 0;
      }
    }
    for (let i = 0; i < hs; i++) out[o + i] = 0;
    for (let t2 = 0; t2 <= t; t2++) {
      const v = b * T * C3 + t2 * C3 + h * hs + 2 * C;
      const a = att[row + t2];
      for (let i = 0; i < hs; i++) out[o + i] += a * inp[v + i];
    }
  });
}

export function attentionBackward(
  dinp: Arr,
  dpreatt: Arr,
  datt: Arr,
  dout: Arr,
  inp: Arr,
  att: Arr,
  B: number,
  T: number,
  C: number,
  NH: number,
): void {
  const C3 = 3 * C,
    hs = C / NH,
    scale = 1 / Math.sqrt(hs);
  forEachHeadRow(B, T, C, NH, (b, t, h, q, row, o) => {
    // out = att · v
    for (let t2 = 0; t2 <= t; t2++) {
      const v = b * T * C3 + t2 * C3 + h * hs + 2 * C;
      const a = att[row + t2];
      let da = 0;
      for (let i = 0; i < hs; i++) {
        da += inp[v + i] * dout[o + i];
        dinp[v + i] += a * dout[o + i];
      }
      datt[row + t2] += da;
    }
    // softmax: dpre = att ⊙ (datt − Σ att·datt), O(T) per row
    let dot = 0;
    for (let t2 = 0; t2 <= t; t2++) dot += att[row + t2] * datt[row + t2];
    for (let t2 = 0; t2 <= t; t2++) dpreatt[row + t2] += att[row + t2] * (datt[row + t2] - dot);
    // preatt = scale · q·k
    for (let t2 = 0; t2 <= t; t2++) {
      const k = b * T * C3 + t2 * C3 + h * hs + C;
      const g = dpreatt[row + t2] * scale;
      for (let i = 0; i < hs; i++) {
        dinp[q + i] += inp[k + i] * g;
        dinp[k + i] += inp[q + i] * g;
      }
    }
  });
}

// ---------------------------------------------------------------------------- gelu (tanh approximation, as GPT-2)

const GELU_S = Math.sqrt(2 / Math.PI);

export function geluForward(out: Arr, inp: Arr, N: number): void {
  for (let i = 0; i < N; i++) {
    const x = inp[i];
    out[i] = 0.5 * x * (1 + Math.tanh(GELU_S * (x + 0.044715 * x * x * x)));
  }
}

export function geluBackward(dinp: Arr, inp: Arr, dout: Arr, N: number): void {
  for (let i = 0; i < N; i++) {
    const x = inp[i];
    const th = Math.tanh(GELU_S * (x + 0.044715 * x * x * x));
    const sech2 = 1 - th * th;
    const g = 0.5 * (1 + th) + 0.5 * x * sech2 * GELU_S * (1 + 3 * 0.044715 * x * x);
    dinp[i] += g * dout[i];
  }
}

// ---------------------------------------------------------------------------- residual

export function residualForward(out: Arr, inp1: Arr, inp2: Arr, N: number): void {
  for (let i = 0; i < N; i++) out[i] = inp1[i] + inp2[i];
}

export function residualBackward(dinp1: Arr, dinp2: Arr, dout: Arr, N: number): void {
  for (let i = 0; i < N; i++) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}

// ---------------------------------------------------------------------------- softmax + cross-entropy (fused)

/** losses (B,T) = −log softmax(logits)[target]; probs (B,T,V) cached for the backward. */
export function softmaxCrossEntropyForward(
  losses: Arr,
  probs: Arr,
  logits: Arr,
  targets: Tokens,
  B: number,
  T: number,
  V: number,
): void {
  for (let bt = 0; bt < B * T; bt++) {
    const x = bt * V;
    let maxv = -Infinity;
    for (let i = 0; i < V; i++) if (logits[x + i] > maxv) maxv = logits[x + i];
    let sum = 0;
    for (let i = 0; i < V; i++) {
      const e = Math.exp(logits[x + i] - maxv);
      probs[x + i] = e;
      sum += e;
    }
    const inv = 1 / sum;
    for (let i = 0; i < V; i++) probs[x + i] *= inv;
    losses[bt] = -Math.log(probs[x + targets[bt]]);
  }
}

/** dlogits += (probs − onehot(target)) · dloss, with dloss = 1/(B·T) for a mean loss. */
export function softmaxCrossEntropyBackward(
  dlogits: Arr,
  probs: Arr,
  targets: Tokens,
  dloss: number,
  B: number,
  T: number,
  V: number,
): void {
  for (let bt = 0; bt < B * T; bt++) {
    const x = bt * V,
      y = targets[bt];
    for (let i = 0; i < V; i++) dlogits[x + i] += (probs[x + i] - (i === y ? 1 : 0)) * dloss;
  }
}

/** The mean of the N per-token losses (the loss the engine reports; mean_loss on the GPU). */
export function meanLoss(losses: Arr, N: number): number {
  let s = 0;
  for (let i = 0; i < N; i++) s += losses[i];
  return s / N;
}

// ---------------------------------------------------------------------------- optimizer

export interface AdamWHyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
}

/** Defaults from the issue spec: β1 0.9, β2 0.95, eps 1e-8, wd 0.1 (matrices only, applied by the caller). */
export const ADAMW_DEFAULTS: Omit<AdamWHyper, 'lr'> = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 };

/**
 * One AdamW step over N elements (decoupled weight decay, bias-corrected moments).
 * `step` is 1-based; `gradScale` multiplies the gradient first (global-norm clipping).
 */
export function adamwUpdate(
  params: Arr,
  grads: Arr,
  m: Arr,
  v: Arr,
  N: number,
  lr: number,
  beta1: number,
  beta2: number,
  eps: number,
  weightDecay: number,
  step: number,
  gradScale: number,
): void {
  const bc1 = 1 - Math.pow(beta1, step),
    bc2 = 1 - Math.pow(beta2, step);
  for (let i = 0; i < N; i++) {
    const g = grads[i] * gradScale;
    const mi = beta1 * m[i] + (1 - beta1) * g;
    const vi = beta2 * v[i] + (1 - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const mhat = mi / bc1,
      vhat = vi / bc2;
    params[i] -= lr * (mhat / (Math.sqrt(vhat) + eps) + weightDecay * params[i]);
  }
}

/** Σ g² over the whole gradient (the clipping norm is its square root). */
export function gradNormSquared(grads: Arr, N: number): number {
  let s = 0;
  for (let i = 0; i < N; i++) s += grads[i] * grads[i];
  return s;
}

/** The multiplier that clips the global gradient norm to `maxNorm` (1 when under it, or when maxNorm ≤ 0). */
export function clipScale(normSquared: number, maxNorm: number): number {
  const norm = Math.sqrt(normSquared);
  return maxNorm > 0 && norm > maxNorm ? maxNorm / (norm + 1e-6) : 1;
}

/** Δ = θ_start − θ: the pseudo-gradient an island sends after its inner steps. */
export function pseudoGradient(delta: Arr, thetaStart: Arr, theta: Arr, N: number): void {
  for (let i = 0; i < N; i++) delta[i] = thetaStart[i] - theta[i];
}
