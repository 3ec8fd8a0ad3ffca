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
// The *_vec4 entry points load/store vec4 from global memory; the engine uses them when
// the contiguous dims and offsets are multiples of 4. The scalar ones handle any shape.
// Edges (M, N, K not multiples of the tile) are zero-padded in the tiles and masked on store.

struct Params {
  M: u32,
  N: u32,
  K: u32,
  flags: u32,     // 1: add bias (forward), 2: accumulate into out (backward, as the twin)
  a_off: u32,     // element offsets into the bound buffers
  b_off: u32,
  c_off: u32,
  bias_off: u32,  // bias lives in the same buffer as W (params)
  k_chunk: u32,   // dweight: K rows per grid-z slice (= K when not split)
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

var<workgroup> As: array<vec4<f32>, 256>; // [k][m/4], BK × BM/4
var<workgroup> Bs: array<vec4<f32>, 256>; // [k][n/4], BK × BN/4
var<workgroup> red: array<f32, 256>;

// ---------------------------------------------------------------- tile loaders
// "k" order: element (r,k) at off + r·K + k (rows contiguous along K): thread → (r = lid/4, k = 4·(lid%4))
// "r" order: element (r,k) at off + k·R + r (contiguous along the row dim): thread → (k = lid/16, r = 4·(lid%16))

fn put_k(tile: ptr<workgroup, array<vec4<f32>, 256>>, r: u32, kq: u32, v: vec4<f32>) {
  // transpose four k values of row r into [k][r]
  (*tile)[(kq + 0u) * 16u + r / 4u][r % 4u] = v.x;
  (*tile)[(kq + 1u) * 16u + r / 4u][r % 4u] = v.y;
  (*tile)[(kq + 2u) * 16u + r / 4u][r % 4u] = v.z;
  (*tile)[(kq + 3u) * 16u + r / 4u][r % 4u] = v.w;
}

fn load_a_k(m0: u32, k0: u32, lid: u32) {
  let r = lid / 4u;
  let k = k0 + (lid % 4u) * 4u;
  let m = m0 + r;
  var v = vec4<f32>(0.0);
  if (m < p.M) {
    let base = p.a_off + m * p.K + k;
    for (var j = 0u; j < 4u; j++) { if (k + j < p.K) { v[j] = a[base + j]; } }
  }
  put_k(&As, r, (lid % 4u) * 4u, v);
}

fn load_a_k4(m0: u32, k0: u32, lid: u32) {
  let r = lid / 4u;
  let k = k0 + (lid % 4u) * 4u;
  let m = m0 + r;
  var v = vec4<f32>(0.0);
  if (m < p.M && k < p.K) { v = a4[(p.a_off + m * p.K + k) / 4u]; }
  put_k(&As, r, (lid % 4u) * 4u, v);
}

fn load_a_r(m0: u32, k0: u32, kend: u32, lid: u32) {
  let k = k0 + lid / 16u;
  let m = m0 + (lid % 16u) * 4u;
  var v = vec4<f32>(0.0);
  if (k < kend) {
    let base = p.a_off + k * p.M + m;
    for (var j = 0u; j < 4u; j++) { if (m + j < p.M) { v[j] = a[base + j]; } }
  }
  As[lid] = v;
}

fn load_a_r4(m0: u32, k0: u32, kend: u32, lid: u32) {
  let k = k0 + lid / 16u;
  let m = m0 + (lid % 16u) * 4u;
  var v = vec4<f32>(0.0);
  if (k < kend && m < p.M) { v = a4[(p.a_off + k * p.M + m) / 4u]; }
  As[lid] = v;
}

fn load_b_k(n0: u32, k0: u32, lid: u32) {
  let r = lid / 4u;
  let k = k0 + (lid % 4u) * 4u;
  let n = n0 + r;
  var v = vec4<f32>(0.0);
  if (n < p.N) {
    let base = p.b_off + n * p.K + k;
    for (var j = 0u; j < 4u; j++) { if (k + j < p.K) { v[j] = b[base + j]; } }
  }
  put_k(&Bs, r, (lid % 4u) * 4u, v);
}

fn load_b_k4(n0: u32, k0: u32, lid: u32) {
  let r = lid / 4u;
  let k = k0 + (lid % 4u) * 4u;
  let n = n0 + r;
  var v = vec4<f32>(0.0);
  if (n < p.N && k < p.K) { v = b4[(p.b_off + n * p.K + k) / 4u]; }
  put_k(&Bs, r, (lid % 4u) * 4u, v);
}

fn load_b_r(n0: u32, k0: u32, kend: u32, lid: u32) {
  let k = k0 + lid / 16u;
  let n = n0 + (lid % 16u) * 4u;
  var v = vec4<f32>(0.0);
  if (k < kend) {
    let base = p.b_off + k * p.N + n;
    for (var j = 0u; j < 4u; j++) { if (n + j < p.N) { v[j] = b[base + j]; } }
  }
  Bs[lid] = v;
}

fn load_b_r4(n0: u32, k0: u32, kend: u32, lid: u32) {
  let k = k0 + lid / 16u;
  let n = n0 + (lid % 16u) * 4u;
  var v = vec4<f32>(0.0);
  if (k < kend && n < p.N) { v = b4[(p.b_off + k * p.N + n) / 4u]; }
  Bs[lid] = v;
}

// ---------------------------------------------------------------- compute and store

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

fn store_c(m0: u32, n0: u32, lid: u32, acc: array<vec4<f32>, 4>, c_base: u32) {
  let tx = lid % 16u;
  let ty = lid / 16u;
  for (var i = 0u; i < 4u; i++) {
    let m = m0 + ty * 4u + i;
    if (m >= p.M) { break; }
    for (var j = 0u; j < 4u; j++) {
      let n = n0 + tx * 4u + j;
      if (n >= p.N) { break; }
      var v = acc[i][j];
      if ((p.flags & HAS_BIAS) != 0u) { v += b[p.bias_off + n]; }
      let idx = c_base + m * p.N + n;
      if ((p.flags & ACCUMULATE) != 0u) { v += c[idx]; }
      c[idx] = v;
    }
  }
}

fn store_c4(m0: u32, n0: u32, lid: u32, acc: array<vec4<f32>, 4>, c_base: u32) {
  let tx = lid % 16u;
  let ty = lid / 16u;
  let n = n0 + tx * 4u;
  if (n >= p.N) { return; }
  var bias = vec4<f32>(0.0);
  if ((p.flags & HAS_BIAS) != 0u) {
    let o = p.bias_off + n;
    bias = vec4<f32>(b4[o / 4u][o % 4u], b4[(o + 1u) / 4u][(o + 1u) % 4u],
                     b4[(o + 2u) / 4u][(o + 2u) % 4u], b4[(o + 3u) / 4u][(o + 3u) % 4u]);
  }
  for (var i = 0u; i < 4u; i++) {
    let m = m0 + ty * 4u + i;
    if (m >= p.M) { break; }
    let idx = (c_base + m * p.N + n) / 4u;
    var v = acc[i] + bias;
    if ((p.flags & ACCUMULATE) != 0u) { v += c4[idx]; }
    c4[idx] = v;
  }
}

// ---------------------------------------------------------------- entry points. Grid (ceil(N/64), ceil(M/64)).

@compute @workgroup_size(256)
fn matmul_forward(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  var acc: array<vec4<f32>, 4>;
  for (var k0 = 0u; k0 < p.K; k0 += BK) {
    load_a_k(m0, k0, lid);
    load_b_k(n0, k0, lid);
    workgroupBarrier();
    mm_tile(&acc, lid % 16u, lid / 16u);
    workgroupBarrier();
  }
  store_c(m0, n0, lid, acc, p.c_off);
}

@compute @workgroup_size(256)
fn matmul_forward_vec4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  var acc: array<vec4<f32>, 4>;
  for (var k0 = 0u; k0 < p.K; k0 += BK) {
    load_a_k4(m0, k0, lid);
    load_b_k4(n0, k0, lid);
    workgroupBarrier();
    mm_tile(&acc, lid % 16u, lid / 16u);
    workgroupBarrier();
  }
  store_c4(m0, n0, lid, acc, p.c_off);
}

