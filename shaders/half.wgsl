// f16 storage (--precision f16): the activations, the matmuls' weight copy and Δ as halves,
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
  N: u32,          // elements
}

@group(0) @binding(0) var<uniform> p: Params;

// gelu_backward_f16, in place: d (N) f32 = gelu'(inp)·d; inp (N) halves (the fc pre-activation)
@group(0) @binding(1) var<storage, read_write> d: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> inp_h: array<H2>;

// pseudo_gradient_f16: Δ (N) halves = start − θ, both f32 masters; pack_f16: out = the f32 input
@group(0) @binding(1) var<storage, read_write> out_h: array<H2>;
@group(0) @binding(2) var<storage, read> in1_f: array<f32>;
@group(0) @binding(3) var<storage, read> in2_f: array<f32>;

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
