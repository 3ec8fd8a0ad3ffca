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

const CHUNK = 4096;
const MIN_SCALE = 1.401298464324817e-45; // the codec's scale for a block of subnormals

/** Running sums of one proposal: [dots (k), sqs (k), Σg², Σu²]; each in element order. */
export type ProposalSums = Float64Array;

/**
 * g[lo,hi) = Σ_j W[j]·D[j] in f64 in j order, rounded once; adds Σg² and each Σ d_j·g, Σ d_j² to
 * sums. Four deltas per pass over the chunk (left to right: the same additions in the same order).
 */
function combine(D: Float32Array[], W: Float64Array, lo: number, hi: number, acc: Float64Array, g: Float32Array, sums: ProposalSums): void {
  const k = D.length, m = hi - lo;
  acc.fill(0, 0, m);
  let j = 0;
  for (; j + 4 <= k; j += 4) {
    const w0 = W[j], w1 = W[j + 1], w2 = W[j + 2], w3 = W[j + 3];
    const d0 = D[j], d1 = D[j + 1], d2 = D[j + 2], d3 = D[j + 3];
    for (let i = 0; i < m; i++) acc[i] = acc[i] + w0 * d0[lo + i] + w1 * d1[lo + i] + w2 * d2[lo + i] + w3 * d3[lo + i];
  }
  for (; j < k; j++) {
    const w = W[j], d = D[j];
    for (let i = 0; i < m; i++) acc[i] += w * d[lo + i];
  }
  let gg = sums[2 * k];
  for (let i = 0; i < m; i++) {
    const gi = Math.fround(acc[i]);
    g[lo + i] = gi;
    gg += gi * gi;
  }
  sums[2 * k] = gg;
  for (j = 0; j + 2 <= k; j += 2) {
    const d0 = D[j], d1 = D[j + 1];
    let dot0 = sums[j], sq0 = sums[k + j], dot1 = sums[j + 1], sq1 = sums[k + j + 1];
    for (let i = lo; i < hi; i++) {
      const gi = g[i], x0 = d0[i], x1 = d1[i];
      dot0 += x0 * gi; sq0 += x0 * x0;
      dot1 += x1 * gi; sq1 += x1 * x1;
    }
    sums[j] = dot0; sums[k + j] = sq0; sums[j + 1] = dot1; sums[k + j + 1] = sq1;
  }
  if (j < k) {
    const d = D[j];
    let dot = sums[j], sq = sums[k + j];
    for (let i = lo; i < hi; i++) {
      const x = d[i];
      dot += x * g[i];
      sq += x * x;
    }
    sums[j] = dot;
    sums[k + j] = sq;
  }
}

/** u = s·g, the state kept (a plain step). */
function updatePlain(g: Float32Array, s: number, lo: number, hi: number, u: Float32Array): void {
  for (let i = lo; i < hi; i++) u[i] = s * g[i];
}

/** Delayed Nesterov between flushes: u = lr·s·g, b' = b + s·g. */
function updateDelayed(g: Float32Array, s: number, lr: number, b: Float32Array, bNext: Float32Array, lo: number, hi: number, u: Float32Array): void {
  for (let i = lo; i < hi; i++) {
    const gi = s * g[i];
    u[i] = lr * gi;
    bNext[i] = b[i] + gi;
  }
}

/** Delayed Nesterov at a flush: m' = μm + (b + s·g), b' = 0, u = lr·s·g + lr·μ·m'. */
function updateDelayedFlush(g: Float32Array, s: number, lr: number, mu: number, m: Float32Array, b: Float32Array, mNext: Float32Array, bNext: Float32Array, lo: number, hi: number, u: Float32Array): void {
  for (let i = lo; i < hi; i++) {
    const gi = s * g[i];
    const mi = Math.fround(mu * m[i] + Math.fround(b[i] + gi));
    mNext[i] = mi;
    bNext[i] = 0;
    u[i] = lr * gi + lr * mu * mi;
  }
}

/** Nesterov: m' = decay·m + s·g, u = lr·(s·g + part·μ·m'). */
function updateNesterov(g: Float32Array, s: number, lr: number, mu: number, decay: number, part: number, m: Float32Array, mNext: Float32Array, lo: number, hi: number, u: Float32Array): void {
  for (let i = lo; i < hi; i++) {
    const gi = s * g[i];
    const mi = Math.fround(decay * m[i] + gi);
    mNext[i] = mi;
    u[i] = lr * (gi + part * mu * mi);
  }
}

