// LayerNorm over C, eps 1e-5. Twins: layernormForward / layernormBackward (core/model/ops.ts);
// residual_layernorm_forward: residualForward then layernormForward, in one pass over the row.
// Forward and dinp: one workgroup per row (B·T rows), tree reductions in workgroup memory.
// dweight/dbias: column sums over slices of rows (enough workgroups), then the slices in order.

struct Params {
  N: u32,           // rows (B·T)
  C: u32,
  w_off: u32,       // weight (C): in params; dweight in grads for the backward
  b_off: u32,       // bias (C) / dbias
  accumulate: u32,  // backward: 1 adds (as the twin), 0 overwrites
  chunk: u32,       // dweight: rows per slice
}

@group(0) @binding(0) var<uniform> p: Params;

// layernorm_forward
@group(0) @binding(1) var<storage, read_write> out: array<f32>;    // (N,C)
@group(0) @binding(2) var<storage, read_write> mean: array<f32>;   // (N) cached for the backward
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;   // (N)
@group(0) @binding(4) var<storage, read> inp: array<f32>;          // (N,C)
@group(0) @binding(5) var<storage, read> params: array<f32>;

// residual_layernorm_forward: out, mean, rstd as above; the sum of the residual stream is kept
@group(0) @binding(4) var<storage, read_write> res: array<f32>;    // (N,C) = inp1 + inp2
@group(0) @binding(6) var<storage, read> inp1: array<f32>;         // (N,C)
@group(0) @binding(7) var<storage, read> inp2: array<f32>;         // (N,C)

// layernorm_backward_dinp / layernorm_backward_dweight
@group(0) @binding(1) var<storage, read_write> dinp: array<f32>;   // (N,C)
@group(0) @binding(1) var<storage, read_write> dparams: array<f32>; // grads
@group(0) @binding(2) var<storage, read> dout: array<f32>;         // (N,C)
@group(0) @binding(6) var<storage, read> mean_in: array<f32>;
@group(0) @binding(7) var<storage, read> rstd_in: array<f32>;

const EPS: f32 = 1e-5;
const WG: u32 = 64u;
@compute @workgroup_size(64)
fn layernorm_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let row = group_index(id);
  if (row >= p.N) { return; }
  let x = row * p.C;
  var s = 0.0;
  for (var i = lid; i < p.C; i += WG) { s += inp[x + i]; }
  let m = wg_sum(s, lid, WG) / f32(p.C);
  var v = 0.0;
  for (var i = lid; i < p.C; i += WG) { let d = inp[x + i] - m; v += d * d; }
  let rs = ln_stats(row, m, v, lid);
  for (var i = lid; i < p.C; i += WG) { out[x + i] = ln_affine(inp[x + i], m, rs, i); }
}

// The row's rstd from the threads' partial Σ(x − m)²; thread 0 keeps the mean and rstd for the backward.
fn ln_stats(row: u32, m: f32, v: f32, lid: u32) -> f32 {
  let rs = 1.0 / sqrt(wg_sum(v, lid, WG) / f32(p.C) + EPS);
  if (lid == 0u) {
    mean[row] = m;
    rstd[row] = rs;
  }
  return rs;
}

// Element i of the normalised row, scaled and shifted by the weight and bias.
fn ln_affine(x: f32, m: f32, rs: f32, i: u32) -> f32 {
  return (x - m) * rs * params[p.w_off + i] + params[p.b_off + i];
}

// res = inp1 + inp2, then out = layernorm(res): the residual add and the next LayerNorm share one
// read of the stream (each thread reads back only the elements it wrote).
@compute @workgroup_size(64)
fn residual_layernorm_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let row = group_index(id);
  if (row >= p.N) { return; }
  var s = 0.0;
  let x = row * p.C;
  for (var i = lid; i < p.C; i += WG) {
    let r = inp1[x + i] + inp2[x + i];
    res[x + i] = r;
    s += r;
  }
  let m = wg_sum(s, lid, WG) / f32(p.C);
  var v = 0.0;
  for (var i = lid; i < p.C; i += WG) { let d = res[x + i] - m; v += d * d; }
  let rs = ln_stats(row, m, v, lid);
  for (var i = lid; i < p.C; i += WG) { out[x + i] = ln_affine(res[x + i], m, rs, i); }
}

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
    let norm = (inp[x + i] - m) * s;
    let dnorm = params[p.w_off + i] * dout[x + i];
    a += dnorm;
    b += dnorm * norm;
  }
  let sums = wg_sum2(vec2<f32>(a, b), lid, WG) / f32(p.C);
  let dnorm_mean = sums.x;
  let dnorm_norm_mean = sums.y;
  for (var i = lid; i < p.C; i += WG) {
    let norm = (inp[x + i] - m) * s;
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
      g += vec2<f32>((inp[r * p.C + c] - mean_in[r]) * rstd_in[r] * d, d);
    }
  }
  g = wg_fold4(g, lid);
  if (lid < 64u && c < p.C) {
    dparams[id.wid.y * 2u * p.C + c] = g.x;
    dparams[id.wid.y * 2u * p.C + p.C + c] = g.y;
  }
}
