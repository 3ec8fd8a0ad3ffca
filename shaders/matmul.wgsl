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
// Tiling (the default, for real GPUs): a workgroup of 256 threads computes a 64×64 output
// tile, each thread a 4×4 register block; K advances in steps of 16 through two workgroup
// tiles (8 KiB) stored k-major so the inner loop reads one vec4 of A and one of B per
// k and does 16 FMAs. Every thread moves one vec4 of each tile per K step. Other tile
// sizes and rows per thread, and the direct kernels (no workgroup memory), are variants
// of the same source (defines below) that the autotuner (client/island/engine/webgpu-tune.ts) times.
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
  bias_off: u32,  // the bias, in its own binding (bias_*: params or the weight copy, as W)
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
// f16 storage (--precision f16; vec4 variants only): an operand as halves, 4 to a vec2<u32>
@group(0) @binding(1) var<storage, read_write> c_h: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read> a_h: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> b_h: array<vec2<u32>>;
// the forward's bias (N): a binding of its own, so W's binding holds only W (the others bind a stand-in, unread)
@group(0) @binding(4) var<storage, read> bias_f: array<f32>;
@group(0) @binding(4) var<storage, read> bias_v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> bias_h: array<vec2<u32>>;

// The tile, one variant per define set (the autotuner's choice; defaults as described above):
// BM × BN outputs per workgroup, TM rows × 4 columns per thread; the direct kernels use
// DX × DY threads of TM × 4·CN outputs instead.
const BM: u32 = {{BM=64}}u;
const BN: u32 = {{BN=64}}u;
const TM: u32 = {{TM=4}}u;
const BK: u32 = 16u;
const TX: u32 = BN / 4u;        // threads across the tile's columns
const WG: u32 = BM / TM * TX;   // threads per workgroup
const DX: u32 = {{DX=8}}u;
const DY: u32 = {{DY=8}}u;
const CN: u32 = {{CN=1}}u;      // direct: groups of 4 columns per thread (1 for the tiled kernels)
const HAS_BIAS: u32 = 1u;
const ACCUMULATE: u32 = 2u;
const GELU: u32 = 4u;
const OP_A: u32 = 0u;
const OP_B: u32 = 1u;
const FWD: u32 = 0u;  // mm_loop's passes
const DINP: u32 = 1u;
const DW: u32 = 2u;

var<workgroup> As: array<vec4<f32>, BK * BM / 4u>; // [k][m/4]
var<workgroup> Bs: array<vec4<f32>, BK * BN / 4u>; // [k][n/4]

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

// Each operand's storage, f32 or f16, is a define (A4, B4, C4): the forward reads its input
// and the weight copy as halves and may store halves; the backward reads the forward's input
// and the weight copy as halves; gradients are always f32.
fn read4_vec4(x: u32, i: u32, n: u32) -> vec4<f32> {
  if (x == OP_B) { return b4_{{B4=f32}}(i / 4u); }
  return a4_{{A4=f32}}(i / 4u);
}

fn write4_vec4(i: u32, v: vec4<f32>, n: u32) {
  let j = i / 4u;
  c4_set_{{C4=f32}}(j, select(v, c4_get_{{C4=f32}}(j) + v, (p.flags & ACCUMULATE) != 0u));
}

fn unpack4h(x: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(x.x), unpack2x16float(x.y)); }
fn pack4h(v: vec4<f32>) -> vec2<u32> { return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)); }
fn a4_f32(j: u32) -> vec4<f32> { return a4[j]; }
fn a4_f16(j: u32) -> vec4<f32> { return unpack4h(a_h[j]); }
fn b4_f32(j: u32) -> vec4<f32> { return b4[j]; }
fn b4_f16(j: u32) -> vec4<f32> { return unpack4h(b_h[j]); }
fn c4_get_f32(j: u32) -> vec4<f32> { return c4[j]; }
fn c4_get_f16(j: u32) -> vec4<f32> { return unpack4h(c_h[j]); }
fn c4_set_f32(j: u32, v: vec4<f32>) { c4[j] = v; }
fn c4_set_f16(j: u32, v: vec4<f32>) { c_h[j] = pack4h(v); }
// bias element i, from f32 (scalar variant), or the vec4 of f32 or halves (B4) holding it
fn bias_at(i: u32) -> f32 { return bias_f[i]; }
fn bias_at_vec4(i: u32) -> f32 { return bias_v4_{{B4=f32}}(i / 4u)[i % 4u]; }
fn bias_v4_f32(j: u32) -> vec4<f32> { return bias_v[j]; }
fn bias_v4_f16(j: u32) -> vec4<f32> { return unpack4h(bias_h[j]); }

