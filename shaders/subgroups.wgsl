// The subgroup half of the prelude's reductions, joined by withPrelude when the kernels
// use subgroups (else a stub that is never called). n is the workgroup size.

fn sg_combine(x: vec2<f32>, is_max: bool) -> vec2<f32> {
  if (is_max) { return subgroupMax(x); }
  return subgroupAdd(x);
}

// Barriers outside any branch: subgroup results are not workgroup-uniform.
fn sg_reduce2(x: vec2<f32>, lid: u32, n: u32, is_max: bool) -> vec2<f32> {
  let size = subgroupAdd(1u);
  let lane = subgroupExclusiveAdd(1u);
  let v = sg_combine(x, is_max);
  if (lane == 0u) { wg_red[lid / size] = v; }
  workgroupBarrier();
  var acc = select(vec2<f32>(0.0), vec2<f32>(-3.402823e38), is_max); // identity
  for (var j = lane; j < max(1u, n / size); j += size) { acc = combine(acc, wg_red[j], is_max); }
  let r = sg_combine(acc, is_max);
  workgroupBarrier(); // wg_red is reused by the next call
  return r;
}

// seg_sum2's subgroup path: a butterfly over the aligned groups of min(seg, size) lanes, then,
// where a segment spans several subgroups, their partials through workgroup memory.
fn sg_seg_sum2(x: vec2<f32>, lid: u32, seg: u32) -> vec2<f32> {
  let size = subgroupAdd(1u);
  let lane = subgroupExclusiveAdd(1u);
  var v = x;
  for (var o = 1u; o < seg; o <<= 1u) {
    let y = subgroupShuffleXor(v, o);
    if (o < size) { v += y; }
  }
  if (lane == 0u) { wg_red[lid / size] = v; }
  workgroupBarrier();
  let n = max(1u, seg / size);
  var s = vec2<f32>(0.0);
  for (var k = 0u; k < n; k++) { s += wg_red[(lid / seg) * n + k]; }
  return select(s, v, size >= seg);
}
