// The kernels' SIMD helpers: addresses, f32x4 splats and sums, exp and tanh on four lanes, dot and axpy.
// Inlined where they are used (@inline), so splitting the kernels over files costs nothing.

@inline export function at(base: usize, index: i32): usize {
  return base + (<usize>index << 2);
}

@inline export function splat(x: f32): v128 {
  return f32x4.splat(x);
}

@inline export function hsum(v: v128): f32 {
  return (
    f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1) + (f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3))
  );
}

/** exp on four lanes (Cephes expf: 2^n · p(r), |r| ≤ ln2/2); inputs clamped to f32's normal range. */
@inline export function exp4(x0: v128): v128 {
  const x = f32x4.max(f32x4.min(x0, splat(88.37626)), splat(-87.33654));
  const n = f32x4.nearest(f32x4.mul(x, splat(1.44269504088896341)));
  let r = f32x4.sub(x, f32x4.mul(n, splat(0.693359375)));
  r = f32x4.sub(r, f32x4.mul(n, splat(-2.12194440e-4)));
  let p = splat(1.9875691500e-4);
  p = f32x4.add(f32x4.mul(p, r), splat(1.3981999507e-3));
  p = f32x4.add(f32x4.mul(p, r), splat(8.3334519073e-3));
  p = f32x4.add(f32x4.mul(p, r), splat(4.1665795894e-2));
  p = f32x4.add(f32x4.mul(p, r), splat(1.6666665459e-1));
  p = f32x4.add(f32x4.mul(p, r), splat(5.0000001201e-1));
  const y = f32x4.add(f32x4.add(f32x4.mul(f32x4.mul(p, r), r), r), splat(1));
  const pow2n = i32x4.shl(i32x4.add(i32x4.trunc_sat_f32x4_s(n), i32x4.splat(127)), 23);
  return f32x4.mul(y, pow2n);
}

@inline export function exp1(x: f32): f32 {
  return f32x4.extract_lane(exp4(splat(x)), 0);
}

/** tanh on four lanes: a 13/6 rational approximation on [−7.9, 7.9] (Eigen's float tanh). */
@inline export function tanh4(x0: v128): v128 {
  const x = f32x4.max(f32x4.min(x0, splat(7.90531110763549805)), splat(-7.90531110763549805));
  const x2 = f32x4.mul(x, x);
  let p = f32x4.add(f32x4.mul(x2, splat(-2.76076847742355e-16)), splat(2.00018790482477e-13));
  p = f32x4.add(f32x4.mul(x2, p), splat(-8.60467152213735e-11));
  p = f32x4.add(f32x4.mul(x2, p), splat(5.12229709037114e-8));
  p = f32x4.add(f32x4.mul(x2, p), splat(1.48572235717979e-5));
  p = f32x4.add(f32x4.mul(x2, p), splat(6.37261928875436e-4));
  p = f32x4.add(f32x4.mul(x2, p), splat(4.89352455891786e-3));
  p = f32x4.mul(x, p);
  let q = f32x4.add(f32x4.mul(x2, splat(1.19825839466702e-6)), splat(1.18534705686654e-4));
  q = f32x4.add(f32x4.mul(x2, q), splat(2.26843463243900e-3));
  q = f32x4.add(f32x4.mul(x2, q), splat(4.89352518554385e-3));
  const tiny = f32x4.lt(f32x4.abs(x0), splat(0.0004));
  return v128.bitselect(x0, f32x4.div(p, q), tiny);
}

/** Σ a[i]·b[i] over n floats, four lanes then a horizontal sum. */
@inline export function dot(a: usize, b: usize, n: i32): f32 {
  let acc = splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) acc = f32x4.add(acc, f32x4.mul(v128.load(at(a, i)), v128.load(at(b, i))));
  let s = hsum(acc);
  for (; i < n; i++) s += load<f32>(at(a, i)) * load<f32>(at(b, i));
  return s;
}

/** [a·b_0, a·b_1, a·b_2, a·b_3] over n floats, b_j at b + j·bs floats: four dots, then one transpose-sum. */
@inline export function dot4(a: usize, b: usize, bs: i32, n: i32): v128 {
  const b1 = at(b, bs),
    b2 = at(b, 2 * bs),
    b3 = at(b, 3 * bs);
  let s0 = splat(0),
    s1 = splat(0),
    s2 = splat(0),
    s3 = splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const x = v128.load(at(a, i));
    s0 = f32x4.add(s0, f32x4.mul(x, v128.load(at(b, i))));
    s1 = f32x4.add(s1, f32x4.mul(x, v128.load(at(b1, i))));
    s2 = f32x4.add(s2, f32x4.mul(x, v128.load(at(b2, i))));
    s3 = f32x4.add(s3, f32x4.mul(x, v128.load(at(b3, i))));
  }
  // lane j of the result = Σ of s_j's lanes, as (l0 + l2) + (l1 + l3)
  const e01 = f32x4.add(f32x4.shuffle(s0, s1, 0, 4, 1, 5), f32x4.shuffle(s0, s1, 2, 6, 3, 7));
  const e23 = f32x4.add(f32x4.shuffle(s2, s3, 0, 4, 1, 5), f32x4.shuffle(s2, s3, 2, 6, 3, 7));
  let r = f32x4.add(f32x4.shuffle(e01, e23, 0, 1, 4, 5), f32x4.shuffle(e01, e23, 2, 3, 6, 7));
  for (; i < n; i++) {
    const x = load<f32>(at(a, i));
    const col = f32x4.replace_lane(
      f32x4.replace_lane(
        f32x4.replace_lane(f32x4.splat(load<f32>(at(b, i))), 1, load<f32>(at(b1, i))),
        2,
        load<f32>(at(b2, i)),
      ),
      3,
      load<f32>(at(b3, i)),
    );
    r = f32x4.add(r, f32x4.mul(splat(x), col));
  }
  return r;
}

/** y[i] += s·x[i] over n floats. */
@inline export function axpy(y: usize, s: f32, x: usize, n: i32): void {
  const sv = splat(s);
  let i = 0;
  for (; i + 4 <= n; i += 4) v128.store(at(y, i), f32x4.add(v128.load(at(y, i)), f32x4.mul(sv, v128.load(at(x, i)))));
  for (; i < n; i++) store<f32>(at(y, i), load<f32>(at(y, i)) + s * load<f32>(at(x, i)));
}

/** row[i] = exp(row[i] − maxv) over n; returns Σ (lanes, then the tail). */
@inline export function expRow(row: usize, n: i32, maxv: f32): f32 {
  const mv = splat(maxv);
  let acc = splat(0);
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const e = exp4(f32x4.sub(v128.load(at(row, i)), mv));
    v128.store(at(row, i), e);
    acc = f32x4.add(acc, e);
  }
  let s = hsum(acc);
  for (; i < n; i++) {
    const e = exp1(load<f32>(at(row, i)) - maxv);
    store<f32>(at(row, i), e);
    s += e;
  }
  return s;
}

@inline export function scaleRow(row: usize, n: i32, k: f32): void {
  const kv = splat(k);
  let i = 0;
  for (; i + 4 <= n; i += 4) v128.store(at(row, i), f32x4.mul(v128.load(at(row, i)), kv));
  for (; i < n; i++) store<f32>(at(row, i), load<f32>(at(row, i)) * k);
}
