// Causal multi-head self-attention, flash style. Twins: attentionForward / attentionBackward
// (core/model/ops.ts). inp (B,T,3C) holds q,k,v; out (B,T,C); head size HS = C/NH.
// No T×T matrix in memory: a workgroup owns BR rows of one (batch, head), one row per
// thread held in registers, and streams the other side through workgroup memory in tiles
// of BC rows. The forward keeps a running max and sum (online softmax) and stores only
// lse = max + log Σ exp per row; the backward recomputes the probabilities from it.
//   attention_forward       per query row: out, lse
//   attention_backward_dq   per query row: dq, and D = dout·out (kept for the next pass)
//   attention_backward_dkv  per key row: dk, dv, down the queries t ≥ key
// HS is written into the source per head size; rows are held as vec4s (dot, fma on 4 channels).

struct Params {
  B: u32,
  T: u32,
  C: u32,
  NH: u32,
  accumulate: u32, // backward: 1 adds into dinp (as the twin), 0 overwrites
  scale: f32,      // 1/sqrt(HS)
}

const HS: u32 = {{HS}}u;
const H4: u32 = (HS + 3u) / 4u; // vec4s per head row, zero past HS
const BR: u32 = 32u; // rows per workgroup, one per thread
const BC: u32 = select(16u, 32u, HS <= 32u); // rows per tile in workgroup memory (≤ BR; two tiles within 16 KiB)
const NEG: f32 = -3.402823e38;

alias Row = array<vec4<f32>, H4>;
alias Tile = array<vec4<f32>, BC * H4>;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;  // forward: (B,T,C)
@group(0) @binding(1) var<storage, read_write> dinp: array<f32>; // backward: (B,T,3C)
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;  // forward: (B,NH,T)
@group(0) @binding(2) var<storage, read_write> dsum: array<f32>; // dq writes D (B,NH,T), dkv reads it
@group(0) @binding(3) var<storage, read> inp: array<f32>;        // (B,T,3C)
@group(0) @binding(4) var<storage, read> lse_in: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;       // (B,T,C)
@group(0) @binding(6) var<storage, read> out_in: array<f32>;
// f16 storage (--precision f16, HS a multiple of 4): qkv and out as halves, 4 to a vec2<u32>
// (defines QKV and OUT, f32 or f16); lse, dout and dinp stay f32.
@group(0) @binding(1) var<storage, read_write> out_h: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> inp_h: array<vec2<u32>>;
@group(0) @binding(6) var<storage, read> out_in_h: array<vec2<u32>>;

var<workgroup> tile_a: Tile;
var<workgroup> tile_b: Tile;
var<workgroup> tile_s: array<vec2<f32>, BC>; // dkv: (lse, D) of the tile's queries

// Index of channel 0 of part `part` (0 q, 1 k, 2 v) of row t, head h, in inp.
fn qkv_at(b: u32, t: u32, h: u32, part: u32) -> u32 {
  return (b * p.T + t) * 3u * p.C + part * p.C + h * HS;
}

fn dout_at(b: u32, t: u32, h: u32) -> u32 {
  return (b * p.T + t) * p.C + h * HS;
}

// Channels 4·c4 .. 4·c4+3 of the head row at idx (zero past HS).
fn inp4(idx: u32, c4: u32) -> vec4<f32> { return inp4_{{QKV=f32}}(idx, c4); }

fn inp4_f32(idx: u32, c4: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  for (var k = 0u; k < 4u; k++) { if (c4 * 4u + k < HS) { v[k] = inp[idx + c4 * 4u + k]; } }
  return v;
}

fn unpack4h(x: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(x.x), unpack2x16float(x.y)); }
fn inp4_f16(idx: u32, c4: u32) -> vec4<f32> { return unpack4h(inp_h[idx / 4u + c4]); }

