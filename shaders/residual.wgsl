// Residual add, out = inp1 + alpha·inp2. Twin: residualForward (core/model/ops.ts). The training
// step fuses its residual adds into the next LayerNorm (residual_layernorm_forward) and needs no
// residual backward: the stream's gradient is one buffer that each LayerNorm backward adds into.
// With alpha = −1 this is the pseudo-gradient Δ = θ_start − θ that an island sends after its
// inner steps (twin: pseudoGradient).

struct Params {
  N: u32,
  _pad: u32,
  alpha: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> inp1: array<f32>;
@group(0) @binding(3) var<storage, read> inp2: array<f32>;

@compute @workgroup_size(256)
fn residual_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.N) { return; }
  out[i] = inp1[i] + p.alpha * inp2[i];
}
