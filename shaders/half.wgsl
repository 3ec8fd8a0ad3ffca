// f16 storage (--precision f16): the activations the matmuls and attention read, the matmuls'
// weight copy and Δ as halves,
// two to a 32-bit word (element 2w in the low half of word w, 2w+1 in the high half: the byte
// order of a little-endian Uint16Array, and of WGSL's vec2<f16>). Arithmetic stays f32; only
// loads and stores convert. Master weights, gradients and Adam moments stay f32.
// Twins: core/model/ops-f16.ts (the f32 twin of each op with its inputs and outputs rounded to
// f16, as these kernels store them).
//
// One source, two storage forms, chosen by the defines H2, H2_LOAD, H2_STORE:
//   packed  (every adapter): array<u32> through pack2x16float / unpack2x16float, core WGSL;
//   native  (adapters with `shader-f16`): array<vec2<f16>>, the same bytes, converted with f16
//           casts; `enable f16;` goes in front of the module. SwiftShader has no shader-f16,
//           so this form is compiled only on a real GPU.
// Each thread owns whole words, so no two threads write halves of one word. Elements past N in
// the last word are written as 0.

// H2 is one word of two halves; h2_load / h2_store convert it (the defaults: packed).
alias H2 = {{H2=u32}};
fn h2_load(x: H2) -> vec2<f32> { return {{H2_LOAD=unpack2x16float}}(x); }
fn h2_store(v: vec2<f32>) -> H2 { return {{H2_STORE=pack2x16float}}(v); }

struct Params {
  N: u32,          // elements (gelu_backward_f16, Δ, pack) or rows B·T (layernorm)
  C: u32,          // layernorm: channels per row, even
  w_off: u32,      // layernorm weight (C) in params
  b_off: u32,      // layernorm bias (C)
  _pad0: u32,
  _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;

// gelu_backward_f16, in place: d (N) f32 = gelu'(inp)·d; inp (N) halves (the fc pre-activation)
@group(0) @binding(1) var<storage, read_write> d: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> inp_h: array<H2>;

// pseudo_gradient_f16: Δ (N) halves = start − θ, both f32 masters; pack_f16: out = the f32 input
@group(0) @binding(1) var<storage, read_write> out_h: array<H2>;
@group(0) @binding(2) var<storage, read> in1_f: array<f32>;
@group(0) @binding(3) var<storage, read> in2_f: array<f32>;

// layernorm_forward_f16 (out, mean, rstd, inp, params), residual_layernorm_forward_f16
// (out, mean, rstd, res, params, inp1, inp2): the residual stream f32, out (N,C) halves
@group(0) @binding(2) var<storage, read_write> mean: array<f32>;
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(4) var<storage, read> inp2: array<vec2<f32>>;        // layernorm_forward_f16: inp
@group(0) @binding(4) var<storage, read_write> res2: array<vec2<f32>>;  // residual_layernorm_forward_f16: res
@group(0) @binding(5) var<storage, read> params: array<f32>;
@group(0) @binding(6) var<storage, read> inp1_2: array<vec2<f32>>;
@group(0) @binding(7) var<storage, read> inp2_2: array<vec2<f32>>;

fn words(n: u32) -> u32 { return (n + 1u) / 2u; }

// The backward of the GELU fused into the fc matmul's epilogue (the forward stored its input as
// halves), in place: the gradient of the GELU's output becomes that of its input, so f16 needs no
// second B·T·4C gradient buffer. Gradients are f32, never halves; N even (4C per row).
@compute @workgroup_size(256)
fn gelu_backward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = thread_index(id, lid, 256u);
  if (w >= p.N / 2u) { return; }
  let x = h2_load(inp_h[w]);
  let th = tanh_safe(vec4<f32>(GELU_S * (x + 0.044715 * x * x * x), 0.0, 0.0)).xy;
  let sech2 = 1.0 - th * th;
  d[w] = (0.5 * (1.0 + th) + 0.5 * x * sech2 * GELU_S * (1.0 + 3.0 * 0.044715 * x * x)) * d[w];
}

// Element i of an f32 input, 0 past N.
fn in1_at(i: u32) -> f32 { return select(0.0, in1_f[min(i, p.N - 1u)], i < p.N); }
fn in2_at(i: u32) -> f32 { return select(0.0, in2_f[min(i, p.N - 1u)], i < p.N); }

// Δ = θ_start − θ as halves, rounded once from the f32 masters: what an f16 island reads back
// and sends (half the bytes).
@compute @workgroup_size(256)
fn pseudo_gradient_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = thread_index(id, lid, 256u);
  if (w >= words(p.N)) { return; }
  let i = 2u * w;
  out_h[w] = h2_store(vec2<f32>(in1_at(i) - in2_at(i), in1_at(i + 1u) - in2_at(i + 1u)));
}

// out = the f32 input as halves: the weight copy after setParams.
@compute @workgroup_size(256)
fn pack_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = thread_index(id, lid, 256u);
  if (w >= words(p.N)) { return; }
  out_h[w] = h2_store(vec2<f32>(in1_at(2u * w), in1_at(2u * w + 1u)));
}

// LayerNorm over C (even) of the f32 residual stream, out as halves (the next matmul's input),
// one workgroup per row, a pair of channels per thread at a time; mean and rstd f32.
// Twins: layernormForwardF16, residualLayernormForwardF16.
const WG: u32 = 64u;
const EPS: f32 = 1e-5;

fn ln_store(row: u32, lid: u32, m: f32, rs: f32, x: vec2<f32>, i: u32) {
  let c = 2u * i;
  let wt = vec2<f32>(params[p.w_off + c], params[p.w_off + c + 1u]);
  let bs = vec2<f32>(params[p.b_off + c], params[p.b_off + c + 1u]);
  out_h[row * (p.C / 2u) + i] = h2_store((x - m) * rs * wt + bs);
}

// A row's mean (from its sum s), variance, normalized halves and stats, over its f32 values in the
// array SRC: one function per array, since WGSL cannot pass a storage array to a function.
// @repeat SRC = "inp2", "res2"
fn ln_finish_{{SRC}}(row: u32, lid: u32, s: vec2<f32>) {
  let cw = p.C / 2u;
  let x = row * cw;
  let m = wg_sum(s.x + s.y, lid, WG) / f32(p.C);
  var v = 0.0;
  for (var i = lid; i < cw; i += WG) { let d = {{SRC}}[x + i] - m; v += dot(d, d); }
  let rs = 1.0 / sqrt(wg_sum(v, lid, WG) / f32(p.C) + EPS);
  for (var i = lid; i < cw; i += WG) { ln_store(row, lid, m, rs, {{SRC}}[x + i], i); }
  if (lid == 0u) {
    mean[row] = m;
    rstd[row] = rs;
  }
}
// @end

@compute @workgroup_size(64)
fn layernorm_forward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let row = group_index(id);
  if (row >= p.N) { return; }
  var s = vec2<f32>(0.0);
  for (var i = lid; i < p.C / 2u; i += WG) { s += inp2[row * (p.C / 2u) + i]; }
  ln_finish_inp2(row, lid, s);
}

// res = inp1 + inp2 (f32), then out = layernorm(res) as halves.
@compute @workgroup_size(64)
fn residual_layernorm_forward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let row = group_index(id);
  if (row >= p.N) { return; }
  let x = row * (p.C / 2u);
  var s = vec2<f32>(0.0);
  for (var i = lid; i < p.C / 2u; i += WG) {
    let r = inp1_2[x + i] + inp2_2[x + i];
    res2[x + i] = r;
    s += r;
  }
  ln_finish_res2(row, lid, s);
}
