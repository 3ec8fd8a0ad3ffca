// Butterfly mixing inside a group of k islands (k a power of two), over any peer channel (WebRTC
// data channels live, in-process links in the simulator).
//
// The exchange: at stage s member i swaps everything it holds with partner i XOR 2^s (recursive
// doubling). Members start with their own encoded Δ frame, so after log2 k stages every member
// holds every member's frame, each checked against the SHA-256 its sender committed to before the
// exchange; a frame that does not match ends the exchange (the group falls back to direct uploads).
// Member j then reduces its fragment j of Σ a_m·x_m, a_m = fround(w_m / W), w_m the tokens the
// server assigned member m, W = Σ w_m, x_m the decoded frame: f32 throughout, in the pairwise tree
// order ((x0+x1)+(x2+x3))+…, so anyone holding the frames (a spot checker, the server's audit)
// recomputes a fragment bit for bit (canonicalFragment). The downlink runs the same exchange on
// the k byte pieces of an update frame.
//
// Encoded frames, not f32 partial sums, cross the links: a sparse Δ is 1/16 of its f32 partial
// sums (tiny: 2 kB against 69 kB for the first stage of a reduce-scatter), and a frame can be
// checked against its commitment at every hop where a partial sum cannot.

/** Fragment j of an n-vector split among k members: [lo, hi), cut on multiples of `align` (a codec chunk). */
export function fragmentRanges(n: number, k: number, align: number): Array<[number, number]> {
  const blocks = Math.ceil(n / Math.max(1, align));
  const cut = (j: number) => Math.min(n, Math.floor((j * blocks) / k) * align);
  return Array.from({ length: k }, (_, j) => [cut(j), j === k - 1 ? n : cut(j + 1)] as [number, number]);
}

export function isPowerOfTwo(k: number): boolean {
  return Number.isInteger(k) && k >= 1 && (k & (k - 1)) === 0;
}

export function stagesOf(k: number): number {
  return Math.round(Math.log2(k));
}

/** Each member's share a_m = fround(w_m / W) of the token-weighted mean. */
export function mixWeights(tokens: number[]): Float32Array {
  const W = tokens.reduce((a, b) => a + b, 0);
  return Float32Array.from(tokens, (w) => w / W);
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
export function canonicalFragment(
  xs: Array<Float32Array | null>,
  a: Float32Array,
  range: [number, number],
): Float32Array {
  return treeSum(
    xs.map((x, m) => (x ? weighted(x.subarray(range[0], range[1]), a[m]) : new Float32Array(range[1] - range[0]))),
  );
}

/**
 * The pairwise tree sum ((p0+p1)+(p2+p3))+… of k equal-length pieces (a power of two of them), f32; reuses
 * the pieces.
 */
export function treeSum(pieces: Float32Array[]): Float32Array {
  let level = pieces;
  while (level.length > 1) {
    const next: Float32Array[] = [];
    for (let m = 0; m < level.length; m += 2) {
      const s = level[m],
        b = level[m + 1];
      for (let t = 0; t < s.length; t++) s[t] += b[t];
      next.push(s);
    }
    level = next;
  }
  return level[0];
}

/** Byte piece j of an update frame split among k members (the downlink's all-gather). */
export function pieceRange(bytes: number, k: number, j: number): [number, number] {
  return [Math.floor((j * bytes) / k), Math.floor(((j + 1) * bytes) / k)];
}

/** A member's channel to the other members of its group: what it holds, by member (or piece) index. */
export interface PieceChannel {
  send(to: number, stage: number, pieces: Map<number, Uint8Array>): Promise<void>;
  recv(from: number, stage: number): Promise<Map<number, Uint8Array> | null>;
}

/**
 * The butterfly exchange from member i's side: it starts with `mine` (index i) and at stage s swaps
 * everything it holds with partner i XOR 2^s. `accept(j, bytes)` checks each piece received (its
 * commitment); returns all k pieces by index, or null when a partner is missing or sent a piece
 * that fails the check.
 */
export async function exchange(
  i: number,
  k: number,
  mine: Uint8Array,
  ch: PieceChannel,
  accept: (j: number, b: Uint8Array) => boolean = () => true,
): Promise<Uint8Array[] | null> {
  const have = new Map<number, Uint8Array>([[i, mine]]);
  for (let s = 0; s < stagesOf(k); s++) {
    const p = i ^ (1 << s);
    const [, got] = await Promise.all([ch.send(p, s, new Map(have)), ch.recv(p, s)]);
    if (!got) return null;
    for (const [j, b] of got) {
      if (!Number.isInteger(j) || j < 0 || j >= k || have.has(j)) continue;
      if (!accept(j, b)) return null;
      have.set(j, b);
    }
  }
  if (have.size !== k) return null;
  return Array.from({ length: k }, (_, j) => have.get(j)!);
}

/**
 * One stage's data-channel message: a 1-byte count c, then c entries of (1-byte member index, u32
 * little-endian length, the bytes).
 */
export function packPieces(pieces: Map<number, Uint8Array>): Uint8Array {
  const out = new Uint8Array(1 + [...pieces.values()].reduce((a, b) => a + 5 + b.length, 0));
  const dv = new DataView(out.buffer);
  out[0] = pieces.size;
  let o = 1;
  for (const [j, b] of pieces) {
    out[o] = j;
    dv.setUint32(o + 1, b.length, true);
    out.set(b, o + 5);
    o += 5 + b.length;
  }
  return out;
}

/** packPieces undone; null when the message is malformed (a peer's bytes are untrusted). */
export function unpackPieces(msg: Uint8Array): Map<number, Uint8Array> | null {
  if (msg.length < 1) return null;
  const dv = new DataView(msg.buffer, msg.byteOffset, msg.byteLength);
  const out = new Map<number, Uint8Array>();
  let o = 1;
  for (let e = 0; e < msg[0]; e++) {
    if (o + 5 > msg.length) return null;
    const len = dv.getUint32(o + 1, true);
    if (o + 5 + len > msg.length) return null;
    out.set(msg[o], msg.subarray(o + 5, o + 5 + len));
    o += 5 + len;
  }
  return o === msg.length ? out : null;
}

/** Joins pieces in index order. */
export function joinPieces(pieces: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(pieces.reduce((a, b) => a + b.length, 0));
  let o = 0;
  for (const b of pieces) {
    out.set(b, o);
    o += b.length;
  }
  return out;
}

/** Member i's partners in a group of k, by stage (i XOR 2^s): the only data channels its exchanges use. */
export function butterflyPartners(i: number, k: number): number[] {
  const out: number[] = [];
  for (let bit = 1; bit < k; bit <<= 1) out.push(i ^ bit);
  return out;
}
