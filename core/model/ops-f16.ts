// CPU twins of the f16-storage kernels (shaders/half.wgsl; the f16 forms of matmul, attention and
// adamw_update selected by defines).
// Each is its f32 twin from ops.ts with the rounding the kernel's storage does: inputs that the
// kernel reads as halves are rounded to f16 first, outputs it stores as halves are rounded after.
// Arithmetic stays f32, as in the kernels. Halves travel as Float32Arrays of f16 values here;
// packHalves / unpackHalves give the GPU layout (two halves a 32-bit word, element 2w low).

import { f16Table, f32BitsToF16Bits } from './f16.ts';
import * as op from './ops.ts';
import type { Arr } from './ops.ts';

const scratch = new Float32Array(1);
const scratchBits = new Uint32Array(scratch.buffer);

/** x rounded to the nearest f16 (ties to even, through f32 first), as a number. */
export function toHalf(x: number): number {
  scratch[0] = x;
  return f16Table()[f32BitsToF16Bits(scratchBits[0])];
}

/** a rounded to f16 in place; returns a. */
export function roundHalves<A extends Arr>(a: A): A {
  for (let i = 0; i < a.length; i++) a[i] = toHalf(a[i]);
  return a;
}

/** A rounded copy (the inputs a kernel reads as halves). */
const halves = (a: Arr): Float32Array => roundHalves(Float32Array.from(a));

/** Words of n halves. */
export const halfWords = (n: number): number => Math.ceil(n / 2);

/** The GPU layout of `src`'s first n values as halves: element 2w in the low 16 bits of word w, a last odd slot 0. */
export function packHalves(src: ArrayLike<number>, n = src.length, out = new Uint32Array(halfWords(n))): Uint32Array {
  const h = new Uint16Array(out.buffer, out.byteOffset, 2 * halfWords(n));
  for (let i = 0; i < n; i++) {
    scratch[0] = src[i];
    h[i] = f32BitsToF16Bits(scratchBits[0]);
  }
  if (n % 2 === 1) h[n] = 0;
  return out;
}

/** n values from halves in the GPU layout (exact: every half is an f32). */
export function unpackHalves(words: Uint32Array, n: number, out = new Float32Array(n)): Float32Array {
  const h = new Uint16Array(words.buffer, words.byteOffset, 2 * halfWords(n));
  const table = f16Table();
  for (let i = 0; i < n; i++) out[i] = table[h[i]];
  return out;
}

// ---------------------------------------------------------------------------- twins

/** Halves in, f32 out: a copy of `a` rounded where `half` (an operand the kernel reads as halves). */
const asStored = (a: Arr, half: boolean): Arr => (half ? halves(a) : a);

/** pack_f16: out (halves) = inp, rounded once (the weight copy after setParams). */
export function packF16(out: Arr, inp: Arr, N: number): void {
  for (let i = 0; i < N; i++) out[i] = toHalf(inp[i]);
}

/** pseudo_gradient_f16: Δ (halves) = θ_start − θ from the f32 masters: one rounding, at the end. */
export function pseudoGradientF16(delta: Arr, thetaStart: Arr, theta: Arr, N: number): void {
  op.pseudoGradient(delta, thetaStart, theta, N);
  roundHalves(delta.subarray(0, N));
}

/** gelu_backward_f16, in place: grad (f32) = gelu'(inp)·grad, inp read as halves. */
export function geluBackwardF16(grad: Arr, inp: Arr, N: number): void {
  const dout = Float32Array.from(grad.subarray(0, N));
  grad.fill(0, 0, N);
  op.geluBackward(grad, halves(inp), dout, N);
}

/** encoder_forward_f16: out (halves) = wte[inp] + wpe[t], both read from the half weight copy. */
export function encoderForwardF16(out: Arr, inp: op.Tokens, wte: Arr, wpe: Arr, B: number, T: number, C: number): void {
  op.encoderForward(out, inp, halves(wte), halves(wpe), B, T, C);
  roundHalves(out.subarray(0, B * T * C));
}

