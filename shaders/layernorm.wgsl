// LayerNorm over C, eps 1e-5. Twins: layernormForward / layernormBackward (core/model/ops.ts);
// residual_layernorm_forward: residualForward then layernormForward, in one pass over the row; the
// _f16 entries (--precision f16): the same with the stream and out as halves (core/model/ops-f16.ts).
// Forward: rows of 16-byte chunks (4 f32, or 8 halves), p.tpr threads a row (the largest power of
// two ≤ the row's chunks, ≤ 64), 64 / p.tpr rows a workgroup; one segmented reduction a row, of
// (Σ(x − k), Σ(x − k)²) about the row's first value k. Halves put 8 channels in a chunk, so a row
// of halves takes half the threads (and, up to C = 512, half the workgroups) of a row of f32.
// dinp: one workgroup per row, tree reductions in workgroup memory. dweight/dbias: column sums over
// slices of rows (enough workgroups), then the slices in order. Their input (the residual stream)
// is read through inp_at: f32, or halves for --precision f16 (the define INP).

struct Params {
  N: u32,           // rows (B·T)
  C: u32,           // a multiple of 4 (f32 forward) or 8 (halves)
  w_off: u32,       // weight (C): in params; dweight in grads for the backward
  b_off: u32,       // bias (C) / dbias
  accumulate: u32,  // backward: 1 adds (as the twin), 0 overwrites
  chunk: u32,       // dweight: rows per slice
  tpr: u32,         // forward: threads per row (a power of two ≤ 64)
}

@group(0) @binding(0) var<uniform> p: Params;

// H8 is 16 bytes of 8 halves, h8_load / h8_store convert it (defaults: packed, core WGSL; the
// native form, with `shader-f16`: mat2x4h, the same bytes). Element 2w in the low half of word w.
alias H8 = {{H8=vec4u}};
fn h8_load(x: H8) -> mat2x4f { return {{H8_LOAD=h8_unpack}}(x); }
fn h8_store(v: mat2x4f) -> H8 { return {{H8_STORE=h8_pack}}(v); }
fn h8_unpack(w: vec4u) -> mat2x4f {
  return mat2x4f(vec4f(unpack2x16float(w.x), unpack2x16float(w.y)), vec4f(unpack2x16float(w.z), unpack2x16float(w.w)));
}
fn h8_pack(v: mat2x4f) -> vec4u {
  return vec4u(pack2x16float(v[0].xy), pack2x16float(v[0].zw), pack2x16float(v[1].xy), pack2x16float(v[1].zw));
}
alias H2 = {{H2=u32}};
fn h2_load(x: H2) -> vec2f { return {{H2_LOAD=unpack2x16float}}(x); }

// layernorm_forward, residual_layernorm_forward (f32, as vec4s) and their _f16 forms (as H8)
@group(0) @binding(1) var<storage, read_write> out_4: array<vec4f>;  // (N,C)
@group(0) @binding(1) var<storage, read_write> out_h8: array<H8>;
@group(0) @binding(2) var<storage, read_write> mean: array<f32>;   // (N) cached for the backward
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;   // (N)
@group(0) @binding(4) var<storage, read> inp_4: array<vec4f>;       // (N,C)
@group(0) @binding(4) var<storage, read> inp_h8: array<H8>;
@group(0) @binding(5) var<storage, read> params: array<f32>;
// residual: res = inp1 + inp2, the residual stream (kept)
@group(0) @binding(4) var<storage, read_write> res_4: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> res_h8: array<H8>;
@group(0) @binding(6) var<storage, read> inp1_4: array<vec4f>;
@group(0) @binding(6) var<storage, read> inp1_h8: array<H8>;
@group(0) @binding(7) var<storage, read> inp2_4: array<vec4f>;
@group(0) @binding(7) var<storage, read> inp2_h8: array<H8>;

// layernorm_backward_dinp / layernorm_backward_dweight
@group(0) @binding(1) var<storage, read_write> dinp: array<f32>;   // (N,C)
@group(0) @binding(1) var<storage, read_write> dparams: array<f32>; // grads
@group(0) @binding(2) var<storage, read> dout: array<f32>;         // (N,C)
@group(0) @binding(4) var<storage, read> inp: array<f32>;          // (N,C) the forward's input
@group(0) @binding(4) var<storage, read> inp_h2: array<H2>;        // the same as halves
@group(0) @binding(6) var<storage, read> mean_in: array<f32>;
@group(0) @binding(7) var<storage, read> rstd_in: array<f32>;

