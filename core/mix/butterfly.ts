// Butterfly mixing inside a group of k islands (k a power of two): the fragment ranges, the
// reduce-scatter of the members' token-weighted Δs and the all-gather of the update's pieces, over
// any peer channel (WebRTC data channels live, in-process links in the simulator).
//
// Reduce-scatter (recursive halving): at stage s member i exchanges with partner i XOR 2^s. Before
// stage s it holds partial sums for the fragments j that agree with i on bits 0..s-1; it sends the
// half whose bit s is the partner's and adds the partner's half for its own. After log2 k stages
// member j holds fragment j of Σ a_m·x_m, a_m = fround(w_m / W) with w_m the tokens the server
// assigned member m and W = Σ w_m. Every value is f32 and f32 addition is commutative, so the sum
// is the canonical pairwise tree ((x0+x1)+(x2+x3))+…: anyone holding the members' Δs (a checker,
// the server's audit) recomputes a fragment bit for bit (canonicalFragment).

/** Fragment j of an n-vector split among k members: [lo, hi), cut on multiples of `align` (a codec chunk). */
export function fragmentRanges(n: number, k: number, align: number): Array<[number, number]> {
  const blocks = Math.ceil(n / Math.max(1, align));
  const cut = (j: number) => Math.min(n, Math.floor((j * blocks) / k) * align);
  return Array.from({ length: k }, (_, j) => [cut(j), j === k - 1 ? n : cut(j + 1)] as [number, number]);
}

export function isPowerOfTwo(k: number): boolean { return Number.isInteger(k) && k >= 1 && (k & (k - 1)) === 0; }

export function stagesOf(k: number): number { return Math.round(Math.log2(k)); }

/** Each member's share a_m = fround(w_m / W) of the token-weighted mean. */
export function mixWeights(tokens: number[]): Float32Array {
  const W = tokens.reduce((a, b) => a + b, 0);
  return Float32Array.from(tokens, (w) => w / W);
}

/** The fragments member i sends to its stage-s partner (those it keeps the other half of). */
export function sentFragments(i: number, s: number, k: number): number[] {
  const low = (1 << s) - 1, p = i ^ (1 << s);
  const out: number[] = [];
  for (let j = 0; j < k; j++) if ((j & low) === (i & low) && ((j >> s) & 1) === ((p >> s) & 1)) out.push(j);
  return out;
}

/** The fragments member i keeps after stage s (it receives the partner's partial sums for these). */
export function keptFragments(i: number, s: number, k: number): number[] { return sentFragments(i ^ (1 << s), s, k); }

/** Values of `v` over the ranges of `frags`, concatenated in fragment order. */
export function gatherRanges(v: Float32Array, frags: number[], ranges: Array<[number, number]>): Float32Array {
  const len = frags.reduce((a, j) => a + ranges[j][1] - ranges[j][0], 0);
  const out = new Float32Array(len);
  let o = 0;
  for (const j of frags) { out.set(v.subarray(ranges[j][0], ranges[j][1]), o); o += ranges[j][1] - ranges[j][0]; }
  return out;
}

/** acc[ranges of frags] += add (f32), add laid out as gatherRanges lays it out. False when the sizes disagree. */
export function addRanges(acc: Float32Array, add: Float32Array, frags: number[], ranges: Array<[number, number]>): boolean {
  let o = 0;
  for (const j of frags) {
    const [lo, hi] = ranges[j];
    if (o + hi - lo > add.length) return false;
    for (let t = lo; t < hi; t++) acc[t] += add[o++];
  }
  return o === add.length;
}

/** a·x in f32: a member's input to the reduce-scatter. */
export function weighted(x: Float32Array, a: number): Float32Array {
  const y = new Float32Array(x.length);
  for (let t = 0; t < x.length; t++) y[t] = a * x[t];
  return y;
}

/**
 * Fragment j of the group's token-weighted mean from every member's Δ (their decoded frames), in
 * the butterfly's order: the pairwise tree over member indices. Bit-identical to reduceScatter's.
 * `xs[m]` null: member m is left out (its weight must then be 0).
 */
