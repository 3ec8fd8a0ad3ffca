// The TF.js peer model: the same GPT as core/model/gpt.ts (byte tokens, learned token +
// position embeddings, pre-LN blocks with causal multi-head attention and a GELU MLP,
// final LayerNorm, LM head tied to the token embedding), written with TF.js ops and
// trained with TF.js autograd (tf.variableGrads) and tf.train.adam.
//
// It exists only as a yardstick for `atoll bench kernels`: run it on the same WebGPU
// adapter as our engine to compare training-step throughput. It is deliberately the
// straightforward TF.js way to write the model (what a competent TF.js user would
// write), not a port of our kernels.
//
// Differences from our engine, none of which change the work per step materially:
// no gradient clipping and no weight decay (tf.train.adam is plain Adam).
//
// Import this module only after a TF.js backend is available (instruments/bench/kernels.ts sets
// `globalThis.navigator = { gpu }` and calls `tf.setBackend('webgpu')` first).

import * as tf from '@tensorflow/tfjs';
import { type GPTConfig, paramLayout, validateConfig } from '../../core/model/config.ts';
import { ADAMW_DEFAULTS, LN_EPS, type Tokens } from '../../core/model/ops.ts';

export interface TfGptOptions {
  config: GPTConfig;
  /** Initial θ in the flat layout of core/model/config.ts (e.g. initParams(config, seed)). */
  init: Float32Array;
  lr?: number;
}

interface Block {
  ln1w: tf.Variable;
  ln1b: tf.Variable;
  qkvw: tf.Variable;
  qkvb: tf.Variable;
  attprojw: tf.Variable;
  attprojb: tf.Variable;
  ln2w: tf.Variable;
  ln2b: tf.Variable;
  fcw: tf.Variable;
  fcb: tf.Variable;
  fcprojw: tf.Variable;
  fcprojb: tf.Variable;
}

const GELU_S = Math.sqrt(2 / Math.PI);

export class TfGpt {
  readonly config: GPTConfig;
  readonly wte: tf.Variable;
  readonly wpe: tf.Variable;
  readonly lnfw: tf.Variable;
  readonly lnfb: tf.Variable;
  readonly blocks: Block[] = [];
  readonly optimizer: tf.AdamOptimizer;
  private readonly masks = new Map<number, tf.Tensor2D>();
  private losses: tf.Scalar[] = [];

  constructor(opts: TfGptOptions) {
    validateConfig(opts.config);
    this.config = opts.config;
    const layout = paramLayout(opts.config);
    if (opts.init.length !== layout.total)
      throw new Error(`TfGpt: init has ${opts.init.length} elements, the config needs ${layout.total}`);
    const L = opts.config.nLayer;
    // one variable per tensor and layer, as a TF.js user would write it
    const v = (name: string, layer?: number): tf.Variable => {
      const t = layout.byName[name];
      const shape = layer === undefined ? t.shape : t.shape.slice(1);
      const size = shape.reduce((a, b) => a * b, 1);
      const off = t.offset + (layer ?? 0) * size;
      return tf.variable(
        tf.tensor(opts.init.slice(off, off + size), shape, 'float32'),
        true,
        layer === undefined ? name : `${name}.${layer}`,
      );
    };
    this.wte = v('wte');
    this.wpe = v('wpe');
    for (let l = 0; l < L; l++) {
      this.blocks.push({
        ln1w: v('ln1w', l),
        ln1b: v('ln1b', l),
        qkvw: v('qkvw', l),
        qkvb: v('qkvb', l),
        attprojw: v('attprojw', l),
        attprojb: v('attprojb', l),
        ln2w: v('ln2w', l),
        ln2b: v('ln2b', l),
        fcw: v('fcw', l),
        fcb: v('fcb', l),
        fcprojw: v('fcprojw', l),
        fcprojb: v('fcprojb', l),
      });
    }
    this.lnfw = v('lnfw');
    this.lnfb = v('lnfb');
    this.optimizer = tf.train.adam(opts.lr ?? 1e-3, ADAMW_DEFAULTS.beta1, ADAMW_DEFAULTS.beta2, ADAMW_DEFAULTS.eps);
  }

  /** Additive causal mask (T,T): 0 on and below the diagonal, -1e9 above. Kept, not tidied. */
  private causalMask(T: number): tf.Tensor2D {
    let m = this.masks.get(T);
    if (!m) {
      const a = new Float32Array(T * T);
      for (let i = 0; i < T; i++) for (let j = i + 1; j < T; j++) a[i * T + j] = -1e9;
      m = tf.keep(tf.tensor2d(a, [T, T]));
      this.masks.set(T, m);
    }
    return m;
  }