const EPS: f32 = 1e-5;
const WG: u32 = 64u;

// ---- forward

// A forward thread's row and its place in it. Rows past N (the last workgroup) compute on row N − 1
// and store nothing: every thread reaches the reduction.
struct LnRow { row: u32, live: bool, lane: u32, x0: u32 }
fn ln_row(id: Grid, lid: u32, per_chunk: u32) -> LnRow {
  let row = group_index(id) * (WG / p.tpr) + lid / p.tpr;
  return LnRow(row, row < p.N, lid % p.tpr, min(row, p.N - 1u) * (p.C / per_chunk));
}

// (Σ(x − k), Σ(x − k)²) of a chunk
fn moments4(x: vec4f, k: f32) -> vec2f { let d = x - k; return vec2f(dot(d, vec4f(1.0)), dot(d, d)); }
fn moments8(x: mat2x4f, k: f32) -> vec2f { return moments4(x[0], k) + moments4(x[1], k); }

// The row's mean and rstd from its moments about k (summed over its threads); lane 0 keeps them.
fn ln_stats(r: LnRow, k: f32, s: vec2f) -> vec2f {
  let d = s.x / f32(p.C);
  let rs = 1.0 / sqrt(max(s.y / f32(p.C) - d * d, 0.0) + EPS);
  if (r.live && r.lane == 0u) {
    mean[r.row] = k + d;
    rstd[r.row] = rs;
  }
  return vec2f(k + d, rs);
}

// Channels c .. c+3 normalised by (mean, rstd), scaled and shifted by the weight and bias.
fn affine4(x: vec4f, st: vec2f, c: u32) -> vec4f {
  let w = vec4f(params[p.w_off + c], params[p.w_off + c + 1u], params[p.w_off + c + 2u], params[p.w_off + c + 3u]);
  let b = vec4f(params[p.b_off + c], params[p.b_off + c + 1u], params[p.b_off + c + 2u], params[p.b_off + c + 3u]);
  return (x - st.x) * st.y * w + b;
}
fn affine8(x: mat2x4f, st: vec2f, c: u32) -> mat2x4f {
  return mat2x4f(affine4(x[0], st, c), affine4(x[1], st, c + 4u));
}

// A chunk of the stream in each storage form, as the template below reads it: _4 four f32 (a
// vec4f, loaded and stored as is), _h8 eight halves (H8, converted to and from a mat2x4f).
const W_4: u32 = 4u;
const W_h8: u32 = 8u;
fn ld_4(x: vec4f) -> vec4f { return x; }
fn ld_h8(x: H8) -> mat2x4f { return h8_load(x); }
fn st_4(x: vec4f) -> vec4f { return x; }
fn st_h8(x: mat2x4f) -> H8 { return h8_store(x); }
fn first_4(x: vec4f) -> f32 { return x.x; }
fn first_h8(x: mat2x4f) -> f32 { return x[0].x; }
fn moments_4(x: vec4f, k: f32) -> vec2f { return moments4(x, k); }
fn moments_h8(x: mat2x4f, k: f32) -> vec2f { return moments8(x, k); }
fn affine_4(x: vec4f, st: vec2f, c: u32) -> vec4f { return affine4(x, st, c); }
fn affine_h8(x: mat2x4f, st: vec2f, c: u32) -> mat2x4f { return affine8(x, st, c); }

// One body per storage form S: the LayerNorm of a row, and the residual add fused into it (the
// residual add and the next LayerNorm share one read of the stream; each thread reads back only the
// chunks it wrote). On halves the sum is stored rounded, and the LayerNorm is of what was stored.
// @repeat S = "_4", "_h8"
fn ln_forward{{S}}(id: Grid, lid: u32) {
  let r = ln_row(id, lid, W{{S}});
  let k = first{{S}}(ld{{S}}(inp{{S}}[r.x0]));
  var s = vec2f(0.0);
  for (var j = r.lane; j < p.C / W{{S}}; j += p.tpr) { s += moments{{S}}(ld{{S}}(inp{{S}}[r.x0 + j]), k); }
  let st = ln_stats(r, k, seg_sum2(s, lid, p.tpr));
  if (!r.live) { return; }
  for (var j = r.lane; j < p.C / W{{S}}; j += p.tpr) {
    out{{S}}[r.x0 + j] = st{{S}}(affine{{S}}(ld{{S}}(inp{{S}}[r.x0 + j]), st, W{{S}} * j));
  }
}