export function canonicalFragment(xs: Array<Float32Array | null>, a: Float32Array, range: [number, number]): Float32Array {
  return treeSum(xs.map((x, m) => (x ? weighted(x.subarray(range[0], range[1]), a[m]) : new Float32Array(range[1] - range[0]))));
}

/** The pairwise tree sum ((p0+p1)+(p2+p3))+… of k equal-length pieces (a power of two of them), f32; reuses the pieces. */
export function treeSum(pieces: Float32Array[]): Float32Array {
  let level = pieces;
  while (level.length > 1) {
    const next: Float32Array[] = [];
    for (let m = 0; m < level.length; m += 2) {
      const s = level[m], b = level[m + 1];
      for (let t = 0; t < s.length; t++) s[t] += b[t];
      next.push(s);
    }
    level = next;
  }
  return level[0];
}

/** A member's channel to the other members of its group. recv: null when the peer closed or timed out. */
export interface PeerChannel {
  send(to: number, stage: number, payload: Float32Array): Promise<void>;
  recv(from: number, stage: number): Promise<Float32Array | null>;
}

/** What a member sent and received at each stage (for an audit's attribution). */
export interface StageLog { sent: Float32Array[]; received: Float32Array[] }

/**
 * The reduce-scatter from member i's side. x: its decoded Δ (n values). Returns its fragment of
 * the group's weighted mean (length hi − lo of ranges[i]) and what it exchanged, or null when a
 * partner dropped or stalled (the group falls back to direct uploads).
 */
export async function reduceScatter(
  i: number, k: number, x: Float32Array, a: Float32Array, ranges: Array<[number, number]>, ch: PeerChannel,
): Promise<{ fragment: Float32Array; log: StageLog } | null> {
  const acc = weighted(x, a[i]);
  const log: StageLog = { sent: [], received: [] };
  for (let s = 0; s < stagesOf(k); s++) {
    const p = i ^ (1 << s);
    const out = gatherRanges(acc, sentFragments(i, s, k), ranges);
    log.sent.push(out);
    const [, got] = await Promise.all([ch.send(p, s, out), ch.recv(p, s)]);
    if (!got || !addRanges(acc, got, keptFragments(i, s, k), ranges)) return null;
    log.received.push(got);
  }
  return { fragment: acc.slice(ranges[i][0], ranges[i][1]), log };
}

/** Byte piece j of an update frame split among k members (the downlink's all-gather). */
export function pieceRange(bytes: number, k: number, j: number): [number, number] {
  return [Math.floor((j * bytes) / k), Math.floor(((j + 1) * bytes) / k)];
}

/** A member's channel for the downlink's all-gather: pieces of bytes. */
export interface PieceChannel {
  send(to: number, stage: number, pieces: Map<number, Uint8Array>): Promise<void>;
  recv(from: number, stage: number): Promise<Map<number, Uint8Array> | null>;
}

/**
 * The all-gather (recursive doubling, the reduce-scatter reversed): member i starts with its piece
 * and at stage s swaps everything it holds with partner i XOR 2^s. Returns all k pieces joined, or
 * null when a partner is missing.
 */
export async function allGather(i: number, k: number, mine: Uint8Array, ch: PieceChannel): Promise<Uint8Array | null> {
  const have = new Map<number, Uint8Array>([[i, mine]]);
  for (let s = stagesOf(k) - 1; s >= 0; s--) {
    const p = i ^ (1 << s);
    const [, got] = await Promise.all([ch.send(p, s, new Map(have)), ch.recv(p, s)]);
    if (!got) return null;
    for (const [j, b] of got) if (j >= 0 && j < k && !have.has(j)) have.set(j, b);
  }
  if (have.size !== k) return null;
  const len = [...have.values()].reduce((a, b) => a + b.length, 0);
  const out = new Uint8Array(len);
  let o = 0;
  for (let j = 0; j < k; j++) { const b = have.get(j)!; out.set(b, o); o += b.length; }
  return out;
}
