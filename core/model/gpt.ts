// The GPT-2-style model on the CPU, read top to bottom: init, forward, backward.
// Byte tokens → token+position embedding → L × [LN → attention → residual → LN → MLP(GELU) → residual]
// → final LN → tied LM head → softmax cross-entropy.

import { type GPTConfig, PER_LAYER_TENSORS, paramLayout, paramViews, validateConfig } from './config.ts';
import { gaussian, mulberry32 } from '../random.ts';
import {
  type Arr,
  type Tokens,
  attentionBackward,
  attentionForward,
  encoderBackward,
  encoderForward,
  geluBackward,
  geluForward,
  layernormBackward,
  layernormForward,
  matmulBackward,
  matmulForward,
  residualBackward,
  residualForward,
  meanLoss,
  softmaxCrossEntropyBackward,
  softmaxCrossEntropyForward,
} from './ops.ts';
import { roundHalves } from './ops-f16.ts';

type Ctor<A extends Arr> = { new (n: number): A };

/**
 * GPT-2 init: N(0, 0.02) for matrices and embeddings, residual projections scaled
 * by 1/√(2L), LayerNorm gains 1, biases 0. Deterministic in `seed`.
 */
export function initParams(config: GPTConfig, seed: number): Float32Array {
  validateConfig(config);
  const layout = paramLayout(config);
  const params = new Float32Array(layout.total);
  const randn = gaussian(mulberry32(seed));
  const residStd = 0.02 / Math.sqrt(2 * config.nLayer);
  for (const t of layout.tensors) {
    const view = params.subarray(t.offset, t.offset + t.size);
    if (t.name === 'ln1w' || t.name === 'ln2w' || t.name === 'lnfw') view.fill(1);
    else if (t.decay) {
      const std = t.name === 'attprojw' || t.name === 'fcprojw' ? residStd : 0.02;
      for (let i = 0; i < view.length; i++) view[i] = randn() * std;
    }
  }
  return params;
}

/** Activation sizes for a (B,T) batch, llm.c's ActivationTensors. */
function activationSizes(c: GPTConfig, B: number, T: number): Record<string, number> {
  const { nLayer: L, nEmbd: C, nHead: NH, vocabSize: V } = c;
  return {
    encoded: B * T * C,
    ln1: L * B * T * C,
    ln1Mean: L * B * T,
    ln1Rstd: L * B * T,
    qkv: L * B * T * 3 * C,
    atty: L * B * T * C,
    preatt: L * B * NH * T * T,
    att: L * B * NH * T * T,
    attproj: L * B * T * C,
    residual2: L * B * T * C,
    ln2: L * B * T * C,
    ln2Mean: L * B * T,
    ln2Rstd: L * B * T,
    fch: L * B * T * 4 * C,
    fchGelu: L * B * T * 4 * C,
    fcproj: L * B * T * C,
    residual3: L * B * T * C,
    lnf: B * T * C,
    lnfMean: B * T,
    lnfRstd: B * T,
    logits: B * T * V,
    probs: B * T * V,
    losses: B * T,
  };
}

/**
 * Parameters, gradients and activations for batches up to (maxB, maxT).
 * Generic over the float type so gradient checks can run in float64.
 */
export class GPT<A extends Arr = Float32Array> {
  readonly config: GPTConfig;
  readonly params: A;
  readonly grads: A;
  readonly p: Record<string, A>;
  readonly g: Record<string, A>;
  private acts: Record<string, A> = {};
  private dacts: Record<string, A> = {};
  private B = 0;
  private T = 0;
  private inputs: Tokens | null = null;
  private targets: Tokens | null = null;
  /**
   * f16 storage (the WebGPU engine's --precision f16, modelled by its CPU twins): the matmuls' half weight copy and its
   * views.
   */
  private half: { copy: A; v: Record<string, A> } | null = null;

  constructor(
    config: GPTConfig,
    readonly maxB: number,
    readonly maxT: number = config.blockSize,
    private readonly ctor: Ctor<A> = Float32Array as unknown as Ctor<A>,
  ) {
    validateConfig(config);
    if (maxT > config.blockSize) throw new Error(`maxT ${maxT} exceeds blockSize ${config.blockSize}`);
    this.config = config;
    const n = paramLayout(config).total;
    this.params = new ctor(n);
    this.grads = new ctor(n);
    this.p = paramViews(config, this.params);
    this.g = paramViews(config, this.grads);
    const sizes = activationSizes(config, maxB, maxT);
    for (const [k, s] of Object.entries(sizes)) {
      this.acts[k] = new ctor(s);
      this.dacts[k] = new ctor(s);
    }
  }

