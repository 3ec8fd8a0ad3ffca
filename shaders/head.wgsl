// The LM head's cross-entropy a vocabulary chunk at a time: no (B·T, V) logits buffer exists.
// Twins: crossEntropyChunkForward / crossEntropyChunkBackward (core/model/ops-head.ts).
// A chunk's logits (N, W) are vocabulary ids [v0, v0 + W) of each row; `stats` keeps 4 floats a row:
// running max, Σ exp(x − max), the target's logit, and (after the last chunk) logsumexp.

struct Params {
  N: u32,       // rows (B·T)
  W: u32,       // the chunk's width
  v0: u32,      // the chunk's first vocabulary id
  flags: u32,   // forward: 1 first chunk (starts the statistics), 2 last chunk (writes the losses)
  dloss: f32,   // backward: d(mean loss)/d(loss row) = 1/(B·T)
}

@group(0) @binding(0) var<uniform> p: Params;

@group(0) @binding(1) var<storage, read_write> stats: array<vec4<f32>>; // (N)
@group(0) @binding(2) var<storage, read_write> losses: array<f32>;      // (N)
@group(0) @binding(3) var<storage, read> logits: array<f32>;            // (N,W)
@group(0) @binding(4) var<storage, read> targets: array<u32>;           // (N)

// ce_chunk_backward: the chunk's logits, turned into dlogits in place
@group(0) @binding(3) var<storage, read_write> dlogits: array<f32>;     // (N,W)
@group(0) @binding(1) var<storage, read> stats_in: array<vec4<f32>>;

const FIRST: u32 = 1u;
const LAST: u32 = 2u;

// One workgroup per row: the chunk's max and Σ exp, folded into the row's running statistics
// (online softmax). Grid: rows (2-D past 65535).
@compute @workgroup_size(64)
fn ce_chunk_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let row = group_index(id);
  if (row >= p.N) { return; }
  let x = row * p.W;
  var mx = -3.402823e38;
  for (var i = lid; i < p.W; i += 64u) { mx = max(mx, logits[x + i]); }
  mx = wg_max(mx, lid, 64u);
  var sum = 0.0;
  for (var i = lid; i < p.W; i += 64u) { sum += exp(logits[x + i] - mx); }
  sum = wg_sum(sum, lid, 64u);
  if (lid != 0u) { return; }
  var s = vec4<f32>(-3.402823e38, 0.0, 0.0, 0.0);
  if ((p.flags & FIRST) == 0u) { s = stats[row]; }
  let m = max(s.x, mx);
  s.y = s.y * exp(s.x - m) + sum * exp(mx - m);
  s.x = m;
  let y = targets[row];
  if (y >= p.v0 && y < p.v0 + p.W) { s.z = logits[x + y - p.v0]; }
  if ((p.flags & LAST) != 0u) {
    s.w = m + log(s.y);
    losses[row] = s.w - s.z;
  }
  stats[row] = s;
}

// dlogits = (softmax − onehot(target))·dloss, softmax = exp(logit − logsumexp). One thread per element.
@compute @workgroup_size(256)
fn ce_chunk_backward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.N * p.W) { return; }
  let row = i / p.W;
  let onehot = select(0.0, 1.0, p.v0 + i % p.W == targets[row]);
  dlogits[i] = (exp(dlogits[i] - stats_in[row].w) - onehot) * p.dloss;
}
