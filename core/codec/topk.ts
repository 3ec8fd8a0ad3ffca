// Top-k selection by magnitude (the island-side error-feedback residual: feedback.ts).
//
// Selection is a two-level radix select on float bits, O(n) with no sort: for IEEE floats the
// bit pattern of |x| (sign bit cleared) orders like |x| itself, so
//   pass 1  histogram of the top 16 of the 31 magnitude bits -> the bucket that holds the k-th largest,
//   pass 2  histogram of the low 15 bits inside that bucket  -> the exact k-th largest magnitude T,
//   pass 3  collect indices with |x| > T, plus the first ties |x| == T in index order, until k.
// The result is exactly k indices, ascending, and deterministic (ties go to the lowest indices).
// NaN bit patterns sort above inf, so non-finite entries are always kept (and then poison their
// int8 block, which decode rejects).

/** Histogram buckets needed by selectTopK (pass 1 uses all of them, pass 2 the first half). */
export const TOPK_HIST_SIZE = 65536;

/**
 * Writes into `outIdx[0..k)` the indices of the k entries of `x` with the largest magnitude, in
 * ascending order. `hist` is scratch of at least TOPK_HIST_SIZE entries. Requires 0 <= k <= x.length.
 */
export function selectTopK(x: Float32Array, k: number, hist: Uint32Array, outIdx: Uint32Array): void {
  const n = x.length;
  if (k <= 0) return;
  if (k >= n) {
    for (let i = 0; i < n; i++) outIdx[i] = i;
    return;
  }
  const bits = new Int32Array(x.buffer, x.byteOffset, n); // int32 view: uint32 loads above 2^31 can box in V8

  // Pass 1: coarse histogram on magnitude bits 30..15.
  hist.fill(0, 0, 65536);
  for (let i = 0; i < n; i++) hist[(bits[i] & 0x7fffffff) >>> 15]++;
  let above = 0; // entries in buckets strictly above the boundary bucket
  let hiBucket = 65535;
  for (; hiBucket > 0; hiBucket--) {
    const c = hist[hiBucket];
    if (above + c >= k) break;
    above += c;
  }

  // Pass 2: fine histogram on bits 14..0 of the entries in the boundary bucket.
  hist.fill(0, 0, 32768);
  for (let i = 0; i < n; i++) {
    const a = bits[i] & 0x7fffffff;
    if (a >>> 15 === hiBucket) hist[a & 0x7fff]++;
  }
  let loBucket = 32767;
  for (; loBucket > 0; loBucket--) {
    const c = hist[loBucket];
    if (above + c >= k) break;
    above += c;
  }
  const threshold = (hiBucket << 15) | loBucket;
  let ties = k - above; // how many entries equal to the threshold to keep

  // Pass 3: collect in index order.
  let j = 0;
  for (let i = 0; i < n; i++) {
    const a = bits[i] & 0x7fffffff;
    if (a > threshold) outIdx[j++] = i;
    else if (a === threshold && ties > 0) {
      outIdx[j++] = i;
      ties--;
    }
  }
}
