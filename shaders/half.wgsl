// f16 storage for the bandwidth-bound ops: activations, the matmuls' weight copy and Δ as halves,
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
  N: u32,          // elements (elementwise ops, Δ, pack) or rows B·T (layernorm, encoder)
  C: u32,          // channels per row (layernorm, encoder); even
  off0: u32,       // element offsets: layernorm weight / encoder wte (even)
  off1: u32,       // layernorm bias / encoder wpe (even)
  T: u32,          // encoder: positions per sequence
  accumulate: u32, // gelu_backward_f16: 1 adds to dinp (as the twin), 0 overwrites
  alpha: f32,      // residual_forward_f16: out = inp1 + alpha·inp2
  _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;

// elementwise: gelu_forward_f16 (out, inp), gelu_backward_f16 (dinp, inp, dout),
// residual_forward_f16 (out, inp1, inp2), all (N) as halves
@group(0) @binding(1) var<storage, read_write> out_h: array<H2>;
@group(0) @binding(2) var<storage, read> in1_h: array<H2>;
@group(0) @binding(3) var<storage, read> in2_h: array<H2>;

// pseudo_gradient_f16: Δ (N, halves) = start − θ, both f32 masters; pack_f16: out = f32 input
@group(0) @binding(2) var<storage, read> in1_f: array<f32>;
@group(0) @binding(3) var<storage, read> in2_f: array<f32>;

// layernorm_forward_f16: out (N,C) halves; mean, rstd (N) f32; inp (N,C) halves; params f32
@group(0) @binding(4) var<storage, read_write> mean: array<f32>;
@group(0) @binding(5) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(6) var<storage, read> params: array<f32>;

// encoder_forward_f16: out (N=B·T, C) halves = wte[tok] + wpe[t], from the weight copy (halves)
@group(0) @binding(2) var<storage, read> tokens: array<u32>;
@group(0) @binding(3) var<storage, read> weights_h: array<H2>;

fn words(n: u32) -> u32 { return (n + 1u) / 2u; }

// The pair at word w of an n-element tensor, the element past n (if any) zeroed.
fn pair_mask(w: u32, n: u32, v: vec2<f32>) -> vec2<f32> {
  return select(v, vec2<f32>(v.x, 0.0), 2u * w + 1u >= n);
}

@compute @workgroup_size(256)
fn gelu_forward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = thread_index(id, lid, 256u);
  if (w >= words(p.N)) { return; }
  let x = h2_load(in1_h[w]);
  out_h[w] = h2_store(pair_mask(w, p.N, gelu(vec4<f32>(x, 0.0, 0.0)).xy));
}

@compute @workgroup_size(256)
fn gelu_backward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = thread_index(id, lid, 256u);
  if (w >= words(p.N)) { return; }
  let x = h2_load(in1_h[w]);
  let th = tanh_safe(vec4<f32>(GELU_S * (x + 0.044715 * x * x * x), 0.0, 0.0)).xy;
  let sech2 = 1.0 - th * th;
  var g = (0.5 * (1.0 + th) + 0.5 * x * sech2 * GELU_S * (1.0 + 3.0 * 0.044715 * x * x)) * h2_load(in2_h[w]);
  if (p.accumulate != 0u) { g += h2_load(out_h[w]); }
  out_h[w] = h2_store(pair_mask(w, p.N, g));
}

@compute @workgroup_size(256)
fn residual_forward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = thread_index(id, lid, 256u);
  if (w >= words(p.N)) { return; }
  out_h[w] = h2_store(pair_mask(w, p.N, h2_load(in1_h[w]) + p.alpha * h2_load(in2_h[w])));
}

// Element i of an f32 input, 0 past N.
fn in1_at(i: u32) -> f32 { return select(0.0, in1_f[min(i, p.N - 1u)], i < p.N); }
fn in2_at(i: u32) -> f32 { return select(0.0, in2_f[min(i, p.N - 1u)], i < p.N); }

// Δ = θ_start − θ as halves: what an f16 island reads back and sends (half the bytes).
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

// LayerNorm over C (even) with halves in and out, one workgroup per row, each thread a pair of
// channels at a time; mean and rstd stay f32 (the backward reads them). Twin: layernormForwardF16.
const WG: u32 = 64u;
const EPS: f32 = 1e-5;

@compute @workgroup_size(64)
fn layernorm_forward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let row = group_index(id);
  if (row >= p.N) { return; }
  let cw = p.C / 2u;
  let x = row * cw;
  var s = vec2<f32>(0.0);
  for (var i = lid; i < cw; i += WG) { s += h2_load(in1_h[x + i]); }
  let m = wg_sum(s.x + s.y, lid, WG) / f32(p.C);
  var v = 0.0;
  for (var i = lid; i < cw; i += WG) { let d = h2_load(in1_h[x + i]) - m; v += dot(d, d); }
  let rs = 1.0 / sqrt(wg_sum(v, lid, WG) / f32(p.C) + EPS);
  for (var i = lid; i < cw; i += WG) {
    let c = 2u * i;
    let wt = vec2<f32>(params[p.off0 + c], params[p.off0 + c + 1u]);
    let bs = vec2<f32>(params[p.off1 + c], params[p.off1 + c + 1u]);
    out_h[x + i] = h2_store((h2_load(in1_h[x + i]) - m) * rs * wt + bs);
  }
  if (lid == 0u) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

// out (B·T, C) halves = wte[tok] + wpe[t], both read from the halves of the weight copy
// (offsets and C even, so a word never straddles two rows). Twin: encoderForwardF16.
@compute @workgroup_size(256)
fn encoder_forward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let w = thread_index(id, lid, 256u);
  let cw = p.C / 2u;
  if (w >= p.N * cw) { return; }
  let bt = w / cw;
  let c2 = w % cw;
  let t = bt % p.T;
  let e = h2_load(weights_h[p.off0 / 2u + tokens[bt] * cw + c2]) + h2_load(weights_h[p.off1 / 2u + t * cw + c2]);
  out_h[w] = h2_store(e);
}
