// Matrix multiply for the linear layers. Twins: matmulForward / matmulBackward (core/model/ops.ts).
//   matmul_forward          out (M=B·T, N=OC)  = inp (M,K=C) · W(N,K)ᵀ + bias(N)
//   matmul_backward_dinp    dinp (M=B·T, N=C) (+)= dout (M,K=OC) · W (K,N)
//   matmul_backward_dweight dW (M=OC, N=C)    (+)= dout(K=B·T, M)ᵀ · inp (K,N)
//   matmul_backward_dbias   dbias (N=OC)      (+)= Σ_rows dout (M=B·T, N)
// No transpose is materialised: each operand has a loader for its memory order.
// Split-K for dW: its output (OC×C) has few tiles while K = B·T is long, so the engine
// may cut K into slices (grid z), each writing its own partial dW, then
// matmul_backward_dweight_reduce sums the slices in a fixed order (deterministic, no atomics).
//
// Tiling (for real GPUs): a workgroup of 256 threads computes a 64×64 output tile,
// each thread a 4×4 register block; K advances in steps of 16 through two workgroup
// tiles (8 KiB) stored k-major so the inner loop reads one vec4 of A and one of B per
// k and does 16 FMAs. Every thread moves one vec4 of each tile per K step.
// One templated body: the block between `@repeat V` and `@end` is written once and
// expanded for V = "" (scalar loads: any shape) and V = "_vec4" (vec4 loads and stores,
// used when the contiguous dims and offsets are multiples of 4). Only the three memory
// primitives (elem, read4, write4) are written per variant.
// Edges (M, N, K not multiples of the tile) are zero-padded in the tiles and masked on store.

