// The GPT forward and backward on the Wasm kernels: core/model/gpt.ts's order of ops, with llm.c's
// buffer reuse (one layer of gradient scratch; the residual stream's gradient flows through `dres`,
// which the residual adds pass on unchanged and the LayerNorms' backward add into).

import type { GPTConfig } from '../../model/config.ts';
import { paramLayout } from '../../model/config.ts';
import type { Tokens } from '../../model/ops.ts';
import type { KernelRunner } from './kernels.ts';
import { type ActivationName, type WasmLayout, wasmLayout } from './layout.ts';

const PER_LAYER: Partial<Record<ActivationName, (BT: number, C: number, att: number) => number>> = {
  ln1: (BT, C) => BT * C,
  ln1Mean: (BT) => BT,
  ln1Rstd: (BT) => BT,
  qkv: (BT, C) => BT * 3 * C,
  atty: (BT, C) => BT * C,
  att: (_BT, _C, att) => att,
  residual2: (BT, C) => BT * C,
  ln2: (BT, C) => BT * C,
  ln2Mean: (BT) => BT,
  ln2Rstd: (BT) => BT,
  fch: (BT, C) => BT * 4 * C,
  fchGelu: (BT, C) => BT * 4 * C,
  residual3: (BT, C) => BT * C,
};

type Layer = Record<keyof typeof PER_LAYER, number>;
/** Panels of 8 columns for a GEMM's B of N columns (as/matmul.ts). */
const stripes = (N: number) => Math.ceil(N / 8);

type LayerParams = Record<
  'ln1w' | 'ln1b' | 'qkvw' | 'qkvb' | 'attprojw' | 'attprojb' | 'ln2w' | 'ln2b' | 'fcw' | 'fcb' | 'fcprojw' | 'fcprojb',
  number
>;

export class WasmGPT {
  readonly layout: WasmLayout;
  private readonly tensor: Record<string, { offset: number; size: number }>;
  private B = 0;
  private T = 0;
  private hasTargets = false;
  /** f32 views of the memory (fixed size: never detached). */
  readonly f32: Float32Array;
  private readonly i32: Int32Array;

  constructor(
    readonly config: GPTConfig,
    readonly maxB: number,
    readonly maxT: number,
    readonly run: KernelRunner,
  ) {
    this.layout = wasmLayout(config, maxB, maxT, run.control + 256);
    this.tensor = paramLayout(config).byName;
    this.f32 = new Float32Array(run.memory.buffer);
    this.i32 = new Int32Array(run.memory.buffer);
  }

  /** A float view of `floats` at byte address `at`. */
  view(at: number, floats: number): Float32Array {
    return this.f32.subarray(at >> 2, (at >> 2) + floats);
  }

  /** Byte address of parameter tensor `name` (layer l's slice) in θ, or in its gradient with g. */
  private p(name: string, l = -1, g = false): number {
    const t = this.tensor[name];
    const base = g ? this.layout.grads : this.layout.params;
    if (l < 0) return base + t.offset * 4;
    const per = t.size / this.config.nLayer;
    return base + (t.offset + l * per) * 4;
  }

  private layerParams(l: number, g: boolean): LayerParams {
    const names = ['ln1w', 'ln1b', 'qkvw', 'qkvb', 'attprojw', 'attprojb', 'ln2w', 'ln2b', 'fcw', 'fcb'] as const;
    const out = {} as LayerParams;
    for (const k of [...names, 'fcprojw', 'fcprojb'] as const) out[k] = this.p(k, l, g);
    return out;
  }

  private layer(l: number): Layer {
    const { nEmbd: C, nHead: NH } = this.config;
    const BT = this.B * this.T,
      att = this.B * NH * this.T * this.T;
    const out = {} as Layer;
    for (const [k, size] of Object.entries(PER_LAYER))
      out[k as keyof Layer] = this.layout.act[k as ActivationName] + l * size(BT, C, att) * 4;
    return out;
  }

  private copyTokens(at: number, tokens: Tokens, n: number): void {
    const V = this.config.vocabSize;
    for (let i = 0; i < n; i++) {
      if (tokens[i] >= V) throw new Error(`E_BAD_TOKEN: token ${tokens[i]} at ${i} is outside the vocabulary (${V})`);
    }
    this.i32.set(tokens.subarray(0, n), at >> 2);
  }