// The forward's output row at idx: stored, and read back by attention_backward_dq.
fn store_out_f32(idx: u32, o: ptr<function, Row>, l: f32) {
  for (var c = 0u; c < HS; c++) { out[idx + c] = (*o)[c / 4u][c % 4u] / l; }
}
fn store_out_f16(idx: u32, o: ptr<function, Row>, l: f32) {
  for (var i = 0u; i < H4; i++) {
    let v = (*o)[i] / l;
    out_h[idx / 4u + i] = vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
  }
}
fn out_dot_f32(idx: u32, g: ptr<function, Row>) -> f32 {
  var d = 0.0;
  for (var c = 0u; c < HS; c++) { d += (*g)[c / 4u][c % 4u] * out_in[idx + c]; }
  return d;
}
fn out_dot_f16(idx: u32, g: ptr<function, Row>) -> f32 {
  var d = 0.0;
  for (var i = 0u; i < H4; i++) { d += dot((*g)[i], unpack4h(out_in_h[idx / 4u + i])); }
  return d;
}

fn dout4(idx: u32, c4: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  for (var k = 0u; k < 4u; k++) { if (c4 * 4u + k < HS) { v[k] = dout[idx + c4 * 4u + k]; } }
  return v;
}

// Tiles of rows t0 .. t0+BC−1 (zero past T): part of inp, or dout.
fn load_inp(tile: ptr<workgroup, Tile>, b: u32, h: u32, t0: u32, part: u32, lid: u32) {
  for (var e = lid; e < BC * H4; e += BR) {
    let t = t0 + e / H4;
    (*tile)[e] = select(vec4<f32>(0.0), inp4(qkv_at(b, min(t, p.T - 1u), h, part), e % H4), t < p.T);
  }
}

fn load_dout(tile: ptr<workgroup, Tile>, b: u32, h: u32, t0: u32, lid: u32) {
  for (var e = lid; e < BC * H4; e += BR) {
    let t = t0 + e / H4;
    (*tile)[e] = select(vec4<f32>(0.0), dout4(dout_at(b, min(t, p.T - 1u), h), e % H4), t < p.T);
  }
}

fn dot_tile(x: ptr<function, Row>, tile: ptr<workgroup, Tile>, j: u32) -> f32 {
  var d = 0.0;
  for (var i = 0u; i < H4; i++) { d += dot((*x)[i], (*tile)[j * H4 + i]); }
  return d;
}

fn axpy_tile(y: ptr<function, Row>, a: f32, tile: ptr<workgroup, Tile>, j: u32) {
  for (var i = 0u; i < H4; i++) { (*y)[i] += a * (*tile)[j * H4 + i]; }
}

// (x·tile_a[j], y·tile_b[j]) in one pass over the channels
fn dot2_tiles(x: ptr<function, Row>, y: ptr<function, Row>, j: u32) -> vec2<f32> {
  var d = vec2<f32>(0.0);
  for (var i = 0u; i < H4; i++) { d += vec2<f32>(dot((*x)[i], tile_a[j * H4 + i]), dot((*y)[i], tile_b[j * H4 + i])); }
  return d;
}

// A workgroup's rows: batch b, head h (bh = b·NH + h), rows t0 .. t0+BR−1.
struct Block {
  b: u32,
  h: u32,
  bh: u32,
  t0: u32,
}

fn block_of(id: Grid) -> Block {
  return Block(id.wid.y / p.NH, id.wid.y % p.NH, id.wid.y, id.wid.x * BR);
}

// The keys (tile_a) and values (tile_b) of rows [k0, k0 + BC) of the block's (batch, head), then a barrier.
fn load_kv(w: Block, k0: u32, lid: u32) {
  load_inp(&tile_a, w.b, w.h, k0, 1u, lid);
  load_inp(&tile_b, w.b, w.h, k0, 2u, lid);
  workgroupBarrier();
}

fn store_grad(idx: u32, g: ptr<function, Row>, scale: f32) {
  for (var c = 0u; c < HS; c++) {
    let v = (*g)[c / 4u][c % 4u] * scale;
    dinp[idx + c] = select(v, dinp[idx + c] + v, p.accumulate != 0u);
  }
}