fn a_off(x: u32) -> u32 { return select(p.a_off, p.b_off, x == OP_B); }

// Operand x's tile (OP_A: As, OP_B: Bs), w vec4 per k row.
fn tile_width(x: u32) -> u32 { return select(BM, BN, x == OP_B) / 4u; }

fn tile_set(x: u32, i: u32, v: vec4<f32>) {
  if (x == OP_B) { Bs[i] = v; } else { As[i] = v; }
}

// "k" order: element (r,k) at off + r·K + k (rows contiguous along K), read 4 k at a time
// and stored transposed into [k][r].
fn put_k(x: u32, r: u32, kq: u32, v: vec4<f32>) {
  let w = tile_width(x);
  for (var j = 0u; j < 4u; j++) {
    let i = (kq + j) * w + r / 4u;
    if (x == OP_B) { Bs[i][r % 4u] = v[j]; } else { As[i][r % 4u] = v[j]; }
  }
}

// A thread's TM × 4·CN outputs: acc[g·CN + q][r] is its row 4g + r, columns 4q..4q+3 (a vec4).
// Four rows per mat4x4 keep every index but g constant (a dynamic index costs dear on a CPU adapter).
alias Acc = array<mat4x4<f32>, TM / 4u * CN>;

// acc[g][r] holds out row (TM·ty + 4g + r), columns 4·tx .. 4·tx+3 of the tile
fn mm_tile(acc: ptr<function, Acc>, tx: u32, ty: u32) {
  for (var k = 0u; k < BK; k++) {
    let bv = Bs[k * TX + tx];
    for (var g = 0u; g < TM / 4u; g++) {
      let av = As[k * (BM / 4u) + ty * (TM / 4u) + g];
      (*acc)[g] += mat4x4<f32>(bv * av.x, bv * av.y, bv * av.z, bv * av.w);
    }
  }
}

// @repeat V = "", "_vec4"
// ---------------------------------------------------------------- tile loaders{{V}}
// "r" order: element (r,k) at off + k·R + r (contiguous along the row dim): thread → (k = lid/16, r = 4·(lid%16))

// Each thread moves vec4 slots lid, lid + WG, ... of the tile.
fn load_k{{V}}(x: u32, r0: u32, R: u32, k0: u32, lid: u32) {
  for (var s = lid; s < tile_width(x) * 16u; s += WG) {
    let r = s / 4u;
    let k = k0 + (s % 4u) * 4u;
    var v = vec4<f32>(0.0);
    if (r0 + r < R && k < p.K) { v = read4{{V}}(x, a_off(x) + (r0 + r) * p.K + k, p.K - k); }
    put_k(x, r, (s % 4u) * 4u, v);
  }
}

fn load_r{{V}}(x: u32, r0: u32, R: u32, k0: u32, kend: u32, lid: u32) {
  let w = tile_width(x);
  for (var s = lid; s < w * BK; s += WG) {
    let k = k0 + s / w;
    let r = r0 + (s % w) * 4u;
    var v = vec4<f32>(0.0);
    if (k < kend && r < R) { v = read4{{V}}(x, a_off(x) + k * R + r, R - r); }
    tile_set(x, s, v);
  }
}

fn bias4{{V}}(n: u32) -> vec4<f32> {
  var bias = vec4<f32>(0.0);
  if ((p.flags & HAS_BIAS) != 0u) {
    for (var j = 0u; j < min(p.N - n, 4u); j++) { bias[j] = bias_at{{V}}(p.bias_off + n + j); }
  }
  return bias;
}

// out row m, columns n..n+3 (v has the bias added)
fn store_row{{V}}(c_base: u32, m: u32, n: u32, v: vec4<f32>) {
  write4{{V}}(c_base + m * p.N + n, v, p.N - n);
  // fused bias + GELU: the activation without a second pass over out (out stays for the backward)
  if ((p.flags & GELU) != 0u) { write4{{V}}(c_base + p.act_off + m * p.N + n, gelu(v), p.N - n); }
}

