// CPU twins of the f16-storage kernels (shaders/half.wgsl, adamw_update_f16 in shaders/adamw.wgsl).
// Each is its f32 twin from ops.ts with the rounding the kernel's storage does: inputs that the
// kernel reads as halves are rounded to f16 first, outputs it stores as halves are rounded after.
// Arithmetic stays f32, as in the kernels. Halves travel as Float32Arrays of f16 values here;
// packHalves / unpackHalves give the GPU layout (two halves a 32-bit word, element 2w low).

import { f16Table, f32BitsToF16Bits } from '../codec/f16.ts';
import * as op from './ops.ts';
import type { Arr, Tokens } from './ops.ts';

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

/** gelu_forward_f16: out (halves) = gelu(inp as halves). */
export function geluForwardF16(out: Arr, inp: Arr, N: number): void {
  op.geluForward(out, halves(inp), N);
  roundHalves(out);
}

/** gelu_backward_f16: dinp (halves) (+)= gelu'(inp)·dout, every operand a half; the sum rounded once. */
export function geluBackwardF16(dinp: Arr, inp: Arr, dout: Arr, N: number): void {
  const d = halves(dinp.subarray(0, N));
  op.geluBackward(d, halves(inp), halves(dout), N);
  dinp.set(roundHalves(d));
}

/** residual_forward_f16: out (halves) = inp1 + alpha·inp2 (alpha −1: a difference). */
export function residualForwardF16(out: Arr, inp1: Arr, inp2: Arr, N: number, alpha = 1): void {
  const a = halves(inp1), b = halves(inp2);
  for (let i = 0; i < N; i++) out[i] = toHalf(Math.fround(a[i] + Math.fround(alpha * b[i])));
}

/** pseudo_gradient_f16: Δ (halves) = θ_start − θ from the f32 masters: one rounding, at the end. */
export function pseudoGradientF16(delta: Arr, thetaStart: Arr, theta: Arr, N: number): void {
  op.pseudoGradient(delta, thetaStart, theta, N);
  roundHalves(delta);
}

/** layernorm_forward_f16: out (halves) from inp (halves); mean and rstd f32; weight and bias f32. */
export function layernormForwardF16(out: Arr, mean: Arr, rstd: Arr, inp: Arr, weight: Arr, bias: Arr, B: number, T: number, C: number): void {
  op.layernormForward(out, mean, rstd, halves(inp), weight, bias, B, T, C);
  roundHalves(out);
}

/** encoder_forward_f16: out (halves) = wte[inp] + wpe[t], both from the weight copy (halves). */
export function encoderForwardF16(out: Arr, inp: Tokens, wte: Arr, wpe: Arr, B: number, T: number, C: number): void {
  op.encoderForward(out, inp, halves(wte), halves(wpe), B, T, C);
  roundHalves(out);
}

/**
 * adamw_update_f16: the f32 AdamW step on the f32 masters (params, m, v), then the weight copy the
 * matmuls read: copy (halves) = params rounded once.
 */
export function adamwUpdateF16(params: Arr, copy: Arr, grads: Arr, m: Arr, v: Arr, N: number, lr: number, beta1: number, beta2: number, eps: number, weightDecay: number, step: number, gradScale: number): void {
  op.adamwUpdate(params, grads, m, v, N, lr, beta1, beta2, eps, weightDecay, step, gradScale);
  for (let i = 0; i < N; i++) copy[i] = toHalf(params[i]);
}
