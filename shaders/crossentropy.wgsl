// Fused softmax + cross-entropy. Twins: softmaxCrossEntropyForward / softmaxCrossEntropyBackward
// (core/model/ops.ts). mean_loss reduces the per-token losses on the GPU into one slot
// of the engine's loss ring (no readback inside a training step).

struct Params {
  N: u32,          // rows (B·T)
  V: u32,
  accumulate: u32, // backward: 1 adds (as the twin), 0 overwrites
  dloss: f32,      // backward: d(mean loss)/d(loss row) = 1/(B·T)
}


@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(8) var<uniform> st: Step;

// softmax_crossentropy_forward
@group(0) @binding(1) var<storage, read_write> losses: array<f32>; // (N)
@group(0) @binding(2) var<storage, read_write> probs: array<f32>;  // (N,V)
@group(0) @binding(3) var<storage, read> logits: array<f32>;       // (N,V)
@group(0) @binding(4) var<storage, read> targets: array<u32>;      // (N)

// softmax_crossentropy_backward
@group(0) @binding(1) var<storage, read_write> dlogits: array<f32>; // (N,V)
@group(0) @binding(2) var<storage, read> probs_in: array<f32>;

// mean_loss
@group(0) @binding(1) var<storage, read_write> ring: array<f32>;
@group(0) @binding(2) var<storage, read> losses_in: array<f32>;

// One workgroup per row. Grid: rows (2-D when there are more than 65535).
@compute @workgroup_size(64)
fn softmax_crossentropy_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let row = group_index(id);
  if (row >= p.N) { return; }
  let x = row * p.V;
  var mx = -3.402823e38;
  for (var i = lid; i < p.V; i += 64u) { mx = max(mx, logits[x + i]); }
  mx = wg_max(mx, lid, 64u);
  var sum = 0.0;
  for (var i = lid; i < p.V; i += 64u) {
    let e = exp(logits[x + i] - mx);
    probs[x + i] = e;
    sum += e;
  }
  let inv = 1.0 / wg_sum(sum, lid, 64u);
  for (var i = lid; i < p.V; i += 64u) { probs[x + i] *= inv; }
  if (lid == 0u) {
    // the target's prob is recomputed, not re-read: another thread wrote probs[target]
    let y = targets[row];
    losses[row] = -log(exp(logits[x + y] - mx) * inv);
  }
}

// dlogits (+)= (probs − onehot(target))·dloss, one thread per element.
@compute @workgroup_size(256)
fn softmax_crossentropy_backward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.N * p.V) { return; }
  let row = i / p.V;
  let onehot = select(0.0, 1.0, i % p.V == targets[row]);
  let g = (probs_in[i] - onehot) * p.dloss;
  dlogits[i] = select(g, dlogits[i] + g, p.accumulate != 0u);
}

// ring[loss_slot] = mean(losses). One workgroup.
@compute @workgroup_size(256)
fn mean_loss(id: Grid, @builtin(local_invocation_index) lid: u32) {
  var s = 0.0;
  for (var i = lid; i < p.N; i += 256u) { s += losses_in[i]; }
  s = wg_sum(s, lid, 256u);
  if (lid == 0u) { ring[st.loss_slot] = s / f32(p.N); }
}