/** Heavy ball: m' = decay·m + s·g, u = lr·part·m'. */
function updateMomentum(g: Float32Array, s: number, lr: number, decay: number, part: number, m: Float32Array, mNext: Float32Array, lo: number, hi: number, u: Float32Array): void {
  for (let i = lo; i < hi; i++) {
    const mi = Math.fround(decay * m[i] + s * g[i]);
    mNext[i] = mi;
    u[i] = lr * part * mi;
  }
}

/**
 * Error feedback and int8 blocks over [lo, hi) (block aligned): e' = v − deq(q) with v = e + u;
 * dq = deq(q) (what θ loses). Adds Σu² to sums[last]. Returns 0, or 1 for a non-finite u or v,
 * 2 for an int8 value of −128 (the codec refuses it).
 */
function quantize(u: Float32Array, e: Float32Array, eNext: Float32Array, dq: Float32Array, q: Int8Array, scales: Float32Array, B: number, lo: number, hi: number, sums: ProposalSums): number {
  const last = sums.length - 1;
  let sumSq = sums[last], probe = 0, illegal = false;
  for (let start = lo; start < hi; start += B) {
    const end = Math.min(start + B, hi);
    let max = 0;
    for (let i = start; i < end; i++) {
      const uf = u[i];
      probe += uf * 0;
      sumSq += uf * uf;
      const v = Math.fround(e[i] + uf);
      eNext[i] = v;
      max = Math.max(max, Math.abs(v));
    }
    if (!(max < Infinity) || probe !== 0) return 1;
    let scale = Math.fround(max / 127);
    if (scale === 0 && max > 0) scale = MIN_SCALE;
    scales[start / B] = scale;
    const inv = scale > 0 ? 1 / scale : 0;
    for (let i = start; i < end; i++) {
      q[i] = Math.round(eNext[i] * inv);
      const qi = q[i];
      if (qi === -128) illegal = true;
      const d = Math.fround(qi * scale);
      dq[i] = d;
      eNext[i] = eNext[i] - d;
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
  kind: 'plain' | 'delayed' | 'delayed-flush' | 'nesterov' | 'momentum';
  s: number; lr: number; mu: number; decay: number; part: number;
  m: Float32Array; b: Float32Array; e: Float32Array;
  mNext: Float32Array; bNext: Float32Array; eNext: Float32Array;
  /** g scratch (sync); u, then deq(q). */
  g: Float32Array; dq: Float32Array;
  /** The fragment's scales and values inside the downlink frame. */
  scales: Float32Array; q: Int8Array;
  blockSize: number;
  acc: Float64Array;
}

/** Runs the passes chunk by chunk; sums as ProposalSums. Returns 0, 1 (non-finite) or 2 (−128). */
export function proposeInt8(p: Int8Proposal, sums: ProposalSums): number {
  const len = p.dq.length, B = p.blockSize;
  const chunk = Math.max(CHUNK, B);
  const u = p.dq;
  const g = p.W === null ? p.D[0] : p.g;
  for (let lo = 0; lo < len; lo += chunk) {
    const hi = Math.min(lo + chunk, len);
    if (p.W !== null) combine(p.D, p.W, lo, hi, p.acc, g, sums);
    switch (p.kind) {
      case 'plain': updatePlain(g, p.s, lo, hi, u); break;
      case 'delayed': updateDelayed(g, p.s, p.lr, p.b, p.bNext, lo, hi, u); break;
      case 'delayed-flush': updateDelayedFlush(g, p.s, p.lr, p.mu, p.m, p.b, p.mNext, p.bNext, lo, hi, u); break;
      case 'nesterov': updateNesterov(g, p.s, p.lr, p.mu, p.decay, p.part, p.m, p.mNext, lo, hi, u); break;
      case 'momentum': updateMomentum(g, p.s, p.lr, p.decay, p.part, p.m, p.mNext, lo, hi, u); break;
    }
    const r = quantize(u, p.e, p.eNext, p.dq, p.q, p.scales, B, lo, hi, sums);
    if (r !== 0) return r;
  }
  return 0;
}

/** A scratch long enough for one chunk of blocks of `blockSize`. */
export function chunkScratch(blockSize: number): Float64Array {
  return new Float64Array(Math.max(CHUNK, blockSize));
}