// Grid (ceil(T/BR), B·NH).
@compute @workgroup_size(32)
fn attention_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = block_of(id);
  let t = w.t0 + lid;
  let r = min(t, p.T - 1u); // rows past T compute on row T−1 and store nothing
  var m = NEG; // running max and sum of exp(score − m)
  var l = 0.0;
  var q: Row;
  var o: Row;
  for (var i = 0u; i < H4; i++) { q[i] = inp4(qkv_at(w.b, r, w.h, 0u), i) * p.scale; }
  for (var k0 = 0u; k0 < min(w.t0 + BR, p.T); k0 += BC) {
    load_kv(w, k0, lid);
    // the keys ≤ t, the max and sum updated per key (an array of the tile's scores, indexed
    // dynamically, cost more than the second exp on a CPU adapter)
    for (var j = 0u; j < min(BC, t + 1u - min(k0, t + 1u)); j++) {
      let sj = dot_tile(&q, &tile_a, j);
      let mt = max(m, sj);
      let corr = exp(m - mt);
      let pj = exp(sj - mt);
      l = l * corr + pj;
      for (var i = 0u; i < H4; i++) { o[i] = o[i] * corr + pj * tile_b[j * H4 + i]; }
      m = mt;
    }
    workgroupBarrier();
  }
  if (t < p.T) {
    store_out_{{OUT=f32}}(dout_at(w.b, t, w.h), &o, l);
    lse[w.bh * p.T + t] = m + log(l);
  }
}

// dq = scale·Σ_k ds·k with ds = P ⊙ (dout·v − D), P = exp(scale·q·k − lse). Grid (ceil(T/BR), B·NH).
@compute @workgroup_size(32)
fn attention_backward_dq(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = block_of(id);
  let t = w.t0 + lid;
  let r = min(t, p.T - 1u); // rows past T compute on row T−1 and store nothing
  var q: Row;
  var g: Row;
  var dq: Row;
  var d = 0.0;
  for (var i = 0u; i < H4; i++) {
    q[i] = inp4(qkv_at(w.b, r, w.h, 0u), i) * p.scale;
    g[i] = dout4(dout_at(w.b, r, w.h), i);
  }
  d = out_dot_{{OUT=f32}}(dout_at(w.b, r, w.h), &g);
  let L = lse_in[w.bh * p.T + r];
  for (var k0 = 0u; k0 < min(w.t0 + BR, p.T); k0 += BC) {
    load_kv(w, k0, lid);
    for (var j = 0u; j < min(BC, t + 1u - min(k0, t + 1u)); j++) {
      let qk_gv = dot2_tiles(&q, &g, j);
      axpy_tile(&dq, exp(qk_gv.x - L) * (qk_gv.y - d), &tile_a, j);
    }
    workgroupBarrier();
  }
  if (t < p.T) {
    store_grad(qkv_at(w.b, t, w.h, 0u), &dq, p.scale);
    dsum[w.bh * p.T + t] = d;
  }
}

// dv = Σ_{t ≥ key} P·dout, dk = scale·Σ ds·q. Runs after attention_backward_dq (reads D).
// Grid (ceil(T/BR), B·NH).
@compute @workgroup_size(32)
fn attention_backward_dkv(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = block_of(id);
  let t2 = w.t0 + lid;
  let r = min(t2, p.T - 1u);
  var k: Row;
  var v: Row;
  var dk: Row;
  var dv: Row;
  for (var i = 0u; i < H4; i++) {
    k[i] = inp4(qkv_at(w.b, r, w.h, 1u), i) * p.scale;
    v[i] = inp4(qkv_at(w.b, r, w.h, 2u), i);
  }
  for (var q0 = w.t0; q0 < p.T; q0 += BC) {
    load_inp(&tile_a, w.b, w.h, q0, 0u, lid);
    load_dout(&tile_b, w.b, w.h, q0, lid);
    if (lid < BC) {
      let t = min(q0 + lid, p.T - 1u);
      tile_s[lid] = vec2<f32>(lse_in[w.bh * p.T + t], dsum[w.bh * p.T + t]);
    }
    workgroupBarrier();
    for (var j = max(t2, q0) - q0; j < min(BC, p.T - q0); j++) {
      let kq_vg = dot2_tiles(&k, &v, j);
      let pj = exp(kq_vg.x - tile_s[j].x);
      let ds = pj * (kq_vg.y - tile_s[j].y);
      for (var i = 0u; i < H4; i++) {
        dv[i] += pj * tile_b[j * H4 + i];
        dk[i] += ds * tile_a[j * H4 + i];
      }
    }
    workgroupBarrier();
  }
  if (t2 < p.T) {
    store_grad(qkv_at(w.b, t2, w.h, 1u), &dk, p.scale);
    store_grad(qkv_at(w.b, t2, w.h, 2u), &dv, 1.0);
  }
}