/** layernorm_forward_f16: out (halves) from the stream read as halves; mean, rstd, weight, bias f32. */
export function layernormForwardF16(
  out: Arr,
  mean: Arr,
  rstd: Arr,
  inp: Arr,
  weight: Arr,
  bias: Arr,
  B: number,
  T: number,
  C: number,
): void {
  op.layernormForward(out, mean, rstd, halves(inp.subarray(0, B * T * C)), weight, bias, B, T, C);
  roundHalves(out.subarray(0, B * T * C));
}

/** residual_layernorm_forward_f16: res (halves) = inp1 + inp2 (halves), rounded once; out (halves) = layernorm(res). */
export function residualLayernormForwardF16(
  res: Arr,
  out: Arr,
  mean: Arr,
  rstd: Arr,
  inp1: Arr,
  inp2: Arr,
  weight: Arr,
  bias: Arr,
  B: number,
  T: number,
  C: number,
): void {
  const n = B * T * C;
  op.residualForward(res, halves(inp1.subarray(0, n)), halves(inp2.subarray(0, n)), n);
  roundHalves(res.subarray(0, n));
  layernormForwardF16(out, mean, rstd, res, weight, bias, B, T, C);
}

/**
 * matmul with f16 operands: inp (A) read as halves where `halfIn`, the weight always from the
 * half copy, out stored as halves where `halfOut` (then the fused GELU's output too, in `gelu`).
 */
export function matmulForwardF16(
  out: Arr,
  inp: Arr,
  weight: Arr,
  bias: Arr | null,
  B: number,
  T: number,
  C: number,
  OC: number,
  f: { halfIn: boolean; halfOut: boolean; gelu?: Arr },
): void {
  op.matmulForward(out, asStored(inp, f.halfIn), halves(weight), bias && halves(bias), B, T, C, OC);
  if (f.gelu) op.geluForward(f.gelu, out, B * T * OC); // from the f32 sums, as the epilogue
  if (f.halfOut) {
    roundHalves(out);
    if (f.gelu) roundHalves(f.gelu);
  }
}

/** matmul backward with the layer's input stored as halves (`halfIn`) and W from the half copy; gradients f32. */
export function matmulBackwardF16(
  dinp: Arr,
  dweight: Arr,
  dbias: Arr | null,
  dout: Arr,
  inp: Arr,
  weight: Arr,
  B: number,
  T: number,
  C: number,
  OC: number,
  f: { halfIn: boolean },
): void {
  op.matmulBackward(dinp, dweight, dbias, dout, asStored(inp, f.halfIn), halves(weight), B, T, C, OC);
}

/** attention_forward with qkv read as halves and out stored as halves (the softmax in f32). */
export function attentionForwardF16(
  out: Arr,
  preatt: Arr,
  att: Arr,
  inp: Arr,
  B: number,
  T: number,
  C: number,
  NH: number,
): void {
  op.attentionForward(out, preatt, att, halves(inp), B, T, C, NH);
  roundHalves(out);
}

/** attention backward from the halves the forward stored (qkv); dout and dinp f32. */
export function attentionBackwardF16(
  dinp: Arr,
  dpreatt: Arr,
  datt: Arr,
  dout: Arr,
  inp: Arr,
  att: Arr,
  B: number,
  T: number,
  C: number,
  NH: number,
): void {
  op.attentionBackward(dinp, dpreatt, datt, dout, halves(inp), att, B, T, C, NH);
}

/**
 * adamw_update_f16: the f32 AdamW step on the f32 masters (params, m, v), then the weight copy the
 * matmuls read: copy (halves) = params rounded once.
 */
export function adamwUpdateF16(
  params: Arr,
  copy: Arr,
  grads: Arr,
  m: Arr,
  v: Arr,
  N: number,
  lr: number,
  beta1: number,
  beta2: number,
  eps: number,
  weightDecay: number,
  step: number,
  gradScale: number,
): void {
  op.adamwUpdate(params, grads, m, v, N, lr, beta1, beta2, eps, weightDecay, step, gradScale);
  packF16(copy, params, N);
}
