// The fused int8 outer proposal of one fragment, as a few tight passes over chunks of it:
//   combine   g = Σ w_j·d_j (f64, rounded once) and each delta's agreement sums      (sync rounds)
//   update    u and the optimizer's next state, one loop per optimizer kind
//   quantize  v = e + u, a block's scale = max|v|/127, q = round(v/scale), e' = v − q·scale
// Each pass is its own small function over typed arrays, so V8 optimizes each once and keeps it
// (one long loop with every mode inside was OSR-compiled on each call, deoptimized at its end by
// code it had never run, and ran most of every step in the interpreter).
//
// The float operations are OuterOptimizer.propose's and encodeWithFeedback's, in the same order,
// and every running sum takes its terms in element order: the bits are the coordinator's
// (test/cluster-outer.test.ts). A chunk is a whole number of downlink blocks.

import { MIN_SCALE, roundHalfUp } from '../codec/payloads.ts';

const CHUNK = 4096;

/** Running sums of one proposal: [dots (k), sqs (k), Σg², Σu²]; each in element order. */
export type ProposalSums = Float64Array;

/**
 * g[lo,hi) = Σ_j W[j]·D[j] in f64 in j order, rounded once; adds Σg² and each Σ d_j·g, Σ d_j² to
 * sums. Deltas four at a time, left to right (the same additions in the same order); the last
 * group of one to four also rounds g and sums its agreement in the same loop, so a round of up to
 * four deltas reads each of them once. A group of fewer is padded with zero-weight copies of its
 * first delta: the running sum is never −0 (it starts at +0 and sums of non-zero values cannot
 * give −0), so adding their ±0 leaves it unchanged.
 */
function combine(
  D: Float32Array[],
  W: Float64Array,
  lo: number,
  hi: number,
  acc: Float64Array,
  g: Float32Array,
  sums: ProposalSums,
): void {
  const k = D.length;
  let j = 0;
  if (k > 4) {
    acc.fill(0, 0, hi - lo);
    for (; j + 4 < k; j += 4) {
      const w0 = W[j],
        w1 = W[j + 1],
        w2 = W[j + 2],
        w3 = W[j + 3];
      const d0 = D[j],
        d1 = D[j + 1],
        d2 = D[j + 2],
        d3 = D[j + 3];
      for (let i = lo; i < hi; i++) acc[i - lo] = acc[i - lo] + w0 * d0[i] + w1 * d1[i] + w2 * d2[i] + w3 * d3[i];
    }
  }
  const r = k - j,
    d0 = D[j];
  finishGroup(
    d0,
    r > 1 ? D[j + 1] : d0,
    r > 2 ? D[j + 2] : d0,
    r > 3 ? D[j + 3] : d0,
    W[j],
    r > 1 ? W[j + 1] : 0,
    r > 2 ? W[j + 2] : 0,
    r > 3 ? W[j + 3] : 0,
    k > 4,
    lo,
    hi,
    acc,
    g,
    sums,
    j,
    r,
  );
  // the earlier groups' agreement sums, two deltas per pass
  for (let t = 0; t < j; t += 2) {
    const e0 = D[t],
      e1 = D[t + 1];
    let dot0 = sums[t],
      sq0 = sums[k + t],
      dot1 = sums[t + 1],
      sq1 = sums[k + t + 1];
    for (let i = lo; i < hi; i++) {
      const gi = g[i],
        x0 = e0[i],
        x1 = e1[i];
      dot0 += x0 * gi;
      sq0 += x0 * x0;
      dot1 += x1 * gi;
      sq1 += x1 * x1;
    }
    sums[t] = dot0;
    sums[k + t] = sq0;
    sums[t + 1] = dot1;
    sums[k + t + 1] = sq1;
  }
}

