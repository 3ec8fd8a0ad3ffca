// The attention kernels before the flash ones (shaders/attention.wgsl), kept only as the
// bench's baseline (bench/attention.ts): one workgroup per query row, att (B,NH,T,T) stored.
// Twins: attentionForward / attentionBackward (core/model/ops.ts).
// inp (B,T,3C) holds q,k,v; att (B,NH,T,T); out (B,T,C); head size hs = C/NH.
// Forward: one workgroup per (query row t, batch·head), scores kept in workgroup memory,
// fused max-subtracted softmax. Only att is stored for the backward; preatt is not
// materialised (the backward never needs it), unlike the twin.
// Backward in two race-free passes (no float atomics in WGSL):
//   attention_backward_dq   per query row: dpreatt row (scratch) and dq
//   attention_backward_dkv  per key column: dk and dv gather down the column

// accumulate: 1 adds into dinp; scale = 1/sqrt(hs)
struct Params { B: u32, T: u32, C: u32, NH: u32, accumulate: u32, scale: f32 }

override MAX_T: u32 = 256u; // ≥ T: sizes the per-row workgroup arrays

@group(0) @binding(0) var<uniform> p: Params;

// attention_forward
@group(0) @binding(1) var<storage, read_write> out: array<f32>;     // (B,T,C)
@group(0) @binding(2) var<storage, read_write> att: array<f32>;     // (B,NH,T,T)
@group(0) @binding(3) var<storage, read> inp: array<f32>;           // (B,T,3C)

// backward
@group(0) @binding(1) var<storage, read_write> dinp: array<f32>;    // (B,T,3C)
@group(0) @binding(2) var<storage, read_write> dpreatt: array<f32>; // (B,NH,T,T) scratch
@group(0) @binding(2) var<storage, read> dpreatt_in: array<f32>;
@group(0) @binding(4) var<storage, read> att_in: array<f32>;        // (B,NH,T,T)
@group(0) @binding(5) var<storage, read> dout: array<f32>;          // (B,T,C)

const WG: u32 = 64u;
var<workgroup> row: array<f32, MAX_T>;
var<workgroup> row2: array<f32, MAX_T>;
// Grid (T, B·NH).
@compute @workgroup_size(64)
fn attention_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let t = id.wid.x;
  let bh = id.wid.y; let b = bh / p.NH; let h = bh % p.NH;
  let T = p.T; let C = p.C; let C3 = 3u * C; let hs = C / p.NH;
  let q = (b * T + t) * C3 + h * hs; let arow = (bh * T + t) * T;
  // scores q·k for t2 ≤ t, one key per thread
  var mx = -3.402823e38;
  for (var t2 = lid; t2 <= t; t2 += WG) {
    let k = (b * T + t2) * C3 + C + h * hs;
    var dot = 0.0;
    for (var i = 0u; i < hs; i++) { dot += inp[q + i] * inp[k + i]; }
    let s = dot * p.scale;
    row[t2] = s;
    mx = max(mx, s);
  }
  mx = wg_max(mx, lid, WG);
  var sum = 0.0;
  for (var t2 = lid; t2 <= t; t2 += WG) {
    let e = exp(row[t2] - mx);
    row[t2] = e;
    sum += e;
  }
  let inv = 1.0 / wg_sum(sum, lid, WG);
  for (var t2 = lid; t2 < T; t2 += WG) {
    var a = 0.0;
    if (t2 <= t) {
      a = row[t2] * inv;
      row[t2] = a;
    }
    att[arow + t2] = a; // the masked entries are 0, as in the twin
  }
  workgroupBarrier();
  // out = att · v, one output channel per thread (coalesced v reads)
  let o = (b * T + t) * C + h * hs;
  for (var i = lid; i < hs; i += WG) {
    var acc = 0.0;
    for (var t2 = 0u; t2 <= t; t2++) { acc += row[t2] * inp[(b * T + t2) * C3 + 2u * C + h * hs + i]; }
    out[o + i] = acc;
  }
}

// Per query row t: datt = v·dout, dpreatt = att ⊙ (datt − Σ att·datt), dq = scale·Σ dpreatt·k.
// Grid (T, B·NH).
@compute @workgroup_size(64)
fn attention_backward_dq(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let t = id.wid.x; let bh = id.wid.y; let b = bh / p.NH; let h = bh % p.NH;
  let T = p.T; let C = p.C; let C3 = 3u * C; let hs = C / p.NH;
  let o = (b * T + t) * C + h * hs; let arow = (bh * T + t) * T;
  var dot = 0.0;
  for (var t2 = lid; t2 <= t; t2 += WG) {
    let v = (b * T + t2) * C3 + 2u * C + h * hs;
    var d = 0.0;
    for (var i = 0u; i < hs; i++) { d += inp[v + i] * dout[o + i]; }
    row[t2] = d;
    dot += att_in[arow + t2] * d;
  }
  dot = wg_sum(dot, lid, WG);
  for (var t2 = lid; t2 <= t; t2 += WG) {
    let dp = att_in[arow + t2] * (row[t2] - dot);
    row[t2] = dp;
    dpreatt[arow + t2] = dp;
  }
  workgroupBarrier();
  let q = (b * T + t) * C3 + h * hs;
  for (var i = lid; i < hs; i += WG) {
    var g = 0.0;
    for (var t2 = 0u; t2 <= t; t2++) { g += row[t2] * inp[(b * T + t2) * C3 + C + h * hs + i]; }
    g *= p.scale;
    dinp[q + i] = select(g, dinp[q + i] + g, p.accumulate != 0u);
  }
}

// Per key column t2: dk = scale·Σ_{t≥t2} dpreatt[t,t2]·q[t], dv = Σ_{t≥t2} att[t,t2]·dout[t].
// Grid (T, B·NH).
@compute @workgroup_size(64)
fn attention_backward_dkv(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let t2 = id.wid.x;
  let bh = id.wid.y; let b = bh / p.NH; let h = bh % p.NH;
  let T = p.T; let C = p.C; let C3 = 3u * C; let hs = C / p.NH;
  for (var t = t2 + lid; t < T; t += WG) {
    let r = (bh * T + t) * T + t2;
    row[t] = dpreatt_in[r];
    row2[t] = att_in[r];
  }
  workgroupBarrier();
  let k = (b * T + t2) * C3 + C + h * hs;
  for (var i = lid; i < hs; i += WG) {
    var gk = 0.0;
    var gv = 0.0;
    for (var t = t2; t < T; t++) {
      gk += row[t] * inp[(b * T + t) * C3 + h * hs + i];
      gv += row2[t] * dout[(b * T + t) * C + h * hs + i];
    }
    gk *= p.scale;
    dinp[k + i] = select(gk, dinp[k + i] + gk, p.accumulate != 0u);
    dinp[k + C + i] = select(gv, dinp[k + C + i] + gv, p.accumulate != 0u);
  }
}
