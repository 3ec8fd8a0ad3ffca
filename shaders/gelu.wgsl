// GELU, tanh approximation (GPT-2). Twins: geluForward / geluBackward (core/model/ops.ts).

struct Params {
  N: u32,
  accumulate: u32, // backward: 1 adds (as the twin), 0 overwrites
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;  // forward out / backward dinp
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;

@compute @workgroup_size(256)
fn gelu_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i < p.N) { out[i] = gelu(vec4<f32>(inp[i])).x; }
}

@compute @workgroup_size(256)
fn gelu_backward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.N) { return; }
  let x = inp[i];
  let th = tanh_safe(vec4<f32>(GELU_S * (x + 0.044715 * x * x * x))).x;
  let sech2 = 1.0 - th * th;
  let g = (0.5 * (1.0 + th) + 0.5 * x * sech2 * GELU_S * (1.0 + 3.0 * 0.044715 * x * x)) * dout[i];
  out[i] = select(g, out[i] + g, p.accumulate != 0u);
}