/** The last group of `combine`: g = round(acc + Σ w·d), Σg², and the group's r dot and square sums. */
function finishGroup(
  d0: Float32Array,
  d1: Float32Array,
  d2: Float32Array,
  d3: Float32Array,
  w0: number,
  w1: number,
  w2: number,
  w3: number,
  fromAcc: boolean,
  lo: number,
  hi: number,
  acc: Float64Array,
  g: Float32Array,
  sums: ProposalSums,
  j: number,
  r: number,
): void {
  const k = sums.length / 2 - 1;
  let gg = sums[2 * k];
  // running sums in element order (the padding's land in sums it never writes back)
  let dot0 = sums[j],
    sq0 = sums[k + j];
  let dot1 = r > 1 ? sums[j + 1] : 0,
    sq1 = r > 1 ? sums[k + j + 1] : 0;
  let dot2 = r > 2 ? sums[j + 2] : 0,
    sq2 = r > 2 ? sums[k + j + 2] : 0;
  let dot3 = r > 3 ? sums[j + 3] : 0,
    sq3 = r > 3 ? sums[k + j + 3] : 0;
  for (let i = lo; i < hi; i++) {
    const x0 = d0[i],
      x1 = d1[i],
      x2 = d2[i],
      x3 = d3[i];
    const gi = Math.fround((fromAcc ? acc[i - lo] : 0) + w0 * x0 + w1 * x1 + w2 * x2 + w3 * x3);
    g[i] = gi;
    gg += gi * gi;
    dot0 += x0 * gi;
    sq0 += x0 * x0;
    dot1 += x1 * gi;
    sq1 += x1 * x1;
    dot2 += x2 * gi;
    sq2 += x2 * x2;
    dot3 += x3 * gi;
    sq3 += x3 * x3;
  }
  sums[2 * k] = gg;
  sums[j] = dot0;
  sums[k + j] = sq0;
  if (r > 1) {
    sums[j + 1] = dot1;
    sums[k + j + 1] = sq1;
  }
  if (r > 2) {
    sums[j + 2] = dot2;
    sums[k + j + 2] = sq2;
  }
  if (r > 3) {
    sums[j + 3] = dot3;
    sums[k + j + 3] = sq3;
  }
}

/** u = s·g, the state kept (a plain step). */
function updatePlain(g: Float32Array, s: number, lo: number, hi: number, u: Float32Array): void {
  for (let i = lo; i < hi; i++) u[i] = s * g[i];
}

/** Delayed Nesterov between flushes: u = lr·s·g, b' = b + s·g. */
function updateDelayed(
  g: Float32Array,
  s: number,
  lr: number,
  b: Float32Array,
  bNext: Float32Array,
  lo: number,
  hi: number,
  u: Float32Array,
): void {
  for (let i = lo; i < hi; i++) {
    const gi = s * g[i];
    u[i] = lr * gi;
    bNext[i] = b[i] + gi;
  }
}

/** Delayed Nesterov at a flush: m' = μm + (b + s·g), b' = 0, u = lr·s·g + lr·μ·m'. */
function updateDelayedFlush(
  g: Float32Array,
  s: number,
  lr: number,
  mu: number,
  m: Float32Array,
  b: Float32Array,
  mNext: Float32Array,
  bNext: Float32Array,
  lo: number,
  hi: number,
  u: Float32Array,
): void {
  for (let i = lo; i < hi; i++) {
    const gi = s * g[i];
    const mi = Math.fround(mu * m[i] + Math.fround(b[i] + gi));
    mNext[i] = mi;
    bNext[i] = 0;
    u[i] = lr * gi + lr * mu * mi;
  }
}

/** Nesterov: m' = decay·m + s·g, u = lr·(s·g + part·μ·m'). */
function updateNesterov(
  g: Float32Array,
  s: number,
  lr: number,
  mu: number,
  decay: number,
  part: number,
  m: Float32Array,
  mNext: Float32Array,
  lo: number,
  hi: number,
  u: Float32Array,
): void {
  for (let i = lo; i < hi; i++) {
    const gi = s * g[i];
    const mi = Math.fround(decay * m[i] + gi);
    mNext[i] = mi;
    u[i] = lr * (gi + part * mu * mi);
  }
}

/** Heavy ball (and sgd): m' = decay·m + s·g, u = lr·m'. */
function updateMomentum(
  g: Float32Array,
  s: number,
  lr: number,
  decay: number,
  m: Float32Array,
  mNext: Float32Array,
  lo: number,
  hi: number,
  u: Float32Array,
): void {
  for (let i = lo; i < hi; i++) {
    const mi = Math.fround(decay * m[i] + s * g[i]);
    mNext[i] = mi;
    u[i] = lr * mi;
  }
}

/** Heavy ball, a share s (= part) of a step: m' = μ^s·m + s·g, u = lr·(s·g + s·μ^s·m) (sgd: lr·s·g). */
function updateMomentumShare(
  g: Float32Array,
  s: number,
  lr: number,
  decay: number,
  part: number,
  m: Float32Array,
  mNext: Float32Array,
  lo: number,
  hi: number,
  u: Float32Array,
): void {
  for (let i = lo; i < hi; i++) {
    const gi = s * g[i];
    mNext[i] = Math.fround(decay * m[i] + gi);
    u[i] = lr * (gi + part * decay * m[i]);
  }
}

/**
 * Error feedback and int8 blocks over [lo, hi) (block aligned): e' = v − deq(q) with v = e + u;
 * dq = deq(q) (what θ loses). Adds Σu² to sums[last]. Returns 0, or 1 for a non-finite u or v
 * (either makes the block's max non-finite), 2 for an int8 value of −128 (the codec refuses it).
 */