  /**
   * Models --precision f16 as the CPU twins of its kernels do (core/model/ops-f16.ts): every
   * activation but the logits (the residual stream, the LayerNorm outputs, qkv, attention's output,
   * the projections, fch with its GELU) rounded to halves as it is stored, the encoder's and the
   * matmuls' weights read from a copy of θ rounded once per forward. Master weights and gradients
   * stay in the array type.
   */
  useF16Storage(): this {
    const copy = new this.ctor(this.params.length);
    this.half = { copy, v: paramViews(this.config, copy) };
    return this;
  }

  get numerics(): 'f32' | 'f16' {
    return this.half ? 'f16' : 'f32';
  }

  /** Forward over inputs (B,T); with targets, returns the mean cross-entropy loss. */
  forward(inputs: Tokens, targets: Tokens | null, B: number, T: number): number {
    const c = this.config,
      C = c.nEmbd,
      NH = c.nHead,
      V = c.vocabSize;
    if (B > this.maxB || T > this.maxT)
      throw new Error(`batch (${B},${T}) exceeds allocated (${this.maxB},${this.maxT})`);
    if (inputs.length < B * T) throw new Error(`inputs has ${inputs.length} tokens, need ${B * T}`);
    this.B = B;
    this.T = T;
    this.inputs = inputs;
    this.targets = targets;
    const p = this.p,
      a = this.acts,
      BT = B * T;
    // f16: round what the engine stores as halves (h), and read matmul weights from the half copy (m)
    const h = (x: A): A => (this.half ? roundHalves(x) : x);
    if (this.half) {
      this.half.copy.set(this.params);
      roundHalves(this.half.copy);
    }
    const mp = this.half ? this.half.v : p;
    encoderForward(a.encoded, inputs, mp.wte, mp.wpe, B, T, C);
    let residual = h(a.encoded.subarray(0, BT * C) as A);
    for (let l = 0; l < c.nLayer; l++) {
      const L = this.layer(l, this.acts, B, T);
      const W = this.layerParams(l),
        M = this.layerSlice(mp, l);
      layernormForward(L.ln1, L.ln1Mean, L.ln1Rstd, residual, W.ln1w, W.ln1b, B, T, C);
      h(L.ln1);
      matmulForward(L.qkv, L.ln1, M.qkvw, M.qkvb, B, T, C, 3 * C);
      attentionForward(L.atty, L.preatt, L.att, h(L.qkv), B, T, C, NH);
      matmulForward(L.attproj, h(L.atty), M.attprojw, M.attprojb, B, T, C, C);
      residualForward(L.residual2, residual, h(L.attproj), BT * C);
      layernormForward(L.ln2, L.ln2Mean, L.ln2Rstd, h(L.residual2), W.ln2w, W.ln2b, B, T, C);
      matmulForward(L.fch, h(L.ln2), M.fcw, M.fcb, B, T, C, 4 * C);
      geluForward(L.fchGelu, L.fch, BT * 4 * C); // from the f32 sums, as the matmul's epilogue
      h(L.fch);
      matmulForward(L.fcproj, h(L.fchGelu), M.fcprojw, M.fcprojb, B, T, 4 * C, C);
      residualForward(L.residual3, L.residual2, h(L.fcproj), BT * C);
      residual = h(L.residual3);
    }
    layernormForward(a.lnf, a.lnfMean, a.lnfRstd, residual, p.lnfw, p.lnfb, B, T, C);
    matmulForward(a.logits, h(a.lnf), mp.wte, null, B, T, C, V); // tied LM head
    if (!targets) return NaN;
    softmaxCrossEntropyForward(a.losses, a.probs, a.logits, targets, B, T, V);
    return meanLoss(a.losses, BT);
  }

  /** Logits (B,T,V) of the last forward. */
  logits(): A {
    return this.acts.logits.subarray(0, this.B * this.T * this.config.vocabSize) as A;
  }

