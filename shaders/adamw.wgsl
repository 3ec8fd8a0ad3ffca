// AdamW with decoupled weight decay and bias correction. Twin: adamwUpdate (core/model/ops.ts).
// Weight decay per tensor: the uniform holds the layout's ranges (start, end, decay)
// merged where neighbours agree; each thread scans them (≤ 16, uniform loads) for its first element.
// The gradient is scaled by the clip factor grad_norm_finalize left in clip[1].

struct Params {
  N: u32,
  num_ranges: u32,
  _pad0: u32,
  _pad1: u32,
  ranges: array<vec4<u32>, 16>, // (start, end, decay 0/1, 0), ascending, covering [0,N)
}


@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> st: Step;
// The buffers are read as vec4s: their sizes are padded to 16 bytes (webgpu-plan.ts f32b) and the
// elements past N (zeros) are updated to zeros with the rest.
@group(0) @binding(1) var<storage, read_write> params: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> grads: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> m: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> v: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> clip: array<f32>;   // [norm², scale]

// Four consecutive elements per thread (one vec4 of each buffer), so the range scan runs once
// for them (a CPU adapter pays dearly for it). Grid: grid1(ceil(N / 4), 256).
@compute @workgroup_size(256)
fn adamw_update(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i0 = thread_index(id, lid, 256u) * 4u;
  if (i0 < p.N) { adamw_thread(i0); }
}

// --precision f16: the same step, then the thread's four new weights as halves into the copy the
// matmuls read (rounded once, here; nothing else converts the weights). Past N: 0.
@group(0) @binding(6) var<storage, read_write> copy_h: array<vec2<u32>>;

@compute @workgroup_size(256)
fn adamw_update_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i0 = thread_index(id, lid, 256u) * 4u;
  if (i0 >= p.N) { return; }
  let w = select(adamw_thread(i0), vec4<f32>(0.0), vec4<u32>(i0) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(p.N));
  copy_h[i0 / 4u] = vec2<u32>(pack2x16float(w.xy), pack2x16float(w.zw));
}

// Elements i0 .. i0+3 (i0 a multiple of 4); returns their new weights.
fn adamw_thread(i0: u32) -> vec4<f32> {
  // the weight decay of each of the four (a range may end inside them)
  var r = 0u;
  while (r + 1u < p.num_ranges && i0 >= p.ranges[r].y) { r++; }
  var decay = vec4<f32>(0.0);
  for (var k = 0u; k < 4u; k++) {
    while (i0 + k >= p.ranges[r].y && r + 1u < p.num_ranges) { r++; }
    decay[k] = select(0.0, st.weight_decay, p.ranges[r].z != 0u);
  }
  let j = i0 / 4u;
  let g = grads[j] * clip[1];
  let mi = st.beta1 * m[j] + (1.0 - st.beta1) * g;
  let vi = st.beta2 * v[j] + (1.0 - st.beta2) * g * g;
  m[j] = mi;
  v[j] = vi;
  let w = params[j];
  let nw = w - st.lr * ((mi / st.bc1) / (sqrt(vi / st.bc2) + st.eps) + decay * w);
  params[j] = nw;
  return nw;
}
