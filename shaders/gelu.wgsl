// GELU, tanh approximation (GPT-2). Twins: geluForward / geluBackward (core/model/ops.ts).

struct Params {
  N: u32,
  accumulate: u32, // backward: 1 adds (as the twin), 0 overwrites
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;  // forward out / backward dinp
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;

const S: f32 = 0.7978845608028654; // sqrt(2/pi)

// tanh saturates long before |u| = 15; clamping keeps exp-based tanh
// implementations away from inf/inf = NaN
fn tanh_safe(u: f32) -> f32 {
  return tanh(clamp(u, -15.0, 15.0));
}

@compute @workgroup_size(256)
fn gelu_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.N) { return; }
  let x = inp[i];
  out[i] = 0.5 * x * (1.0 + tanh_safe(S * (x + 0.044715 * x * x * x)));
}

@compute @workgroup_size(256)
fn gelu_backward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.N) { return; }
  let x = inp[i];
  let th = tanh_safe(S * (x + 0.044715 * x * x * x));
  let sech2 = 1.0 - th * th;
  let g = (0.5 * (1.0 + th) + 0.5 * x * sech2 * S * (1.0 + 3.0 * 0.044715 * x * x)) * dout[i];
  out[i] = select(g, out[i] + g, p.accumulate != 0u);
}
