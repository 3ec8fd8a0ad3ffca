// Causal multi-head self-attention, flash style, in 4×4 register tiles (mat4x4). Twins:
// attentionForward / attentionBackward (core/model/ops.ts). inp (B,T,3C) holds q,k,v;
// out (B,T,C); head size HS = C/NH, a multiple of 4.
// No T×T matrix in memory and no workgroup memory: a thread owns 4 consecutive rows of one
// (batch, head) and walks the other side 4 rows at a time straight from storage. Channels go
// 4 at a time as mat4x4s whose columns are the 4 rows (a "chunk"), so a 4×4 block of scores is
// a sum of H4 mat4x4 products, and so are the updates of the 4 rows' outputs and gradients:
// every value read is used 4 times from registers. The forward keeps a running max and sum
// per row (online softmax) and stores only lse = max + log Σ exp; the backward recomputes
// the probabilities from it.
//   attention_forward       per 4 query rows: out, lse
//   attention_backward_dq   per 4 query rows: dq, and D = dout·out (kept for the next pass)
//   attention_backward_dkv  per 4 key rows: dk, dv, down the queries t ≥ key
// Layouts: a chunk c (4 channels × 4 rows) has c[r] = channels 4i..4i+3 of row r; a score
// block s (rows × keys) has s[j] = the 4 rows' scores against key j.

struct Params {
  B: u32,
  T: u32,
  C: u32,
  NH: u32,
  accumulate: u32, // backward: 1 adds into dinp (as the twin), 0 overwrites
  scale: f32,      // 1/sqrt(HS)
}

const HS: u32 = {{HS}}u;
const H4: u32 = HS / 4u; // chunks per head row
const BR: u32 = 64u; // rows per workgroup: 16 threads of 4 rows
const NEG: f32 = -3.402823e38;

alias Rows = array<mat4x4<f32>, H4>; // 4 rows of one head, chunk by chunk

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;  // forward: (B,T,C)
@group(0) @binding(1) var<storage, read_write> dinp: array<f32>; // backward: (B,T,3C)
@group(0) @binding(2) var<storage, read_write> lse: array<f32>;  // forward: (B,NH,T)
@group(0) @binding(2) var<storage, read_write> dsum: array<f32>; // dq writes D (B,NH,T), dkv reads it
@group(0) @binding(3) var<storage, read> inp: array<vec4<f32>>;  // (B,T,3C) as vec4s
@group(0) @binding(4) var<storage, read> lse_in: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<vec4<f32>>; // (B,T,C) as vec4s
@group(0) @binding(6) var<storage, read> out_in: array<vec4<f32>>;
// f16 storage (--precision f16): qkv and out as halves, 4 to a vec2<u32> (defines QKV and OUT,
// f32 or f16); lse, dout and dinp stay f32.
@group(0) @binding(1) var<storage, read_write> out_h: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read> inp_h: array<vec2<u32>>;
@group(0) @binding(6) var<storage, read> out_in_h: array<vec2<u32>>;

// Index of channel 0 of part `part` (0 q, 1 k, 2 v) of row t, head h, in inp (in floats).
fn qkv_at(b: u32, t: u32, h: u32, part: u32) -> u32 {
  return (b * p.T + t) * 3u * p.C + part * p.C + h * HS;
}

fn dout_at(b: u32, t: u32, h: u32) -> u32 {
  return (b * p.T + t) * p.C + h * HS;
}

fn unpack4h(x: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(x.x), unpack2x16float(x.y)); }
fn pack4h(v: vec4<f32>) -> vec2<u32> { return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw)); }