struct Params {
  M: u32,
  N: u32,
  K: u32,
  flags: u32,     // 1: add bias (forward), 2: accumulate into out (backward, as the twin), 4: GELU epilogue
  a_off: u32,     // element offsets into the bound buffers
  b_off: u32,
  c_off: u32,
  bias_off: u32,  // bias lives in the same buffer as W (params)
  k_chunk: u32,   // dweight: K rows per grid-z slice (= K when not split)
  act_off: u32,   // GELU epilogue: gelu(out) goes act_off elements after out, in the same buffer
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> c: array<f32>;
@group(0) @binding(1) var<storage, read_write> c4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> a4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> b4: array<vec4<f32>>;

const BM: u32 = 64u;
const BN: u32 = 64u;
const BK: u32 = 16u;
const HAS_BIAS: u32 = 1u;
const ACCUMULATE: u32 = 2u;
const GELU: u32 = 4u;
const OP_A: u32 = 0u;
const OP_B: u32 = 1u;
const FWD: u32 = 0u;  // mm_loop's passes
const DINP: u32 = 1u;
const DW: u32 = 2u;

var<workgroup> As: array<vec4<f32>, 256>; // [k][m/4], BK × BM/4
var<workgroup> Bs: array<vec4<f32>, 256>; // [k][n/4], BK × BN/4

// ---------------------------------------------------------------- memory primitives
// Operand x: OP_A (binding 2) or OP_B (binding 3). read4 reads four consecutive
// elements from i, of which the first n are in bounds (zero beyond); write4 stores
// the first n of v at c[i..] (adding what is there when accumulating).

fn elem(x: u32, i: u32) -> f32 {
  if (x == OP_B) { return b[i]; }
  return a[i];
}

fn read4(x: u32, i: u32, n: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  for (var j = 0u; j < min(n, 4u); j++) { v[j] = elem(x, i + j); }
  return v;
}

fn write4(i: u32, v: vec4<f32>, n: u32) {
  let add = (p.flags & ACCUMULATE) != 0u;
  for (var j = 0u; j < min(n, 4u); j++) { c[i + j] = select(v[j], c[i + j] + v[j], add); }
}

// vec4: i is a multiple of 4 and all four are in bounds (the engine checks alignment)
fn elem_vec4(x: u32, i: u32) -> f32 {
  return read4_vec4(x, i - i % 4u, 4u)[i % 4u];
}

fn read4_vec4(x: u32, i: u32, n: u32) -> vec4<f32> {
  if (x == OP_B) { return b4[i / 4u]; }
  return a4[i / 4u];
}

fn write4_vec4(i: u32, v: vec4<f32>, n: u32) {
  c4[i / 4u] = select(v, c4[i / 4u] + v, (p.flags & ACCUMULATE) != 0u);
}

fn a_off(x: u32) -> u32 { return select(p.a_off, p.b_off, x == OP_B); }

// "k" order: element (r,k) at off + r·K + k (rows contiguous along K): thread → (r = lid/4, k = 4·(lid%4)).
// Stored transposed into [k][r].
fn put_k(tile: ptr<workgroup, array<vec4<f32>, 256>>, r: u32, kq: u32, v: vec4<f32>) {
  (*tile)[(kq + 0u) * 16u + r / 4u][r % 4u] = v.x;
  (*tile)[(kq + 1u) * 16u + r / 4u][r % 4u] = v.y;
  (*tile)[(kq + 2u) * 16u + r / 4u][r % 4u] = v.z;
  (*tile)[(kq + 3u) * 16u + r / 4u][r % 4u] = v.w;
}

// acc[i] holds out row (4·ty + i), columns 4·tx .. 4·tx+3 of the tile
fn mm_tile(acc: ptr<function, array<vec4<f32>, 4>>, tx: u32, ty: u32) {
  for (var k = 0u; k < BK; k++) {
    let av = As[k * 16u + ty];
    let bv = Bs[k * 16u + tx];
    (*acc)[0] = fma(vec4<f32>(av.x), bv, (*acc)[0]);
    (*acc)[1] = fma(vec4<f32>(av.y), bv, (*acc)[1]);
    (*acc)[2] = fma(vec4<f32>(av.z), bv, (*acc)[2]);
    (*acc)[3] = fma(vec4<f32>(av.w), bv, (*acc)[3]);
  }
}

// @repeat V = "", "_vec4"
// ---------------------------------------------------------------- tile loaders{{V}}
// "r" order: element (r,k) at off + k·R + r (contiguous along the row dim): thread → (k = lid/16, r = 4·(lid%16))

fn load_k{{V}}(tile: ptr<workgroup, array<vec4<f32>, 256>>, x: u32, r0: u32, R: u32, k0: u32, lid: u32) {
  let r = lid / 4u;
  let k = k0 + (lid % 4u) * 4u;
  var v = vec4<f32>(0.0);
  if (r0 + r < R && k < p.K) { v = read4{{V}}(x, a_off(x) + (r0 + r) * p.K + k, p.K - k); }
  put_k(tile, r, (lid % 4u) * 4u, v);
}

fn load_r{{V}}(tile: ptr<workgroup, array<vec4<f32>, 256>>, x: u32, r0: u32, R: u32, k0: u32, kend: u32, lid: u32) {
  let k = k0 + lid / 16u;
  let r = r0 + (lid % 16u) * 4u;
  var v = vec4<f32>(0.0);
  if (k < kend && r < R) { v = read4{{V}}(x, a_off(x) + k * R + r, R - r); }
  (*tile)[lid] = v;
}

fn store_c{{V}}(m0: u32, n0: u32, lid: u32, acc: array<vec4<f32>, 4>, c_base: u32) {
  let n = n0 + (lid % 16u) * 4u;
  if (n >= p.N) { return; }
  var bias = vec4<f32>(0.0);
  if ((p.flags & HAS_BIAS) != 0u) {
    let o = p.bias_off + n;
    for (var j = 0u; j < min(p.N - n, 4u); j++) { bias[j] = elem{{V}}(OP_B, o + j); }
  }
  for (var i = 0u; i < 4u; i++) {
    let m = m0 + (lid / 16u) * 4u + i;
    if (m >= p.M) { break; }
    let v = acc[i] + bias;
    write4{{V}}(c_base + m * p.N + n, v, p.N - n);
    // fused bias + GELU: the activation without a second pass over out (out stays for the backward)
    if ((p.flags & GELU) != 0u) { write4{{V}}(c_base + p.act_off + m * p.N + n, gelu(v), p.N - n); }
  }
}

// The K loop of every pass: A is (M,K) k-ordered, or (K,M) r-ordered for dW; B is (N,K)
// k-ordered for the forward, (K,N) r-ordered otherwise. `which` is a constant at each
// call, so the branches fold away.
fn mm_loop{{V}}(m0: u32, n0: u32, kbeg: u32, kend: u32, lid: u32, which: u32) -> array<vec4<f32>, 4> {
  var acc: array<vec4<f32>, 4>;
  for (var k0 = kbeg; k0 < kend; k0 += BK) {
    if (which == DW) { load_r{{V}}(&As, OP_A, m0, p.M, k0, kend, lid); } else { load_k{{V}}(&As, OP_A, m0, p.M, k0, lid); }
    if (which == FWD) { load_k{{V}}(&Bs, OP_B, n0, p.N, k0, lid); } else { load_r{{V}}(&Bs, OP_B, n0, p.N, k0, kend, lid); }
    workgroupBarrier();
    mm_tile(&acc, lid % 16u, lid / 16u);
    workgroupBarrier();
  }
  return acc;
}

// ---------------------------------------------------------------- entry points{{V}}. Grid (ceil(N/64), ceil(M/64)).

@compute @workgroup_size(256)
fn matmul_forward{{V}}(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let acc = mm_loop{{V}}(id.wid.y * BM, id.wid.x * BN, 0u, p.K, lid, FWD); // inp (M,K) · W (N,K)ᵀ
  store_c{{V}}(id.wid.y * BM, id.wid.x * BN, lid, acc, p.c_off);
}

@compute @workgroup_size(256)
fn matmul_backward_dinp{{V}}(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let acc = mm_loop{{V}}(id.wid.y * BM, id.wid.x * BN, 0u, p.K, lid, DINP); // dout (M,K) · W (K,N)
  store_c{{V}}(id.wid.y * BM, id.wid.x * BN, lid, acc, p.c_off);
}

// Grid (ceil(N/64), ceil(M/64), slices): slice z covers K rows [z·k_chunk, (z+1)·k_chunk)
// and writes at c_off + z·M·N.
@compute @workgroup_size(256)
fn matmul_backward_dweight{{V}}(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let kbeg = id.wid.z * p.k_chunk;
  let acc = mm_loop{{V}}(id.wid.y * BM, id.wid.x * BN, kbeg, min(p.K, kbeg + p.k_chunk), lid, DW); // doutᵀ (M,K) · inp (K,N)
  store_c{{V}}(id.wid.y * BM, id.wid.x * BN, lid, acc, p.c_off + id.wid.z * p.M * p.N);
}
// @end

// Sums the K slices of partials (M·N each, in `a`) in order: out (M,N) (+)= Σ_z a[z]. Out rows
// are bias_off apart (N for dW; the LayerNorm's weight and bias sit anywhere). One thread per element.
@compute @workgroup_size(256)
fn matmul_backward_dweight_reduce(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  let MN = p.M * p.N;
  if (i >= MN) { return; }
  var s = 0.0;
  for (var z = 0u; z < p.K; z++) { s += a[p.a_off + z * MN + i]; }
  write4(p.c_off + (i / p.N) * p.bias_off + i % p.N, vec4<f32>(s), 1u);
}

// Partial dbias of slice z: Σ a[m,n] over its rows, a = dout (M,N), into c at c_off + z·N
// (then matmul_backward_dweight_reduce). Workgroup = 64 columns × 4 row strides.
// Grid (ceil(N/64), slices).
@compute @workgroup_size(256)
fn matmul_backward_dbias(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let n = id.wid.x * 64u + lid % 64u;
  let mend = min(p.M, (id.wid.y + 1u) * p.k_chunk);
  var s = 0.0;
  if (n < p.N) {
    for (var m = id.wid.y * p.k_chunk + lid / 64u; m < mend; m += 4u) { s += a[p.a_off + m * p.N + n]; }
  }
  let t = wg_fold4(vec2<f32>(s, 0.0), lid);
  if (lid < 64u && n < p.N) { c[p.c_off + id.wid.y * p.N + n] = t.x; }
}