function quantize(
  u: Float32Array,
  e: Float32Array,
  eNext: Float32Array,
  dq: Float32Array,
  q: Int8Array,
  scales: Float32Array,
  B: number,
  lo: number,
  hi: number,
  sums: ProposalSums,
): number {
  const last = sums.length - 1;
  let sumSq = sums[last],
    illegal = false;
  for (let start = lo; start < hi; start += B) {
    const end = Math.min(start + B, hi);
    let max = 0;
    for (let i = start; i < end; i++) {
      const uf = u[i];
      sumSq += uf * uf;
      const v = Math.fround(e[i] + uf);
      eNext[i] = v;
      max = Math.max(max, Math.abs(v));
    }
    if (!(max < Infinity)) return 1;
    let scale = Math.fround(max / 127);
    if (scale === 0 && max > 0) scale = MIN_SCALE;
    scales[start / B] = scale;
    const inv = scale > 0 ? 1 / scale : 0;
    for (let i = start; i < end; i++) {
      const v = eNext[i];
      const qi = (roundHalfUp(v * inv) << 24) >> 24; // what an Int8Array keeps of it
      q[i] = qi;
      if (qi === -128) illegal = true;
      const d = Math.fround(qi * scale);
      dq[i] = d;
      eNext[i] = v - d;
    }
  }
  sums[last] = sumSq;
  return illegal ? 2 : 0;
}

/** What one fragment's fused int8 proposal reads and writes (all fragment-local, length len). */
export interface Int8Proposal {
  /** The round's deltas (one, with weights null, in async). */
  D: Float32Array[];
  W: Float64Array | null;
  kind: 'plain' | 'delayed' | 'delayed-flush' | 'nesterov' | 'momentum' | 'momentum-share';
  s: number;
  lr: number;
  mu: number;
  decay: number;
  part: number;
  m: Float32Array;
  b: Float32Array;
  e: Float32Array;
  mNext: Float32Array;
  bNext: Float32Array;
  eNext: Float32Array;
  /** g scratch (sync); u, then deq(q). */
  g: Float32Array;
  dq: Float32Array;
  /** The fragment's scales and values inside the downlink frame. */
  scales: Float32Array;
  q: Int8Array;
  blockSize: number;
  acc: Float64Array;
}

/** Runs the passes chunk by chunk; sums as ProposalSums. Returns 0, 1 (non-finite) or 2 (−128). */
export function proposeInt8(p: Int8Proposal, sums: ProposalSums): number {
  const len = p.dq.length,
    B = p.blockSize;
  const chunk = Math.max(CHUNK, B);
  const u = p.dq;
  const g = p.W === null ? p.D[0] : p.g;
  for (let lo = 0; lo < len; lo += chunk) {
    const hi = Math.min(lo + chunk, len);
    if (p.W !== null) combine(p.D, p.W, lo, hi, p.acc, g, sums);
    switch (p.kind) {
      case 'plain':
        updatePlain(g, p.s, lo, hi, u);
        break;
      case 'delayed':
        updateDelayed(g, p.s, p.lr, p.b, p.bNext, lo, hi, u);
        break;
      case 'delayed-flush':
        updateDelayedFlush(g, p.s, p.lr, p.mu, p.m, p.b, p.mNext, p.bNext, lo, hi, u);
        break;
      case 'nesterov':
        updateNesterov(g, p.s, p.lr, p.mu, p.decay, p.part, p.m, p.mNext, lo, hi, u);
        break;
      case 'momentum':
        updateMomentum(g, p.s, p.lr, p.decay, p.m, p.mNext, lo, hi, u);
        break;
      case 'momentum-share':
        updateMomentumShare(g, p.s, p.lr, p.decay, p.part, p.m, p.mNext, lo, hi, u);
        break;
    }
    const r = quantize(u, p.e, p.eNext, p.dq, p.q, p.scales, B, lo, hi, sums);
    if (r !== 0) return r;
  }
  return 0;
}

/** g = Σ_j W[j]·D[j] over the whole fragment, chunk by chunk as proposeInt8's first pass, with the agreement sums. */
export function combineAll(
  D: Float32Array[],
  W: Float64Array,
  g: Float32Array,
  acc: Float64Array,
  sums: ProposalSums,
): void {
  for (let lo = 0; lo < g.length; lo += CHUNK) combine(D, W, lo, Math.min(lo + CHUNK, g.length), acc, g, sums);
}

/** The agreement sums of k deltas in `sums` (ProposalSums), as the pool reports them. */
export function agreementOf(sums: ProposalSums, k: number): { dots: number[]; sqs: number[]; gg: number } {
  return { dots: Array.from(sums.subarray(0, k)), sqs: Array.from(sums.subarray(k, 2 * k)), gg: sums[2 * k] };
}

/** A scratch long enough for one chunk of blocks of `blockSize`: `have` when it already is. */
export function chunkScratch(blockSize: number, have?: Float64Array): Float64Array {
  const n = Math.max(CHUNK, blockSize);
  return have && have.length >= n ? have : new Float64Array(n);
}
