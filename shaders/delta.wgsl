// Pseudo-gradient Δ = θ_start − θ, what an island sends after its inner steps.
// Twin: pseudoGradient (core/model/ops.ts).

struct Params {
  N: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> delta: array<f32>;
@group(0) @binding(2) var<storage, read> theta_start: array<f32>;
@group(0) @binding(3) var<storage, read> theta: array<f32>;

@compute @workgroup_size(256)
fn pseudo_gradient(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                   @builtin(local_invocation_index) lid: u32) {
  let i = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (i >= p.N) { return; }
  delta[i] = theta_start[i] - theta[i];
}
