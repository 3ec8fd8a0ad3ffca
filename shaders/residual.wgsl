// Residual add. Twins: residualForward / residualBackward (core/model/ops.ts).
// residual_forward with alpha = −1 is also the pseudo-gradient Δ = θ_start − θ that an
// island sends after its inner steps (twin: pseudoGradient).

struct Params {
  N: u32,
  accumulate: u32, // backward: 1 adds (as the twin), 0 overwrites
  alpha: f32,      // forward: out = inp1 + alpha·inp2
}

@group(0) @binding(0) var<uniform> p: Params;

// residual_forward: out = inp1 + alpha·inp2
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> inp1: array<f32>;
@group(0) @binding(3) var<storage, read> inp2: array<f32>;

// residual_backward: dinp1 (+)= dout, dinp2 (+)= dout
@group(0) @binding(1) var<storage, read_write> dinp1: array<f32>;
@group(0) @binding(2) var<storage, read_write> dinp2: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;

@compute @workgroup_size(256)
fn residual_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.N) { return; }
  out[i] = inp1[i] + p.alpha * inp2[i];
}

@compute @workgroup_size(256)
fn residual_backward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.N) { return; }
  let d = dout[i];
  let acc = p.accumulate != 0u;
  dinp1[i] = select(d, dinp1[i] + d, acc);
  dinp2[i] = select(d, dinp2[i] + d, acc);
}
