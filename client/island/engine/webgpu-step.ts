// The training step as one fixed list of dispatches, in core/model/gpt.ts's order: forward (each
// residual add fused into the LayerNorm that reads it next, bias + GELU into the fc matmul), the
// tied head and its cross-entropy a vocabulary chunk at a time, the mean loss, backward (overwriting,
// but for the residual stream's gradient and the tied wte; a micro-batch after the first adds every
// parameter gradient), grad norm and AdamW. Buffers by their plan name (webgpu-plan.ts).

import { type GPTConfig, PER_LAYER_TENSORS, paramLayout } from '../../../core/model/config.ts';
import { type DispatchSpec, flatPieces } from '../../../shaders/kernel.ts';
import * as op from '../../../shaders/ops.ts';
import { type MatmulChoice, tunedDims } from './webgpu-tune.ts';

/**
 * How θ's flat buffers and the dispatches over all of wte or all of θ split for a buffer limit of `maxBuffer` and a
 * binding limit of `maxBinding` bytes: the GPUBuffers each flat buffer is made of (`parts`, θ's element ranges),
 * wte's vocabulary windows (the encoder's), and θ's pieces (AdamW, the grad norm, Δ, the f16 pack: none across a
 * part's end). One of each without limits.
 */
export interface StepWindows {
  maxBinding: number;
  parts: Array<[number, number]>;
  vocab: Array<[number, number]>;
  pieces: Array<[number, number]>;
}

export function stepWindows(c: GPTConfig, maxBinding = Infinity, maxBuffer = Infinity): StepWindows {
  const layout = paramLayout(c);
  const parts = bufferParts(c, maxBuffer);
  return {
    maxBinding,
    parts,
    vocab: op.vocabWindows(c.vocabSize, c.nEmbd, layout.byName.wte.offset, maxBinding),
    pieces: flatPieces(parts, maxBinding),
  };
}

/** Tensors a window binds with the one before (a LayerNorm's weight and bias, layernorm.ts): no buffer starts there. */
const BOUND_WITH_PREVIOUS = new Set(['ln1b', 'ln2b', 'lnfb']);

/**
 * θ's element ranges [lo, hi) in the GPUBuffers of a flat buffer (f32) under `maxBytes`: whole tensors, as many as fit
 * in order. One range where all of θ fits; a tensor over the limit alone in its range (requiredLimits refuses it).
 */
export function bufferParts(c: GPTConfig, maxBytes = Infinity): Array<[number, number]> {
  const { tensors, total } = paramLayout(c);
  // whole tensors, a LayerNorm's bias joined to its weight
  const units: Array<[number, number]> = [];
  for (const t of tensors)
    if (BOUND_WITH_PREVIOUS.has(t.name)) units[units.length - 1][1] = t.offset + t.size;
    else units.push([t.offset, t.offset + t.size]);
  const parts: Array<[number, number]> = [];
  let lo = 0;
  for (const [a, b] of units)
    if (a > lo && 4 * (b - lo) > maxBytes) {
      parts.push([lo, a]);
      lo = a;
    }
  parts.push([lo, total]);
  return parts;
}

/**
 * The θ-wide ops outside the step, a dispatch per piece: Δ = start − θ into the gradient buffer (halves for f16,
 * read back as such), and f16's weight copy packed from θ.
 */
export function thetaOps(
  c: GPTConfig,
  b: (name: string) => GPUBuffer,
  o: { f16?: { form: op.HalfForm }; windows: StepWindows },
): { delta: DispatchSpec[]; pack: DispatchSpec[] } {
  const N = paramLayout(c).total;
  const { pieces } = o.windows;
  const piece = (p: [number, number]) => (pieces.length > 1 ? { piece: p } : {});
  const grads = b('grads'),
    params = b('params');
  const form = o.f16?.form;
  return {
    delta: pieces.map((p) =>
      form
        ? op.pseudoGradientF16(grads, b('start'), params, { N, form, ...piece(p) })
        : op.pseudoGradient(grads, b('start'), params, { N, ...piece(p) }),
    ),
    pack: form ? pieces.map((p) => op.packF16(b('wcopy'), params, { N, form, ...piece(p) })) : [],
  };
}

/** Where the parts of the step are in its list of dispatches. */
export interface StepLayout {
  specs: DispatchSpec[];
  /** [0, trunkEnd): forward to the final LayerNorm (lnf) */
  trunkEnd: number;
  /** the head's chunks, and the index of each chunk's logits matmul (forward) */
  chunks: op.VocabChunk[];
  headLogits: number[];
  /** [trunkEnd, lossEnd): the head, its cross-entropy and the mean loss; then backward */
  lossEnd: number;
  /** [optStart, end): grad norm and AdamW */
  optStart: number;
}