@compute @workgroup_size(256)
fn matmul_backward_dinp(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  var acc: array<vec4<f32>, 4>;
  for (var k0 = 0u; k0 < p.K; k0 += BK) {
    load_a_k(m0, k0, lid);  // dout (M,K)
    load_b_r(n0, k0, p.K, lid);  // W (K,N)
    workgroupBarrier();
    mm_tile(&acc, lid % 16u, lid / 16u);
    workgroupBarrier();
  }
  store_c(m0, n0, lid, acc, p.c_off);
}

@compute @workgroup_size(256)
fn matmul_backward_dinp_vec4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  var acc: array<vec4<f32>, 4>;
  for (var k0 = 0u; k0 < p.K; k0 += BK) {
    load_a_k4(m0, k0, lid);
    load_b_r4(n0, k0, p.K, lid);
    workgroupBarrier();
    mm_tile(&acc, lid % 16u, lid / 16u);
    workgroupBarrier();
  }
  store_c4(m0, n0, lid, acc, p.c_off);
}

// Grid (ceil(N/64), ceil(M/64), slices): slice z covers K rows [z·k_chunk, (z+1)·k_chunk)
// and writes at c_off + z·M·N.
@compute @workgroup_size(256)
fn matmul_backward_dweight(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  let kbeg = wid.z * p.k_chunk;
  let kend = min(p.K, kbeg + p.k_chunk);
  var acc: array<vec4<f32>, 4>;
  for (var k0 = kbeg; k0 < kend; k0 += BK) {
    load_a_r(m0, k0, kend, lid);  // dout (K,M) read as doutᵀ
    load_b_r(n0, k0, kend, lid);  // inp (K,N)
    workgroupBarrier();
    mm_tile(&acc, lid % 16u, lid / 16u);
    workgroupBarrier();
  }
  store_c(m0, n0, lid, acc, p.c_off + wid.z * p.M * p.N);
}

