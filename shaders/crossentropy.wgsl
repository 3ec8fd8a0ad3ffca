// The mean loss. Twin: meanLoss (core/model/ops.ts). mean_loss reduces the per-token losses (of the
// chunked head's cross-entropy, head.wgsl) on the GPU into one slot of the engine's loss ring (no
// readback inside a training step).

struct Params {
  N: u32,          // rows (B·T)
  accumulate: u32, // 1 adds (a micro-batch after the first), 0 overwrites
  scale: f32,      // 1 / the rows of the whole batch (its mean loss)
}


@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> st: Step;

@group(0) @binding(1) var<storage, read_write> ring: array<f32>;
@group(0) @binding(2) var<storage, read> losses_in: array<f32>;

// ring[loss_slot] (+)= Σ losses · scale: the mean loss, or a micro-batch's share of it. One workgroup.
@compute @workgroup_size(256)
fn mean_loss(id: Grid, @builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = lid; i < p.N; i += 256u) { s += losses_in[i]; }
  s = wg_sum(s, lid, 256u);
  if (lid == 0u) { ring[st.loss_slot] = select(0.0, ring[st.loss_slot], p.accumulate != 0u) + s * p.scale; }
}