  /** out (BT,OC) = inp (BT,C) · W(OC,C)ᵀ + bias: Wᵀ packed in panels once, then the blocked GEMM. */
  private matmul(out: number, inp: number, w: number, bias: number, BT: number, C: number, OC: number): void {
    const r = this.run,
      bp = this.layout.panels;
    r.run('packColumns', stripes(OC), 1, bp, w, C, OC);
    r.run('gemm', BT, 4, out, inp, C, 1, bp, bias, 0, C, OC);
  }

  /** dinp (BT,C) = dout·W (overwritten); dW (OC,C) += doutᵀ·inp; dbias (OC) += Σ dout (bias 0: none). */
  private matmulBackward(
    dinp: number,
    dw: number,
    dbias: number,
    dout: number,
    inp: number,
    w: number,
    BT: number,
    C: number,
    OC: number,
  ): void {
    const r = this.run,
      bp = this.layout.panels;
    r.run('packRows', stripes(C), 1, bp, w, OC, C);
    r.run('gemm', BT, 4, dinp, dout, OC, 1, bp, 0, 0, OC, C);
    r.run('packRows', stripes(C), 1, bp, inp, BT, C);
    r.run('gemm', OC, 4, dw, dout, 1, OC, bp, 0, 1, BT, C);
    if (dbias) r.run('columnSum', OC, 4, dbias, dout, BT, OC);
  }

  private layernorm(out: number, mean: number, rstd: number, inp: number, w: number, b: number, BT: number): void {
    this.run.run('layernormForward', BT, 1, out, mean, rstd, inp, w, b, this.config.nEmbd);
  }

  private layernormBackward(
    dinp: number,
    dw: number,
    db: number,
    dout: number,
    inp: number,
    w: number,
    mean: number,
    rstd: number,
    BT: number,
  ): void {
    const C = this.config.nEmbd;
    this.run.run('layernormBackwardInput', BT, 1, dinp, dout, inp, w, mean, rstd, C);
    this.run.run('layernormBackwardParams', C, 4, dw, db, dout, inp, mean, rstd, BT, C);
  }

  /** Forward over inputs (B,T); with targets, the mean cross-entropy loss (else NaN: the logits stay). */
  forward(inputs: Tokens, targets: Tokens | null, B: number, T: number): number {
    const c = this.config,
      C = c.nEmbd,
      NH = c.nHead,
      V = c.vocabSize;
    if (B > this.maxB || T > this.maxT)
      throw new Error(`E_BAD_BATCH: batch (${B},${T}) exceeds allocated (${this.maxB},${this.maxT})`);
    if (inputs.length < B * T) throw new Error(`E_BAD_BATCH: inputs has ${inputs.length} tokens, need ${B * T}`);
    const BT = B * T,
      a = this.layout.act,
      r = this.run;
    this.B = B;
    this.T = T;
    this.copyTokens(this.layout.inputs, inputs, BT);
    r.run('encoderForward', BT, 1, a.encoded, this.layout.inputs, this.p('wte'), this.p('wpe'), T, C);
    let residual = a.encoded;
    for (let l = 0; l < c.nLayer; l++) {
      const L = this.layer(l),
        W = this.layerParams(l, false);
      this.layernorm(L.ln1, L.ln1Mean, L.ln1Rstd, residual, W.ln1w, W.ln1b, BT);
      this.matmul(L.qkv, L.ln1, W.qkvw, W.qkvb, BT, C, 3 * C);
      r.run('attentionForward', B * NH, 1, L.atty, L.att, L.qkv, T, C, NH);
      this.matmul(a.proj, L.atty, W.attprojw, W.attprojb, BT, C, C);
      r.run('residualForward', BT * C, 4, L.residual2, residual, a.proj);
      this.layernorm(L.ln2, L.ln2Mean, L.ln2Rstd, L.residual2, W.ln2w, W.ln2b, BT);
      this.matmul(L.fch, L.ln2, W.fcw, W.fcb, BT, C, 4 * C);
      r.run('geluForward', BT * 4 * C, 4, L.fchGelu, L.fch);
      this.matmul(a.proj, L.fchGelu, W.fcprojw, W.fcprojb, BT, 4 * C, C);
      r.run('residualForward', BT * C, 4, L.residual3, L.residual2, a.proj);
      residual = L.residual3;
    }
    this.layernorm(a.lnf, a.lnfMean, a.lnfRstd, residual, this.p('lnfw'), this.p('lnfb'), BT);
    this.matmul(a.logits, a.lnf, this.p('wte'), 0, BT, C, V); // tied LM head
    this.hasTargets = targets !== null;
    if (!targets) return NaN;
    if (targets.length < BT) throw new Error(`E_BAD_BATCH: targets has ${targets.length} tokens, need ${BT}`);
    this.copyTokens(this.layout.targets, targets, BT);
    r.run('crossEntropyForward', BT, 1, a.losses, a.logits, this.layout.targets, V);
    const losses = this.view(a.losses, BT);
    let s = 0;
    for (let i = 0; i < BT; i++) s += losses[i];
    return s / BT;
  }