  /** Gradients of the mean loss of the last forward into `grads` (overwritten). */
  backward(): void {
    const c = this.config,
      C = c.nEmbd,
      NH = c.nHead,
      V = c.vocabSize;
    const { B, T } = this,
      BT = B * T;
    if (!this.inputs || !this.targets) throw new Error('backward() needs a forward() with targets first');
    this.grads.fill(0);
    for (const d of Object.values(this.dacts)) d.fill(0);
    const p = this.p,
      g = this.g,
      a = this.acts,
      d = this.dacts;
    const mp = this.half ? this.half.v : p; // the matmuls' weights, as in the forward
    softmaxCrossEntropyBackward(d.logits, a.probs, this.targets, 1 / BT, B, T, V);
    const lastResidual = c.nLayer > 0 ? this.layer(c.nLayer - 1, this.acts, B, T).residual3 : a.encoded;
    const dlastResidual = c.nLayer > 0 ? this.layer(c.nLayer - 1, this.dacts, B, T).residual3 : d.encoded;
    matmulBackward(d.lnf, g.wte, null, d.logits, a.lnf, mp.wte, B, T, C, V);
    layernormBackward(dlastResidual, g.lnfw, g.lnfb, d.lnf, lastResidual, p.lnfw, a.lnfMean, a.lnfRstd, B, T, C);
    for (let l = c.nLayer - 1; l >= 0; l--) {
      const L = this.layer(l, this.acts, B, T),
        D = this.layer(l, this.dacts, B, T);
      const W = this.layerParams(l),
        G = this.layerGrads(l),
        M = this.layerSlice(mp, l);
      const residual = l === 0 ? a.encoded : this.layer(l - 1, this.acts, B, T).residual3;
      const dresidual = l === 0 ? d.encoded : this.layer(l - 1, this.dacts, B, T).residual3;
      residualBackward(D.residual2, D.fcproj, D.residual3, BT * C);
      matmulBackward(D.fchGelu, G.fcprojw, G.fcprojb, D.fcproj, L.fchGelu, M.fcprojw, B, T, 4 * C, C);
      geluBackward(D.fch, L.fch, D.fchGelu, BT * 4 * C);
      matmulBackward(D.ln2, G.fcw, G.fcb, D.fch, L.ln2, M.fcw, B, T, C, 4 * C);
      layernormBackward(D.residual2, G.ln2w, G.ln2b, D.ln2, L.residual2, W.ln2w, L.ln2Mean, L.ln2Rstd, B, T, C);
      residualBackward(dresidual, D.attproj, D.residual2, BT * C);
      matmulBackward(D.atty, G.attprojw, G.attprojb, D.attproj, L.atty, M.attprojw, B, T, C, C);
      attentionBackward(D.qkv, D.preatt, D.att, D.atty, L.qkv, L.att, B, T, C, NH);
      matmulBackward(D.ln1, G.qkvw, G.qkvb, D.qkv, L.ln1, M.qkvw, B, T, C, 3 * C);
      layernormBackward(dresidual, G.ln1w, G.ln1b, D.ln1, residual, W.ln1w, L.ln1Mean, L.ln1Rstd, B, T, C);
    }
    encoderBackward(g.wte, g.wpe, d.encoded, this.inputs, B, T, C);
  }

  // Per-layer views of a (L, ...) activation slab, sized for the current (B,T).
  private layer(l: number, slab: Record<string, A>, B: number, T: number): Record<string, A> {
    const { nEmbd: C, nHead: NH } = this.config;
    const BT = B * T;
    const per: Record<string, number> = {
      ln1: BT * C,
      ln1Mean: BT,
      ln1Rstd: BT,
      qkv: BT * 3 * C,
      atty: BT * C,
      preatt: B * NH * T * T,
      att: B * NH * T * T,
      attproj: BT * C,
      residual2: BT * C,
      ln2: BT * C,
      ln2Mean: BT,
      ln2Rstd: BT,
      fch: BT * 4 * C,
      fchGelu: BT * 4 * C,
      fcproj: BT * C,
      residual3: BT * C,
    };
    const out: Record<string, A> = {};
    for (const [k, n] of Object.entries(per)) out[k] = slab[k].subarray(l * n, (l + 1) * n) as A;
    return out;
  }

  private layerSlice(views: Record<string, A>, l: number): Record<string, A> {
    const L = this.config.nLayer;
    const out: Record<string, A> = {};
    for (const k of PER_LAYER_TENSORS) {
      const n = views[k].length / L;
      out[k] = views[k].subarray(l * n, (l + 1) * n) as A;
    }
    return out;
  }

  private layerParams(l: number) {
    return this.layerSlice(this.p, l);
  }
  private layerGrads(l: number) {
    return this.layerSlice(this.g, l);
  }
}
