// Token + position embedding. Twins: encoderForward / encoderBackward (core/model/ops.ts);
// encoder_forward_f16 (--precision f16): encoderForwardF16 (core/model/ops-f16.ts).
// WGSL has no float atomics, so the backward gathers instead of scattering: the
// workgroup that owns vocab row v scans the token ids and sums the positions
// holding v. Deterministic and race-free; the scan is uniform per workgroup.

struct Params {
  B: u32,
  T: u32,
  C: u32,
  V: u32,
  wte_off: u32,     // row v_lo of wte (V,C): in params (forward) or grads (backward)
  wpe_off: u32,     // wpe (maxT,C)
  maxT: u32,        // rows of wpe (the config's blockSize)
  accumulate: u32,  // backward: 1 adds into the grads (as the twin), 0 overwrites
  v_lo: u32,        // the vocabulary window [v_lo, v_hi) this dispatch's binding of wte holds
  v_hi: u32,
}

@group(0) @binding(0) var<uniform> p: Params;

// encoder_forward: out (B,T,C) = wte[inp] + wpe[t], a thread per 16-byte chunk of out: 4 f32 from
// params, or (encoder_forward_f16) 8 halves from the matmuls' half weight copy, stored as halves
// (the residual stream of --precision f16; packed two to a word, element 2w low, as half.wgsl)
@group(0) @binding(1) var<storage, read_write> out4: array<vec4f>;
@group(0) @binding(1) var<storage, read_write> out_h8: array<vec4u>;
@group(0) @binding(2) var<storage, read> inp: array<u32>;       // (B,T) token ids
@group(0) @binding(3) var<storage, read> params4: array<vec4f>;  // wte's window
@group(0) @binding(3) var<storage, read> wcopy_h8: array<vec4u>;
@group(0) @binding(4) var<storage, read> wpe4: array<vec4f>;     // wpe (the same buffer, its own binding)
@group(0) @binding(4) var<storage, read> wpe_h8: array<vec4u>;

// backward
@group(0) @binding(1) var<storage, read_write> grads: array<f32>;
@group(0) @binding(3) var<storage, read> dout: array<f32>;      // (B,T,C)

const WG: u32 = 64u;
const CHUNK: u32 = 256u; // token ids staged per pass (4 per thread)
var<workgroup> tok: array<u32, CHUNK>;

// Chunk i of out with n chunks a row (C / 4 or C / 8): (its wte chunk, its wpe chunk), in chunks
// (the offsets are multiples of the chunk).
fn enc_chunks(i: u32, n: u32) -> vec2u {
  let bt = i / n;
  let c = i % n;
  return vec2u((p.wte_off + (inp[bt] - p.v_lo) * p.C) / (p.C / n) + c, p.wpe_off / (p.C / n) + (bt % p.T) * n + c);
}

// Whether chunk i's token id lies in this dispatch's vocabulary window (the others are another's).
fn in_window(i: u32, n: u32) -> bool {
  let v = inp[i / n];
  return v >= p.v_lo && v < p.v_hi;
}

@compute @workgroup_size(256)
fn encoder_forward(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.B * p.T * p.C / 4u || !in_window(i, p.C / 4u)) { return; }
  let at = enc_chunks(i, p.C / 4u);
  out4[i] = params4[at.x] + wpe4[at.y];
}

fn h8_unpack(w: vec4u) -> mat2x4f {
  return mat2x4f(vec4f(unpack2x16float(w.x), unpack2x16float(w.y)), vec4f(unpack2x16float(w.z), unpack2x16float(w.w)));
}
fn h8_pack(v: mat2x4f) -> vec4u {
  return vec4u(pack2x16float(v[0].xy), pack2x16float(v[0].zw), pack2x16float(v[1].xy), pack2x16float(v[1].zw));
}

@compute @workgroup_size(256)
fn encoder_forward_f16(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.B * p.T * p.C / 8u || !in_window(i, p.C / 8u)) { return; }
  let at = enc_chunks(i, p.C / 8u);
  out_h8[i] = h8_pack(h8_unpack(wcopy_h8[at.x]) + h8_unpack(wpe_h8[at.y]));
}

// dwte[v,c] (+)= Σ_{bt: inp[bt]=v} dout[bt,c], for VR vocab rows per workgroup (one scan of the
// token ids serves them all), rows of the window [v_lo, v_hi). Grid (ceil(C/64), ceil((v_hi − v_lo)/VR)).
const VR: u32 = 8u;
@compute @workgroup_size(64)
fn encoder_backward_wte(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let v0 = p.v_lo + id.wid.y * VR;
  let c = id.wid.x * WG + lid;
  let BT = p.B * p.T;
  var acc: array<f32, VR>;
  for (var base = 0u; base < BT; base += CHUNK) {
    for (var j = lid; j < CHUNK; j += WG) {
      if (base + j < BT) { tok[j] = inp[base + j]; }
    }
    workgroupBarrier();
    let n = min(CHUNK, BT - base);
    for (var j = 0u; j < n; j++) {
      let r = tok[j] - v0; // ≥ VR (wrapping) for tokens outside this workgroup's rows
      if (r < VR && c < p.C) { acc[r] += dout[(base + j) * p.C + c]; }
    }
    workgroupBarrier();
  }
  if (c < p.C) {
    for (var r = 0u; r < min(VR, p.v_hi - v0); r++) {
      let idx = p.wte_off + (v0 - p.v_lo + r) * p.C + c;
      grads[idx] = select(acc[r], grads[idx] + acc[r], p.accumulate != 0u);
    }
  }
}

// dwpe[t,c] (+)= Σ_b dout[b,t,c]; rows t ≥ T get 0 when overwriting. One thread per (t,c).
@compute @workgroup_size(256)
fn encoder_backward_wpe(id: Grid, @builtin(local_invocation_index) lid: u32) {
  let i = thread_index(id, lid, 256u);
  if (i >= p.maxT * p.C) { return; }
  let t = i / p.C;
  let c = i % p.C;
  var acc = 0.0;
  if (t < p.T) {
    for (var b = 0u; b < p.B; b++) { acc += dout[(b * p.T + t) * p.C + c]; }
  }
  let idx = p.wpe_off + i;
  grads[idx] = select(acc, grads[idx] + acc, p.accumulate != 0u);
}
