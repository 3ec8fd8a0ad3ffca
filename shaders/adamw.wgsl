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
@group(0) @binding(1) var<storage, read_write> params: array<f32>;
@group(0) @binding(2) var<storage, read> grads: array<f32>;
@group(0) @binding(3) var<storage, read_write> m: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;
@group(0) @binding(5) var<storage, read> clip: array<f32>;   // [norm², scale]

// ADAMW_PER_THREAD consecutive elements per thread, so the range scan runs once for them
// (a CPU adapter pays dearly for it). Grid: grid1(ceil(N / ADAMW_PER_THREAD), 256).
const ADAMW_PER_THREAD: u32 = 4u;

@compute @workgroup_size(256)
fn adamw_update(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i0 = thread_index(id, lid, 256u) * ADAMW_PER_THREAD;
  if (i0 < p.N) { adamw_thread(i0); }
}

// --precision f16: the same step, then the thread's four new weights as halves into the copy the
// matmuls read (rounded once, here; nothing else converts the weights). Past N: 0.
@group(0) @binding(6) var<storage, read_write> copy_h: array<vec2<u32>>;

@compute @workgroup_size(256)
fn adamw_update_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i0 = thread_index(id, lid, 256u) * ADAMW_PER_THREAD;
  if (i0 >= p.N) { return; }
  let w = adamw_thread(i0);
  copy_h[i0 / 4u] = vec2<u32>(pack2x16float(w.xy), pack2x16float(w.zw));
}

// Elements i0 .. i0+3 (those below N); returns their new weights, 0 past N.
fn adamw_thread(i0: u32) -> vec4<f32> {
  var r = 0u;
  while (r + 1u < p.num_ranges && i0 >= p.ranges[r].y) { r++; }
  var w = vec4<f32>(0.0);
  for (var i = i0; i < min(i0 + ADAMW_PER_THREAD, p.N); i++) {
    while (i >= p.ranges[r].y && r + 1u < p.num_ranges) { r++; }
    w[i - i0] = adamw_one(i, p.ranges[r].z != 0u);
  }
  return w;
}

fn adamw_one(i: u32, decay: bool) -> f32 {
  let wd = select(0.0, st.weight_decay, decay);
  let g = grads[i] * clip[1];
  let mi = st.beta1 * m[i] + (1.0 - st.beta1) * g;
  let vi = st.beta2 * v[i] + (1.0 - st.beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  let mhat = mi / st.bc1;
  let vhat = vi / st.bc2;
  let w = params[i];
  let nw = w - st.lr * (mhat / (sqrt(vhat) + st.eps) + wd * w);
  params[i] = nw;
  return nw;
}
