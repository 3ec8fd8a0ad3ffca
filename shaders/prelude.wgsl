// Joined in front of every shader by withPrelude (shaders/kernel.ts):
// the per-step uniform and the workgroup reductions, written once.

// Per-step values shared by mean_loss, grad_norm_finalize and adamw_update (binding 8).
struct Step {
  lr: f32,
  beta1: f32,
  beta2: f32,
  eps: f32,
  weight_decay: f32,
  bc1: f32,        // 1 − beta1^t
  bc2: f32,        // 1 − beta2^t
  max_norm: f32,   // ≤ 0: no clipping
  loss_slot: u32,
  step: u32,
  _pad0: u32,
  _pad1: u32,
}

// Every entry point's workgroup builtins (uniform: barriers may depend on them).
struct Grid {
  @builtin(workgroup_id) wid: vec3u,
  @builtin(num_workgroups) nwg: vec3u,
}

// Workgroup index of a 1-D launch, split 2-D past 65535 groups (grid1 in kernel.ts).
fn group_index(g: Grid) -> u32 {
  return g.wid.y * g.nwg.x + g.wid.x;
}

// Thread index of a 1-D launch of `wg`-thread workgroups.
fn thread_index(g: Grid, lid: u32, wg: u32) -> u32 {
  return group_index(g) * wg + lid;
}

// Two sums (or maxima) over the n threads of a workgroup (n a power of two ≤ 256);
// every thread gets the result. Without subgroups: a tree in workgroup memory. With them
// (SUBGROUPS = true, `enable subgroups;` put first by withPrelude): a subgroup reduction,
// the subgroups' partials through workgroup memory, and a subgroup reduction of those.
// Either way the order is fixed for a given adapter: deterministic.
const SUBGROUPS: bool = {{SUBGROUPS}};

var<workgroup> wg_red: array<vec2<f32>, 256>;

fn combine(a: vec2<f32>, b: vec2<f32>, is_max: bool) -> vec2<f32> {
  return select(a + b, max(a, b), is_max);
}

fn wg_reduce2(x: vec2<f32>, lid: u32, n: u32, is_max: bool) -> vec2<f32> {
  if (SUBGROUPS) { return sg_reduce2(x, lid, n, is_max); }
  wg_red[lid] = x;
  workgroupBarrier();
  for (var s = n / 2u; s > 0u; s >>= 1u) {
    if (lid < s) { wg_red[lid] = combine(wg_red[lid], wg_red[lid + s], is_max); }
    workgroupBarrier();
  }
  let r = wg_red[0];
  workgroupBarrier(); // wg_red is reused by the next call
  return r;
}

// The sum over each segment of `seg` consecutive threads (a power of two ≤ 64, uniform), given to
// every thread of the segment: the LayerNorm rows of layernorm.wgsl. Without subgroups a tree in
// workgroup memory (log2 seg barriers), with them a butterfly in the subgroup and its partials
// through workgroup memory (one barrier). Called once per invocation: wg_red is not reused after.
fn seg_sum2(x: vec2<f32>, lid: u32, seg: u32) -> vec2<f32> {
  if (SUBGROUPS) { return sg_seg_sum2(x, lid, seg); }
  wg_red[lid] = x;
  workgroupBarrier();
  for (var s = seg / 2u; s > 0u; s >>= 1u) {
    if (lid % seg < s) { wg_red[lid] += wg_red[lid + s]; }
    workgroupBarrier();
  }
  return wg_red[lid - lid % seg];
}

fn wg_sum2(x: vec2<f32>, lid: u32, n: u32) -> vec2<f32> { return wg_reduce2(x, lid, n, false); }
fn wg_sum(x: f32, lid: u32, n: u32) -> f32 { return wg_reduce2(vec2<f32>(x, 0.0), lid, n, false).x; }
fn wg_max(x: f32, lid: u32, n: u32) -> f32 { return wg_reduce2(vec2<f32>(x, 0.0), lid, n, true).x; }

// Column sums in a 256-thread workgroup laid out as 64 columns × 4 row strides: thread
// lid < 64 gets the sum of its column's four values (in a fixed order).
fn wg_fold4(x: vec2<f32>, lid: u32) -> vec2<f32> {
  wg_red[lid] = x;
  workgroupBarrier();
  let c = lid % 64u;
  return (wg_red[c] + wg_red[c + 64u]) + (wg_red[c + 128u] + wg_red[c + 192u]);
}

// GELU, tanh approximation (GPT-2): gelu_forward, and the matmul's fused epilogue.
// tanh saturates long before |u| = 15; clamping keeps exp-based tanh away from inf/inf = NaN.
const GELU_S: f32 = 0.7978845608028654; // sqrt(2/pi)

fn tanh_safe(u: vec4<f32>) -> vec4<f32> {
  return tanh(clamp(u, vec4<f32>(-15.0), vec4<f32>(15.0)));
}

fn gelu(x: vec4<f32>) -> vec4<f32> {
  return 0.5 * x * (1.0 + tanh_safe(GELU_S * (x + 0.044715 * x * x * x)));
}