  /** Logits (B,T,V) of the last forward without targets. */
  logits(): Float32Array {
    return this.view(this.layout.act.logits, this.B * this.T * this.config.vocabSize);
  }

  /** Gradients of the last forward's mean loss into the gradient buffer (overwritten). */
  backward(): void {
    if (!this.hasTargets) throw new Error('backward() needs a forward() with targets first');
    const c = this.config,
      C = c.nEmbd,
      NH = c.nHead,
      V = c.vocabSize;
    const { B, T } = this,
      BT = B * T,
      a = this.layout.act,
      r = this.run;
    this.view(this.layout.grads, this.layout.n).fill(0);
    this.view(a.dres, BT * C).fill(0);
    r.run('crossEntropyBackward', BT, 1, a.logits, this.layout.targets, 1 / BT, V);
    const last = c.nLayer > 0 ? this.layer(c.nLayer - 1).residual3 : a.encoded;
    this.matmulBackward(a.dln, this.p('wte', -1, true), 0, a.logits, a.lnf, this.p('wte'), BT, C, V);
    const [lnfw, dlnfw, dlnfb] = [this.p('lnfw'), this.p('lnfw', -1, true), this.p('lnfb', -1, true)];
    this.layernormBackward(a.dres, dlnfw, dlnfb, a.dln, last, lnfw, a.lnfMean, a.lnfRstd, BT);
    for (let l = c.nLayer - 1; l >= 0; l--) {
      const L = this.layer(l),
        W = this.layerParams(l, false),
        G = this.layerParams(l, true);
      const residual = l === 0 ? a.encoded : this.layer(l - 1).residual3;
      // residual3 = residual2 + fcproj: both get dres
      this.matmulBackward(a.dfchGelu, G.fcprojw, G.fcprojb, a.dres, L.fchGelu, W.fcprojw, BT, 4 * C, C);
      r.run('geluBackward', BT * 4 * C, 4, a.dfch, L.fch, L.fchGelu, a.dfchGelu);
      this.matmulBackward(a.dln, G.fcw, G.fcb, a.dfch, L.ln2, W.fcw, BT, C, 4 * C);
      this.layernormBackward(a.dres, G.ln2w, G.ln2b, a.dln, L.residual2, W.ln2w, L.ln2Mean, L.ln2Rstd, BT);
      // residual2 = residual + attproj: both get dres
      this.matmulBackward(a.datty, G.attprojw, G.attprojb, a.dres, L.atty, W.attprojw, BT, C, C);
      r.run('attentionBackward', B * NH, 1, a.dqkv, a.datt, a.datty, L.qkv, L.att, T, C, NH);
      this.matmulBackward(a.dln, G.qkvw, G.qkvb, a.dqkv, L.ln1, W.qkvw, BT, C, 3 * C);
      this.layernormBackward(a.dres, G.ln1w, G.ln1b, a.dln, residual, W.ln1w, L.ln1Mean, L.ln1Rstd, BT);
    }
    r.run(
      'encoderBackward',
      C,
      4,
      this.p('wte', -1, true),
      this.p('wpe', -1, true),
      a.dres,
      this.layout.inputs,
      BT,
      T,
      C,
    );
  }
}