// Channels 4i .. 4i+3 of the head row whose channel 0 is at idx.
fn inp4(idx: u32, i: u32) -> vec4<f32> { return inp4_{{QKV=f32}}(idx, i); }
fn inp4_f32(idx: u32, i: u32) -> vec4<f32> { return inp[idx / 4u + i]; }
fn inp4_f16(idx: u32, i: u32) -> vec4<f32> { return unpack4h(inp_h[idx / 4u + i]); }
fn out4(idx: u32, i: u32) -> vec4<f32> { return out4_{{OUT=f32}}(idx, i); }
fn out4_f32(idx: u32, i: u32) -> vec4<f32> { return out_in[idx / 4u + i]; }
fn out4_f16(idx: u32, i: u32) -> vec4<f32> { return unpack4h(out_in_h[idx / 4u + i]); }
fn store_out(idx: u32, i: u32, v: vec4<f32>) { store_out_{{OUT=f32}}(idx, i, v); }
fn store_out_f32(idx: u32, i: u32, v: vec4<f32>) {
  let o = idx + 4u * i;
  out[o] = v.x; out[o + 1u] = v.y; out[o + 2u] = v.z; out[o + 3u] = v.w;
}
fn store_out_f16(idx: u32, i: u32, v: vec4<f32>) { out_h[idx / 4u + i] = pack4h(v); }

// Chunk i of rows t .. t+3 (clamped to T−1: rows past T are computed on and never stored).
fn qkv_chunk(b: u32, t: u32, h: u32, part: u32, i: u32) -> mat4x4<f32> {
  let last = p.T - 1u;
  return mat4x4<f32>(inp4(qkv_at(b, min(t, last), h, part), i), inp4(qkv_at(b, min(t + 1u, last), h, part), i),
                     inp4(qkv_at(b, min(t + 2u, last), h, part), i), inp4(qkv_at(b, min(t + 3u, last), h, part), i));
}

fn dout_chunk(b: u32, t: u32, h: u32, i: u32) -> mat4x4<f32> {
  let last = p.T - 1u;
  return mat4x4<f32>(dout[dout_at(b, min(t, last), h) / 4u + i], dout[dout_at(b, min(t + 1u, last), h) / 4u + i],
                     dout[dout_at(b, min(t + 2u, last), h) / 4u + i], dout[dout_at(b, min(t + 3u, last), h) / 4u + i]);
}

// lse and D of rows t .. t+3 (clamped) of the (batch, head) whose row 0 is at base.
fn lse4(base: u32, t: u32) -> vec4<f32> {
  let last = p.T - 1u;
  return vec4<f32>(lse_in[base + min(t, last)], lse_in[base + min(t + 1u, last)],
                   lse_in[base + min(t + 2u, last)], lse_in[base + min(t + 3u, last)]);
}
fn dsum4(base: u32, t: u32) -> vec4<f32> {
  let last = p.T - 1u;
  return vec4<f32>(dsum[base + min(t, last)], dsum[base + min(t + 1u, last)],
                   dsum[base + min(t + 2u, last)], dsum[base + min(t + 3u, last)]);
}

// m with each column scaled by its entry of d (m · diag(d))
fn scale_cols(m: mat4x4<f32>, d: vec4<f32>) -> mat4x4<f32> {
  return mat4x4<f32>(m[0] * d.x, m[1] * d.y, m[2] * d.z, m[3] * d.w);
}

// The diagonal block of a score block s (rows × keys, the same 4 positions): keys after their row masked.
fn mask_causal(s: mat4x4<f32>) -> mat4x4<f32> {
  return mat4x4<f32>(s[0], vec4<f32>(NEG, s[1].yzw), vec4<f32>(NEG, NEG, s[2].zw), vec4<f32>(NEG, NEG, NEG, s[3].w));
}

// The same for a transposed block (keys × queries): queries before their key masked.
fn mask_causal_t(s: mat4x4<f32>) -> mat4x4<f32> {
  return mat4x4<f32>(vec4<f32>(s[0].x, NEG, NEG, NEG), vec4<f32>(s[1].xy, NEG, NEG), vec4<f32>(s[2].xyz, NEG), s[3]);
}