fn residual_ln_forward{{S}}(id: Grid, lid: u32) {
  let r = ln_row(id, lid, W{{S}});
  let k = first{{S}}(ld{{S}}(inp1{{S}}[r.x0])) + first{{S}}(ld{{S}}(inp2{{S}}[r.x0]));
  var s = vec2f(0.0);
  for (var j = r.lane; j < p.C / W{{S}}; j += p.tpr) {
    let h = st{{S}}(ld{{S}}(inp1{{S}}[r.x0 + j]) + ld{{S}}(inp2{{S}}[r.x0 + j]));
    if (r.live) { res{{S}}[r.x0 + j] = h; }
    s += moments{{S}}(ld{{S}}(h), k);
  }
  let st = ln_stats(r, k, seg_sum2(s, lid, p.tpr));
  if (!r.live) { return; }
  for (var j = r.lane; j < p.C / W{{S}}; j += p.tpr) {
    out{{S}}[r.x0 + j] = st{{S}}(affine{{S}}(ld{{S}}(res{{S}}[r.x0 + j]), st, W{{S}} * j));
  }
}
// @end

@compute @workgroup_size(64)
fn layernorm_forward(id: Grid, @builtin(local_invocation_index) lid: u32) { ln_forward_4(id, lid); }
@compute @workgroup_size(64)
fn layernorm_forward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) { ln_forward_h8(id, lid); }
@compute @workgroup_size(64)
fn residual_layernorm_forward(id: Grid, @builtin(local_invocation_index) lid: u32) { residual_ln_forward_4(id, lid); }
@compute @workgroup_size(64)
fn residual_layernorm_forward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  residual_ln_forward_h8(id, lid);
}

// ---- backward

// Element i of the forward's input: f32 (inp_f32), or halves (inp_f16) for --precision f16.
fn inp_f32(i: u32) -> f32 { return inp[i]; }
fn inp_f16(i: u32) -> f32 { return h2_load(inp_h2[i / 2u])[i % 2u]; }
fn inp_at(i: u32) -> f32 { return {{INP=inp_f32}}(i); }

// dinp (+)= (dnorm − mean(dnorm) − norm·mean(dnorm·norm))·rstd, dnorm = weight·dout.
@compute @workgroup_size(64)
fn layernorm_backward_dinp(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let row = group_index(id);
  if (row >= p.N) { return; }
  let x = row * p.C;
  let m = mean_in[row];
  let s = rstd_in[row];
  var a = 0.0;
  var b = 0.0;
  for (var i = lid; i < p.C; i += WG) {
    let norm = (inp_at(x + i) - m) * s;
    let dnorm = params[p.w_off + i] * dout[x + i];
    a += dnorm;
    b += dnorm * norm;
  }
  let sums = wg_sum2(vec2<f32>(a, b), lid, WG) / f32(p.C);
  let dnorm_mean = sums.x;
  let dnorm_norm_mean = sums.y;
  for (var i = lid; i < p.C; i += WG) {
    let norm = (inp_at(x + i) - m) * s;
    let dnorm = params[p.w_off + i] * dout[x + i];
    let g = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    dinp[x + i] = select(g, dinp[x + i] + g, p.accumulate != 0u);
  }
}

// Partial sums of dweight[c] = Σ norm·dout and dbias[c] = Σ dout over the rows of slice z,
// written to dparams (the partials scratch) at z·2C + c and z·2C + C + c; the engine then
// sums the slices in order (matmul_backward_dweight_reduce), deterministic, no atomics.
// Workgroup = 64 channels × 4 row strides. Grid (ceil(C/64), slices).
@compute @workgroup_size(256)
fn layernorm_backward_dweight(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let c = id.wid.x * 64u + lid % 64u;
  let rend = min(p.N, (id.wid.y + 1u) * p.chunk);
  var g = vec2<f32>(0.0);
  if (c < p.C) {
    for (var r = id.wid.y * p.chunk + lid / 64u; r < rend; r += 4u) {
      let d = dout[r * p.C + c];
      g += vec2<f32>((inp_at(r * p.C + c) - mean_in[r]) * rstd_in[r] * d, d);
    }
  }
  g = wg_fold4(g, lid);
  if (lid < 64u && c < p.C) {
    dparams[id.wid.y * 2u * p.C + c] = g.x;
    dparams[id.wid.y * 2u * p.C + p.C + c] = g.y;
  }
}