// TM rows from m0, columns n..n+4·CN-1
fn store_c{{V}}(m0: u32, n: u32, acc: Acc, c_base: u32) {
  for (var q = 0u; q < CN; q++) {
    let nq = n + 4u * q;
    if (nq >= p.N) { return; }
    let bias = bias4{{V}}(nq);
    for (var i = 0u; i < min(p.M - min(m0, p.M), TM); i++) {
      store_row{{V}}(c_base, m0 + i, nq, acc[i / 4u * CN + q][i % 4u] + bias);
    }
  }
}

// The K loop of every pass: A is (M,K) k-ordered, or (K,M) r-ordered for dW; B is (N,K)
// k-ordered for the forward, (K,N) r-ordered otherwise. `which` is a constant at each
// call, so the branches fold away.
fn mm_loop{{V}}(m0: u32, n0: u32, kbeg: u32, kend: u32, lid: u32, which: u32) -> Acc {
  var acc: Acc;
  for (var k0 = kbeg; k0 < kend; k0 += BK) {
    if (which == DW) { load_r{{V}}(OP_A, m0, p.M, k0, kend, lid); } else { load_k{{V}}(OP_A, m0, p.M, k0, lid); }
    if (which == FWD) { load_k{{V}}(OP_B, n0, p.N, k0, lid); } else { load_r{{V}}(OP_B, n0, p.N, k0, kend, lid); }
    workgroupBarrier();
    mm_tile(&acc, lid % TX, lid / TX);
    workgroupBarrier();
  }
  return acc;
}


// ---------------------------------------------------------------- entry points{{V}}. Grid (ceil(N/64), ceil(M/64)).

@compute @workgroup_size(WG)
fn matmul_forward{{V}}(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let acc = mm_loop{{V}}(id.wid.y * BM, id.wid.x * BN, 0u, p.K, lid, FWD); // inp (M,K) · W (N,K)ᵀ
  store_c{{V}}(id.wid.y * BM + (lid / TX) * TM, id.wid.x * BN + (lid % TX) * 4u, acc, p.c_off);
}

@compute @workgroup_size(WG)
fn matmul_backward_dinp{{V}}(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let acc = mm_loop{{V}}(id.wid.y * BM, id.wid.x * BN, 0u, p.K, lid, DINP); // dout (M,K) · W (K,N)
  store_c{{V}}(id.wid.y * BM + (lid / TX) * TM, id.wid.x * BN + (lid % TX) * 4u, acc, p.c_off);
}

// Grid (ceil(N/64), ceil(M/64), slices): slice z covers K rows [z·k_chunk, (z+1)·k_chunk)
// and writes at c_off + z·M·N.
@compute @workgroup_size(WG)
fn matmul_backward_dweight{{V}}(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let kbeg = id.wid.z * p.k_chunk;
  // doutᵀ (M,K) · inp (K,N)
  let acc = mm_loop{{V}}(id.wid.y * BM, id.wid.x * BN, kbeg, min(p.K, kbeg + p.k_chunk), lid, DW);
  store_c{{V}}(id.wid.y * BM + (lid / TX) * TM, id.wid.x * BN + (lid % TX) * 4u, acc, p.c_off + id.wid.z * p.M * p.N);
}