// A thread's rows: batch b, head h (bh = b·NH + h), rows t .. t+3.
struct Block {
  b: u32,
  h: u32,
  bh: u32,
  t: u32,
}

fn block_of(id: Grid, lid: u32) -> Block {
  return Block(id.wid.y / p.NH, id.wid.y % p.NH, id.wid.y, id.wid.x * BR + 4u * lid);
}

fn store_grad(idx: u32, g: vec4<f32>) {
  for (var k = 0u; k < 4u; k++) { dinp[idx + k] = select(g[k], dinp[idx + k] + g[k], p.accumulate != 0u); }
}

// Grid (ceil(T/BR), B·NH).
@compute @workgroup_size(16)
fn attention_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = block_of(id, lid);
  if (w.t >= p.T) { return; }
  var qt: Rows; // transposed: qt[i] is rows × channels
  var o: Rows;  // Σ p·v per row, unnormalised
  for (var i = 0u; i < H4; i++) { qt[i] = transpose(qkv_chunk(w.b, w.t, w.h, 0u, i)) * p.scale; }
  var m = vec4<f32>(NEG); // running max and sum of exp(score − m), per row
  var l = vec4<f32>(0.0);
  for (var k0 = 0u; k0 <= w.t; k0 += 4u) {
    var s = mat4x4<f32>();
    for (var i = 0u; i < H4; i++) { s += qt[i] * qkv_chunk(w.b, k0, w.h, 1u, i); }
    if (k0 == w.t) { s = mask_causal(s); }
    let mt = max(m, max(max(s[0], s[1]), max(s[2], s[3])));
    let corr = exp(m - mt);
    let pr = mat4x4<f32>(exp(s[0] - mt), exp(s[1] - mt), exp(s[2] - mt), exp(s[3] - mt));
    l = l * corr + pr[0] + pr[1] + pr[2] + pr[3];
    let pk = transpose(pr); // keys × rows
    for (var i = 0u; i < H4; i++) { o[i] = scale_cols(o[i], corr) + qkv_chunk(w.b, k0, w.h, 2u, i) * pk; }
    m = mt;
  }
  let inv = 1.0 / l;
  let lr = m + log(l);
  for (var r = 0u; r < min(4u, p.T - w.t); r++) {
    let idx = dout_at(w.b, w.t + r, w.h);
    for (var i = 0u; i < H4; i++) { store_out(idx, i, o[i][r] * inv[r]); }
    lse[w.bh * p.T + w.t + r] = lr[r];
  }
}

// dq = scale·Σ_k ds·k with ds = P ⊙ (dout·v − D), P = exp(scale·q·k − lse). Grid (ceil(T/BR), B·NH).
@compute @workgroup_size(16)
fn attention_backward_dq(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = block_of(id, lid);
  if (w.t >= p.T) { return; }
  var qt: Rows; // rows × channels
  var gt: Rows; // dout, rows × channels
  var dq: Rows; // channels × rows
  var kc: Rows; // the block's keys: read (and converted) once for the scores and for dq
  var d = vec4<f32>(0.0);
  for (var i = 0u; i < H4; i++) {
    let g = dout_chunk(w.b, w.t, w.h, i);
    qt[i] = transpose(qkv_chunk(w.b, w.t, w.h, 0u, i)) * p.scale;
    gt[i] = transpose(g);
    let last = p.T - 1u;
    d += vec4<f32>(dot(g[0], out4(dout_at(w.b, w.t, w.h), i)),
                   dot(g[1], out4(dout_at(w.b, min(w.t + 1u, last), w.h), i)),
                   dot(g[2], out4(dout_at(w.b, min(w.t + 2u, last), w.h), i)),
                   dot(g[3], out4(dout_at(w.b, min(w.t + 3u, last), w.h), i)));
  }
  let L = lse4(w.bh * p.T, w.t);
  for (var k0 = 0u; k0 <= w.t; k0 += 4u) {
    var s = mat4x4<f32>();
    var gv = mat4x4<f32>();
    for (var i = 0u; i < H4; i++) {
      kc[i] = qkv_chunk(w.b, k0, w.h, 1u, i);
      s += qt[i] * kc[i];
      gv += gt[i] * qkv_chunk(w.b, k0, w.h, 2u, i);
    }
    if (k0 == w.t) { s = mask_causal(s); }
    let ds = transpose(mat4x4<f32>(exp(s[0] - L) * (gv[0] - d), exp(s[1] - L) * (gv[1] - d),
                                   exp(s[2] - L) * (gv[2] - d), exp(s[3] - L) * (gv[3] - d))); // keys × rows
    for (var i = 0u; i < H4; i++) { dq[i] += kc[i] * ds; }
  }
  for (var r = 0u; r < min(4u, p.T - w.t); r++) {
    let idx = qkv_at(w.b, w.t + r, w.h, 0u);
    for (var i = 0u; i < H4; i++) { store_grad(idx + 4u * i, dq[i][r] * p.scale); }
    dsum[w.bh * p.T + w.t + r] = d[r];
  }
}

