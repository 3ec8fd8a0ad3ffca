// Residual add. Twins: residualForward / residualBackward (core/model/ops.ts).

struct Params {
  N: u32,
  accumulate: u32, // backward: 1 adds (as the twin), 0 overwrites
}

@group(0) @binding(0) var<uniform> p: Params;

// residual_forward: out = inp1 + inp2
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> inp1: array<f32>;
@group(0) @binding(3) var<storage, read> inp2: array<f32>;

// residual_backward: dinp1 (+)= dout, dinp2 (+)= dout
@group(0) @binding(1) var<storage, read_write> dinp1: array<f32>;
@group(0) @binding(2) var<storage, read_write> dinp2: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;

fn flat_index(wid: vec3u, nwg: vec3u, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * 256u + lid;
}

@compute @workgroup_size(256)
fn residual_forward(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                    @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i >= p.N) { return; }
  out[i] = inp1[i] + inp2[i];
}

@compute @workgroup_size(256)
fn residual_backward(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                     @builtin(local_invocation_index) lid: u32) {
  let i = flat_index(wid, nwg, lid);
  if (i >= p.N) { return; }
  let d = dout[i];
  let acc = p.accumulate != 0u;
  dinp1[i] = select(d, dinp1[i] + d, acc);
  dinp2[i] = select(d, dinp2[i] + d, acc);
}