/**
 * The step's dispatches for `c`, on the buffers `b` names, activations sized for `maxRows` = B·T
 * rows, the head in chunks of `headChunk` vocabulary ids, matmuls on the tuner's `choices`.
 * `accumulate`: a micro-batch after a batch's first, every parameter gradient and the loss add to the
 * earlier micro-batches' (for its [0, optStart)).
 */
export function trainingStep(
  c: GPTConfig,
  b: (name: string) => GPUBuffer,
  o: {
    maxRows: number;
    headChunk: number;
    choices: Map<string, MatmulChoice>;
    f16?: { form: op.HalfForm };
    accumulate?: boolean;
    /** the binding limit's windows (default: none, every dispatch over all of wte or θ at once) */
    windows?: StepWindows;
  },
): StepLayout {
  const { vocabSize: V, nLayer: L, nHead: NH, nEmbd: C } = c;
  const layout = paramLayout(c);
  // element offset of a tensor, or of layer l's slice of a (L, ...) tensor
  const at = (name: string, l = 0) => {
    const t = layout.byName[name];
    return t.offset + (PER_LAYER_TENSORS.has(name) ? (l * t.size) / L : 0);
  };
  const params = b('params'),
    grads = b('grads'),
    partials = b('dwPartials');
  const resid = (l: number) => (l < 0 ? b('encoded') : b(`residual3.${l}`));
  // the residual stream's gradient: one buffer, each LayerNorm backward adds its dinp into it
  const dres = b('dres');
  // gradient buffers shared where their lives do not overlap (webgpu-plan.ts)
  const datty = b('dln'),
    dqkv = b('dfchGelu');
  const specs: DispatchSpec[] = [];
  const accumulate = o.accumulate ?? false;
  const enc = { C, V, maxT: c.blockSize, wteOff: at('wte'), wpeOff: at('wpe') };
  const win = o.windows ?? stepWindows(c);
  const gelu = o.maxRows * 4 * C; // offset of the GELU half of each fch buffer
  const tuned = (cin: number, cout: number) => tunedDims(o.choices, cin, cout);
  // f16 (--precision f16): every activation is halves (the residual stream, the LayerNorm outputs,
  // the matmuls' outputs but the logits, attention's output); the matmuls and the encoder read the
  // half weight copy `wcopy` (AdamW writes it); gradients stay f32; vec4 loads only
  const f16 = !!o.f16;
  const form = o.f16?.form ?? 'packed';
  const W = f16 ? b('wcopy') : params;
  const halfFwd = (out: boolean) => (f16 ? { half: { inp: true, w: true, out }, vec4: true } : {});
  const halfBwd = f16 ? { half: { inp: true, w: true }, vec4: true, dwVec4: true } : {};
  const lnBwd = f16 ? { half: form } : {}; // the LayerNorm backward reads the stream as halves
  const lnFwd = (
    out: GPUBuffer,
    mean: GPUBuffer,
    rstd: GPUBuffer,
    inp: GPUBuffer,
    d: { C: number; wOff: number; bOff: number },
  ) =>
    f16
      ? op.layernormForwardF16(out, mean, rstd, inp, params, { ...d, form })
      : op.layernormForward(out, mean, rstd, inp, params, d);
  const resLnFwd = (
    res: GPUBuffer,
    out: GPUBuffer,
    mean: GPUBuffer,
    rstd: GPUBuffer,
    a: GPUBuffer,
    b2: GPUBuffer,
    d: { C: number; wOff: number; bOff: number },
  ) =>
    f16
      ? op.residualLayernormForwardF16(res, out, mean, rstd, a, b2, params, { ...d, form })
      : op.residualLayernormForward(res, out, mean, rstd, a, b2, params, d);

  // ---- forward: each residual add is fused into the LayerNorm that reads it next
  // the encoder a vocabulary window at a time (each writes the rows whose token lies in it)
  for (const window of win.vocab)
    specs.push(
      f16
        ? op.encoderForwardF16(b('encoded'), b('inputs'), W, { ...enc, window })
        : op.encoderForward(b('encoded'), b('inputs'), params, { ...enc, window }),
    );
  specs.push(
    lnFwd(b('ln1.0'), b('ln1Mean.0'), b('ln1Rstd.0'), b('encoded'), { C, wOff: at('ln1w', 0), bOff: at('ln1b', 0) }),
  );
  for (let l = 0; l < L; l++) {
    const x = (k: string) => b(`${k}.${l}`);
    // residual3.l feeds layer l + 1's ln1, or lnf after the last layer
    const next =
      l + 1 < L
        ? {
            out: b(`ln1.${l + 1}`),
            mean: b(`ln1Mean.${l + 1}`),
            rstd: b(`ln1Rstd.${l + 1}`),
            wOff: at('ln1w', l + 1),
            bOff: at('ln1b', l + 1),
          }
        : { out: b('lnf'), mean: b('lnfMean'), rstd: b('lnfRstd'), wOff: at('lnfw'), bOff: at('lnfb') };
    specs.push(
      op.matmulForward(x('qkv'), x('ln1'), W, {
        C,
        OC: 3 * C,
        wOff: at('qkvw', l),
        biasOff: at('qkvb', l),
        ...tuned(C, 3 * C).fwd,
        ...halfFwd(true),
      }),
      op.attentionForward(x('atty'), x('attLse'), x('qkv'), { C, NH, half: f16 }),
      op.matmulForward(b('attproj'), x('atty'), W, {
        C,
        OC: C,
        wOff: at('attprojw', l),
        biasOff: at('attprojb', l),
        ...tuned(C, C).fwd,
        ...halfFwd(true),
      }),
      resLnFwd(x('residual2'), x('ln2'), x('ln2Mean'), x('ln2Rstd'), resid(l - 1), b('attproj'), {
        C,
        wOff: at('ln2w', l),
        bOff: at('ln2b', l),
      }),
      // bias + GELU fused into the fc matmul: fch holds the pre-activation (for the backward), then its GELU at `gelu`
      op.matmulForward(x('fch'), x('ln2'), W, {
        C,
        OC: 4 * C,
        wOff: at('fcw', l),
        biasOff: at('fcb', l),
        geluOff: gelu,
        ...tuned(C, 4 * C).fwd,
        ...halfFwd(true),
      }),
      op.matmulForward(b('fcproj'), x('fch'), W, {
        C: 4 * C,
        OC: C,
        wOff: at('fcprojw', l),
        biasOff: at('fcprojb', l),
        inOff: gelu,
        ...tuned(4 * C, C).fwd,
        ...halfFwd(true),
      }),
      resLnFwd(x('residual3'), next.out, next.mean, next.rstd, x('residual2'), b('fcproj'), {
        C,
        wOff: next.wOff,
        bOff: next.bOff,
      }),
    );
  }
  const trunkEnd = specs.length;

  // ---- the tied LM head a vocabulary chunk at a time (no (B·T, V) buffer): each chunk's logits
  // (B·T, width) = lnf · wte[v0 : v0 + width]ᵀ, folded into each row's online softmax statistics;
  // the last chunk's fold writes the losses. Every chunk on the tuner's choice for the chunk width.
  const chunks = op.vocabChunks(V, o.headChunk);
  const logitsChunk = b('logitsChunk'),
    stats = b('headStats');
  const headDims = (ch: op.VocabChunk) => ({ C, OC: ch.width, wOff: at('wte') + ch.v0 * C, biasOff: null });
  const chunkLogits = (ch: op.VocabChunk) =>
    op.matmulForward(logitsChunk, b('lnf'), W, { ...headDims(ch), ...tuned(C, o.headChunk).fwd, ...halfFwd(false) });
  const headLogits: number[] = [];
  chunks.forEach((ch, j) => {
    headLogits.push(specs.length);
    specs.push(
      chunkLogits(ch),
      op.crossEntropyChunkForward(stats, b('losses'), logitsChunk, b('targets'), {
        ...ch,
        first: j === 0,
        last: j === chunks.length - 1,
      }),
    );
  });
  specs.push(op.meanLoss(b('ring'), b('losses'), { accumulate }));
  const lossEnd = specs.length;

  // ---- backward (overwrite unless noted). A residual add passes its gradient to both inputs
  // unchanged, so the stream's gradient stays in `dres`: the projections read it as their dout,
  // and each LayerNorm backward adds its dinp into it once they have.
  // The head, last chunk first: its logits are still in logitsChunk, the others' are computed again.
  // In place they become the chunk's dlogits (from the saved logsumexp); dln = d lnf sums over the
  // chunks; each chunk's dW is its own rows of the tied wte (the embedding's gradient adds to them last).
  for (let j = chunks.length - 1; j >= 0; j--) {
    const last = j === chunks.length - 1;
    if (!last) specs.push(chunkLogits(chunks[j]));
    specs.push(
      op.crossEntropyChunkBackward(logitsChunk, stats, b('targets'), chunks[j]),
      ...op.matmulBackward(b('dln'), grads, logitsChunk, b('lnf'), W, {
        ...headDims(chunks[j]),
        partials,
        accumulateParams: accumulate,
        accumulateDinp: !last,
        ...tuned(C, o.headChunk).bwd,
        ...halfBwd,
      }),
    );
  }
  specs.push(
    ...op.layernormBackward(dres, grads, b('dln'), resid(L - 1), params, b('lnfMean'), b('lnfRstd'), {
      C,
      wOff: at('lnfw'),
      bOff: at('lnfb'),
      partials,
      accumulateParams: accumulate,
      ...lnBwd,
    }),
  );
  for (let l = L - 1; l >= 0; l--) {
    const x = (k: string) => b(`${k}.${l}`);
    specs.push(
      // dres = d residual3.l
      ...op.matmulBackward(b('dfchGelu'), grads, dres, x('fch'), W, {
        C: 4 * C,
        OC: C,
        wOff: at('fcprojw', l),
        biasOff: at('fcprojb', l),
        inOff: gelu,
        partials,
        accumulateParams: accumulate,
        ...tuned(4 * C, C).bwd,
        ...halfBwd,
      }),
      // f16: in place, so dfch is dfchGelu
      f16
        ? op.geluBackwardF16(b('dfchGelu'), x('fch'), { width: 4 * C, form })
        : op.geluBackward(b('dfch'), x('fch'), b('dfchGelu'), { width: 4 * C }),
      ...op.matmulBackward(b('dln'), grads, f16 ? b('dfchGelu') : b('dfch'), x('ln2'), W, {
        C,
        OC: 4 * C,
        wOff: at('fcw', l),
        biasOff: at('fcb', l),
        partials,
        accumulateParams: accumulate,
        ...tuned(C, 4 * C).bwd,
        ...halfBwd,
      }),
      ...op.layernormBackward(dres, grads, b('dln'), x('residual2'), params, x('ln2Mean'), x('ln2Rstd'), {
        C,
        wOff: at('ln2w', l),
        bOff: at('ln2b', l),
        partials,
        accumulateParams: accumulate,
        accumulateDinp: true,
        ...lnBwd,
      }),
      // dres = d residual2.l
      ...op.matmulBackward(datty, grads, dres, x('atty'), W, {
        C,
        OC: C,
        wOff: at('attprojw', l),
        biasOff: at('attprojb', l),
        partials,
        accumulateParams: accumulate,
        ...tuned(C, C).bwd,
        ...halfBwd,
      }),
      ...op.attentionBackward(dqkv, b('attDsum'), datty, x('qkv'), x('atty'), x('attLse'), { C, NH, half: f16 }),
      ...op.matmulBackward(b('dln'), grads, dqkv, x('ln1'), W, {
        C,
        OC: 3 * C,
        wOff: at('qkvw', l),
        biasOff: at('qkvb', l),
        partials,
        accumulateParams: accumulate,
        ...tuned(C, 3 * C).bwd,
        ...halfBwd,
      }),
      ...op.layernormBackward(dres, grads, b('dln'), resid(l - 1), params, x('ln1Mean'), x('ln1Rstd'), {
        C,
        wOff: at('ln1w', l),
        bOff: at('ln1b', l),
        partials,
        accumulateParams: accumulate,
        accumulateDinp: true,
        ...lnBwd,
      }),
    );
  }
  // dres = d encoded; the tied wte already holds the LM head's gradient: the embedding's adds to it
  specs.push(
    ...op.encoderBackward(grads, dres, b('inputs'), {
      ...enc,
      accumulateWte: true,
      accumulateWpe: accumulate,
      windows: win.vocab,
    }),
  );

  // ---- optimizer (f16: AdamW also writes the matmuls' half weight copy), a dispatch per piece of θ
  const optStart = specs.length;
  const split = win.pieces.length > 1;
  specs.push(
    ...op.gradNorm(b('clip'), b('partials'), grads, {
      N: layout.total,
      ...(split ? { pieces: win.pieces, carry: b('normCarry') } : {}),
    }),
    ...win.pieces.map((piece) =>
      op.adamwUpdate(params, grads, b('m'), b('v'), b('clip'), {
        N: layout.total,
        ranges: op.decayRanges(layout.tensors),
        ...(f16 ? { copy: W } : {}),
        ...(split ? { piece } : {}),
      }),
    ),
  );
  return { specs, trunkEnd, chunks, headLogits, lossEnd, optStart };
}