// dv = Σ_{t ≥ key} P·dout, dk = scale·Σ ds·q. Runs after attention_backward_dq (reads D).
// Grid (ceil(T/BR), B·NH).
@compute @workgroup_size(16)
fn attention_backward_dkv(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = block_of(id, lid);
  if (w.t >= p.T) { return; }
  var kt: Rows; // keys × channels
  var vt: Rows;
  var dk: Rows; // channels × keys
  var dv: Rows;
  var qc: Rows; // the block's queries and their dout: read (and converted) once for the scores and the updates
  var gc: Rows;
  for (var i = 0u; i < H4; i++) {
    kt[i] = transpose(qkv_chunk(w.b, w.t, w.h, 1u, i)) * p.scale;
    vt[i] = transpose(qkv_chunk(w.b, w.t, w.h, 2u, i));
  }
  for (var q0 = w.t; q0 < p.T; q0 += 4u) {
    var s = mat4x4<f32>();  // keys × queries: s[j] = the 4 keys' scores from query q0+j
    var gv = mat4x4<f32>();
    for (var i = 0u; i < H4; i++) {
      qc[i] = qkv_chunk(w.b, q0, w.h, 0u, i);
      gc[i] = dout_chunk(w.b, q0, w.h, i);
      s += kt[i] * qc[i];
      gv += vt[i] * gc[i];
    }
    if (q0 == w.t) { s = mask_causal_t(s); }
    let L = lse4(w.bh * p.T, q0);
    let D = dsum4(w.bh * p.T, q0);
    let live = vec4<f32>(vec4<u32>(q0, q0 + 1u, q0 + 2u, q0 + 3u) < vec4<u32>(p.T)); // queries past T count nothing
    let pr = mat4x4<f32>(exp(s[0] - L.x) * live.x, exp(s[1] - L.y) * live.y,
                         exp(s[2] - L.z) * live.z, exp(s[3] - L.w) * live.w);
    let ds = mat4x4<f32>(pr[0] * (gv[0] - D.x), pr[1] * (gv[1] - D.y), pr[2] * (gv[2] - D.z), pr[3] * (gv[3] - D.w));
    let pq = transpose(pr); // queries × keys
    let dsq = transpose(ds);
    for (var i = 0u; i < H4; i++) {
      dv[i] += gc[i] * pq;
      dk[i] += qc[i] * dsq;
    }
  }
  for (var r = 0u; r < min(4u, p.T - w.t); r++) {
    let ik = qkv_at(w.b, w.t + r, w.h, 1u);
    let iv = qkv_at(w.b, w.t + r, w.h, 2u);
    for (var i = 0u; i < H4; i++) {
      store_grad(ik + 4u * i, dk[i][r] * p.scale);
      store_grad(iv + 4u * i, dv[i][r]);
    }
  }
}
