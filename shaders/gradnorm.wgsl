// Global gradient norm and the clip scale, on the GPU (no readback).
// Twins: gradNormSquared / clipScale (core/model/ops.ts).
// Two deterministic passes: per-workgroup partial sums of g², then one workgroup
// sums the partials and writes clip = [norm², scale] for adamw_update.

struct Params {
  N: u32,
  num_partials: u32, // = workgroups of grad_norm_partial
  lo: u32,           // grad_norm_partial_piece: the vec4s [lo, hi) of grads its binding holds
  hi: u32,
  flags: u32,        // grad_norm_partial_piece: 1 the first piece, 2 the last
}


@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> st: Step;

// grad_norm_partial
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<storage, read> grads: array<vec4<f32>>; // padded to 16 bytes with zeros (webgpu-plan.ts f32b)

// grad_norm_partial_piece: each thread's running sum, from one piece to the next
@group(0) @binding(3) var<storage, read_write> carry: array<f32>;

// grad_norm_finalize
@group(0) @binding(1) var<storage, read_write> clip: array<f32>;    // [norm², scale]
@group(0) @binding(2) var<storage, read> partials_in: array<f32>;

// Grid (num_partials): a grid-stride loop over vec4s, so the partial count stays fixed.
@compute @workgroup_size(256)
fn grad_norm_partial(id: Grid, @builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = id.wid.x * 256u + lid; i < (p.N + 3u) / 4u; i += p.num_partials * 256u) {
    let g = grads[i];
    s += dot(g, g);
  }
  s = wg_sum(s, lid, 256u);
  if (lid == 0u) { partials[id.wid.x] = s; }
}

// grad_norm_partial over grads too large for one binding, one dispatch per piece [lo, hi): each thread adds the
// same vec4s in the same order as above, its running sum kept in carry between pieces; the last piece reduces it.
@compute @workgroup_size(256)
fn grad_norm_partial_piece(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let t = id.wid.x * 256u + lid;
  let R = p.num_partials * 256u;
  var s = select(carry[t], 0.0, (p.flags & 1u) != 0u);
  for (var i = p.lo + (t + R - p.lo % R) % R; i < p.hi; i += R) {
    let g = grads[i - p.lo];
    s += dot(g, g);
  }
  if ((p.flags & 2u) == 0u) {
    carry[t] = s;
    return;
  }
  s = wg_sum(s, lid, 256u);
  if (lid == 0u) { partials[id.wid.x] = s; }
}

@compute @workgroup_size(256)
fn grad_norm_finalize(id: Grid, @builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = lid; i < p.num_partials; i += 256u) { s += partials_in[i]; }
  s = wg_sum(s, lid, 256u);
  if (lid == 0u) {
    let norm = sqrt(s);
    var scale = 1.0;
    if (st.max_norm > 0.0 && norm > st.max_norm) { scale = st.max_norm / (norm + 1e-6); }
    clip[0] = s;
    clip[1] = scale;
  }
}
