// Where the Wasm engine's tensors live in its memory: byte addresses for θ, its gradient, the AdamW
// moments, θ_start and Δ, the activations the backward reads (per layer, as llm.c's
// ActivationTensors, less preatt: the softmax is done in place) and one layer's worth of gradient
// scratch (the residual stream's gradient flows through one buffer). Everything is allocated once.

import { type GPTConfig, paramLayout } from '../../model/config.ts';

/** Floats per (B·T) row of each per-layer activation, and per (B·NH) head pair of att (T·T). */
function sizes(c: GPTConfig, B: number, T: number) {
  const { nLayer: L, nEmbd: C, nHead: NH, vocabSize: V } = c;
  const BT = B * T,
    att = B * NH * T * T;
  return {
    activations: {
      encoded: BT * C,
      ln1: L * BT * C,
      ln1Mean: L * BT,
      ln1Rstd: L * BT,
      qkv: L * BT * 3 * C,
      atty: L * BT * C,
      att: L * att,
      residual2: L * BT * C,
      ln2: L * BT * C,
      ln2Mean: L * BT,
      ln2Rstd: L * BT,
      fch: L * BT * 4 * C,
      fchGelu: L * BT * 4 * C,
      residual3: L * BT * C,
      lnf: BT * C,
      lnfMean: BT,
      lnfRstd: BT,
      logits: BT * V, // then probs, then dlogits, in place
      losses: BT,
      proj: BT * C, // the attention and MLP projections' output, before the residual add
      // gradient scratch
      dres: BT * C,
      dln: BT * C,
      datty: BT * C,
      dqkv: BT * 3 * C,
      dfch: BT * 4 * C,
      dfchGelu: BT * 4 * C,
      datt: att,
    },
    /**
     * B of one GEMM in panels (as/matmul.ts), ceil(N/8)·8·K: the largest of a weight's (N = V or 4C, K = C;
     * N = C, K = V or 4C) and a dW's inputs (N = 4C, K = B·T).
     */
    panels: Math.max(pad8(Math.max(V, 4 * C)) * C, pad8(C) * Math.max(V, 4 * C), pad8(4 * C) * Math.max(C, BT)),
  };
}

const pad8 = (n: number) => Math.ceil(n / 8) * 8;

/** Elements per partial sum of the gradient norm (a fixed chunking: the same sum for any thread count). */
export const NORM_CHUNK = 16384;

export type ActivationName = keyof ReturnType<typeof sizes>['activations'];

export interface WasmLayout {
  /** Parameter count. */
  n: number;
  params: number;
  grads: number;
  m: number;
  v: number;
  start: number;
  delta: number;
  panels: number;
  normParts: number;
  inputs: number;
  targets: number;
  act: Record<ActivationName, number>;
  /** Bytes from the first address. */
  bytes: number;
}

/** Byte addresses from `base` (64-byte aligned) for batches up to (maxB, maxT). */
export function wasmLayout(c: GPTConfig, maxB: number, maxT: number, base: number): WasmLayout {
  const n = paramLayout(c).total;
  let at = base;
  const take = (floats: number) => {
    const a = at;
    at += Math.ceil((floats * 4) / 64) * 64;
    return a;
  };
  const s = sizes(c, maxB, maxT);
  const [params, grads, m, v, start, delta] = [take(n), take(n), take(n), take(n), take(n), take(n)];
  const panels = take(s.panels);
  const normParts = take(Math.ceil(n / NORM_CHUNK));
  const inputs = take(maxB * maxT);
  const targets = take(maxB * maxT);
  const act = {} as Record<ActivationName, number>;
  for (const [k, floats] of Object.entries(s.activations)) act[k as ActivationName] = take(floats);
  return { n, params, grads, m, v, start, delta, panels, normParts, inputs, targets, act, bytes: at - base };
}