// ---------------------------------------------------------------- direct{{V}}: no workgroup memory, no barrier
// Each thread computes a TM × 4·CN block of out straight from the operands, 4 k at a time;
// a workgroup of DX × DY threads covers (DY·TM) rows × (DX·4·CN) columns. For adapters where
// barriers cost more than re-reading cached operands (a CPU: SwiftShader); the autotuner decides.
// Per 4 k, as mat4x4 (columns): bk[q] = B rows k..k+3 at n+4q..n+4q+3 (forward: Wᵀ), a = A
// rows 4g.. at k..k+3 (dW: Aᵀ), and acc[g·CN + q] += bk[q] · a (a read once for CN groups).
fn mm_direct{{V}}(m0: u32, n: u32, kbeg: u32, kend: u32, which: u32) -> Acc {
  var acc: Acc;
  if (n >= p.N) { return acc; }
  let mn = min(p.M - min(m0, p.M), TM);
  for (var k = kbeg; k < kend; k += 4u) {
    let kn = min(kend - k, 4u);
    var bk: array<mat4x4<f32>, CN>;
    for (var q = 0u; q < CN; q++) {
      let nq = n + 4u * q;
      if (which == FWD) { // W rows n+j along k
        bk[q] = transpose(mat4x4<f32>(rd_k{{V}}(OP_B, nq, p.N, k, kn), rd_k{{V}}(OP_B, nq + 1u, p.N, k, kn),
                                      rd_k{{V}}(OP_B, nq + 2u, p.N, k, kn), rd_k{{V}}(OP_B, nq + 3u, p.N, k, kn)));
      } else {
        bk[q] = mat4x4<f32>(rd_r{{V}}(OP_B, nq, p.N, k, 0u, kn), rd_r{{V}}(OP_B, nq, p.N, k, 1u, kn),
                            rd_r{{V}}(OP_B, nq, p.N, k, 2u, kn), rd_r{{V}}(OP_B, nq, p.N, k, 3u, kn));
      }
    }
    for (var g = 0u; 4u * g < mn; g++) {
      let r = m0 + 4u * g;
      var a: mat4x4<f32>;
      if (which == DW) { // doutᵀ: rows r..r+3 of column k+j are contiguous
        a = transpose(mat4x4<f32>(rd_r{{V}}(OP_A, r, p.M, k, 0u, kn), rd_r{{V}}(OP_A, r, p.M, k, 1u, kn),
                                  rd_r{{V}}(OP_A, r, p.M, k, 2u, kn), rd_r{{V}}(OP_A, r, p.M, k, 3u, kn)));
      } else {
        a = mat4x4<f32>(rd_k{{V}}(OP_A, r, p.M, k, kn), rd_k{{V}}(OP_A, r + 1u, p.M, k, kn),
                        rd_k{{V}}(OP_A, r + 2u, p.M, k, kn), rd_k{{V}}(OP_A, r + 3u, p.M, k, kn));
      }
      for (var q = 0u; q < CN; q++) { acc[g * CN + q] += bk[q] * a; }
    }
  }
  return acc;
}

// Operand x's row r at k..k+3 ("k" order, kn of them valid), or zero past row R.
fn rd_k{{V}}(x: u32, r: u32, R: u32, k: u32, kn: u32) -> vec4<f32> {
  if (r >= R) { return vec4<f32>(0.0); }
  return read4{{V}}(x, a_off(x) + r * p.K + k, kn);
}

// Operand x's rows r..r+3 at k + j ("r" order, rows R long), or zero where j ≥ kn or r ≥ R.
fn rd_r{{V}}(x: u32, r: u32, R: u32, k: u32, j: u32, kn: u32) -> vec4<f32> {
  if (j >= kn || r >= R) { return vec4<f32>(0.0); }
  return read4{{V}}(x, a_off(x) + (k + j) * R + r, R - r);
}

// Grid (ceil(N/(4·DX)), ceil(M/(TM·DY)), slices); dweight's slices as the tiled one's.
@compute @workgroup_size(DX, DY)
fn matmul_forward_direct{{V}}(id: Grid, @builtin(local_invocation_id) l: vec3u) {
  let m0 = (id.wid.y * DY + l.y) * TM;
  let n = (id.wid.x * DX + l.x) * 4u * CN;
  store_c{{V}}(m0, n, mm_direct{{V}}(m0, n, 0u, p.K, FWD), p.c_off);
}

@compute @workgroup_size(DX, DY)
fn matmul_backward_dinp_direct{{V}}(id: Grid, @builtin(local_invocation_id) l: vec3u) {
  let m0 = (id.wid.y * DY + l.y) * TM;
  let n = (id.wid.x * DX + l.x) * 4u * CN;
  store_c{{V}}(m0, n, mm_direct{{V}}(m0, n, 0u, p.K, DINP), p.c_off);
}

@compute @workgroup_size(DX, DY)
fn matmul_backward_dweight_direct{{V}}(id: Grid, @builtin(local_invocation_id) l: vec3u) {
  let m0 = (id.wid.y * DY + l.y) * TM;
  let n = (id.wid.x * DX + l.x) * 4u * CN;
  let kbeg = id.wid.z * p.k_chunk;
  store_c{{V}}(m0, n, mm_direct{{V}}(m0, n, kbeg, min(p.K, kbeg + p.k_chunk), DW), p.c_off + id.wid.z * p.M * p.N);
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