@compute @workgroup_size(256)
fn matmul_backward_dweight_vec4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  let kbeg = wid.z * p.k_chunk;
  let kend = min(p.K, kbeg + p.k_chunk);
  var acc: array<vec4<f32>, 4>;
  for (var k0 = kbeg; k0 < kend; k0 += BK) {
    load_a_r4(m0, k0, kend, lid);
    load_b_r4(n0, k0, kend, lid);
    workgroupBarrier();
    mm_tile(&acc, lid % 16u, lid / 16u);
    workgroupBarrier();
  }
  store_c4(m0, n0, lid, acc, p.c_off + wid.z * p.M * p.N);
}

// dW (+)= Σ_z partial[z] over K = slices partials (M·N each, in `a`), one thread per element.
@compute @workgroup_size(256)
fn matmul_backward_dweight_reduce(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                                  @builtin(local_invocation_index) lid: u32) {
  let i = (wid.y * nwg.x + wid.x) * 256u + lid;
  let MN = p.M * p.N;
  if (i >= MN) { return; }
  var s = 0.0;
  for (var z = 0u; z < p.K; z++) { s += a[p.a_off + z * MN + i]; }
  let idx = p.c_off + i;
  c[idx] = select(s, c[idx] + s, (p.flags & ACCUMULATE) != 0u);
}

// dbias[n] (+)= Σ_m a[m,n], a = dout (M,N). Workgroup = 64 columns × 4 row slices. Grid ceil(N/64).
@compute @workgroup_size(256)
fn matmul_backward_dbias(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let n = wid.x * 64u + lid % 64u;
  let slice = lid / 64u;
  var s = 0.0;
  if (n < p.N) {
    for (var m = slice; m < p.M; m += 4u) { s += a[p.a_off + m * p.N + n]; }
  }
  red[lid] = s;
  workgroupBarrier();
  if (lid < 64u && n < p.N) {
    let t = (red[lid] + red[lid + 64u]) + (red[lid + 128u] + red[lid + 192u]);
    let idx = p.c_off + n;
    c[idx] = select(t, c[idx] + t, (p.flags & ACCUMULATE) != 0u);
  }
}