  /** Mean next-token cross-entropy of a (B,T) batch of int32 tokens. Call inside tidy/variableGrads. */
  loss(inputs: tf.Tensor2D, targets: tf.Tensor2D): tf.Scalar {
    const [B, T] = inputs.shape;
    const { nEmbd: C, nHead: NH, vocabSize: V } = this.config;
    const hs = C / NH;
    const linear = (x: tf.Tensor2D, w: tf.Variable, b: tf.Variable): tf.Tensor2D =>
      tf.add(tf.matMul(x, w as tf.Tensor2D, false, true), b);
    const layernorm = (x: tf.Tensor2D, w: tf.Variable, b: tf.Variable): tf.Tensor2D => {
      const mean = tf.mean(x, -1, true);
      const xc = tf.sub(x, mean);
      const variance = tf.mean(tf.square(xc), -1, true);
      return tf.add(tf.mul(tf.mul(xc, tf.rsqrt(tf.add(variance, LN_EPS))), w), b);
    };
    const gelu = (x: tf.Tensor2D): tf.Tensor2D =>
      tf.mul(tf.mul(x, 0.5), tf.add(1, tf.tanh(tf.mul(tf.add(x, tf.mul(tf.pow(x, 3), 0.044715)), GELU_S))));
    const heads = (x: tf.Tensor2D): tf.Tensor4D => tf.transpose(tf.reshape(x, [B, T, NH, hs]), [0, 2, 1, 3]);
    const mask = this.causalMask(T);

    const tok = tf.gather(this.wte, tf.reshape(inputs, [B * T]));
    const pos = tf.slice(this.wpe, [0, 0], [T, C]);
    let x = tf.reshape(tf.add(tf.reshape(tok, [B, T, C]), pos), [B * T, C]) as tf.Tensor2D;
    for (const blk of this.blocks) {
      const qkv = linear(layernorm(x, blk.ln1w, blk.ln1b), blk.qkvw, blk.qkvb);
      const [q, k, v] = tf.split(qkv, 3, 1) as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D];
      const scores = tf.add(tf.mul(tf.matMul(heads(q), heads(k), false, true), 1 / Math.sqrt(hs)), mask);
      const y = tf.matMul(tf.softmax(scores), heads(v)); // (B,NH,T,hs)
      const merged = tf.reshape(tf.transpose(y, [0, 2, 1, 3]), [B * T, C]) as tf.Tensor2D;
      x = tf.add(x, linear(merged, blk.attprojw, blk.attprojb));
      const h = gelu(linear(layernorm(x, blk.ln2w, blk.ln2b), blk.fcw, blk.fcb));
      x = tf.add(x, linear(h, blk.fcprojw, blk.fcprojb));
    }
    const logits = tf.matMul(layernorm(x, this.lnfw, this.lnfb), this.wte as tf.Tensor2D, false, true); // tied head
    const logp = tf.logSoftmax(logits);
    const onehot = tf.oneHot(tf.reshape(targets, [B * T]), V);
    return tf.neg(tf.mean(tf.sum(tf.mul(logp, onehot), -1)));
  }

  /** One Adam step on a batch. Queues the work; the loss is read by takeLosses(). */
  step(inputs: tf.Tensor2D, targets: tf.Tensor2D): void {
    const { value, grads } = tf.variableGrads(() => this.loss(inputs, targets));
    this.optimizer.applyGradients(Object.entries(grads).map(([name, tensor]) => ({ name, tensor })));
    tf.dispose(grads);
    this.losses.push(value);
  }

  /** Losses of the steps since the last call, in order (reading them waits for the GPU). */
  async takeLosses(): Promise<number[]> {
    const ls = this.losses;
    this.losses = [];
    const out: number[] = [];
    for (const l of ls) {
      out.push((await l.data())[0]);
      l.dispose();
    }
    return out;
  }

  /** Mean loss without a gradient or an update. */
  async evalLoss(inputs: tf.Tensor2D, targets: tf.Tensor2D): Promise<number> {
    const l = tf.tidy(() => this.loss(inputs, targets));
    const v = (await l.data())[0];
    l.dispose();
    return v;
  }

  dispose(): void {
    for (const l of this.losses) l.dispose();
    this.losses = [];
    for (const m of this.masks.values()) m.dispose();
    this.masks.clear();
    this.optimizer.dispose();
    const vars = [
      this.wte,
      this.wpe,
      this.lnfw,
      this.lnfb,
      ...this.blocks.flatMap((b) => Object.values(b) as tf.Variable[]),
    ];
    for (const v of vars) v.dispose();
  }
}

/** A (B,T) batch as int32 tensors (the caller disposes them). */
export function tfBatch(inputs: Tokens, targets: Tokens, B: number, T: number): { x: tf.Tensor2D; y: tf.Tensor2D } {
  return {
    x: tf.tensor2d(Int32Array.from(inputs.subarray(0, B * T)), [B, T], 'int32'),
    y: tf.tensor2d(Int32Array.from(targets.subarray(0, B * T)), [B, T], 'int32'),
  };
}
