// One fragment [a, a + len) of the outer step: its share of the outer optimizer's state
// (momentum, delayed-Nesterov buffer) and of the downlink's error-feedback residual, and the
// step on it as propose → commit or abort. Pure: the server's worker threads (server/outer/)
// each own one, on shared θ, shared delta slots and the shared downlink frame.
//
// The fragment starts on a downlink block boundary, so its blocks are the whole frame's blocks:
// encoding the fragment with the codec's own encodeWithFeedback and placing each section of its
// payload (scales and values; sparse: scales, phases or offsets, codes) at its offset in the frame
// gives the same bytes as encoding all of θ at once.

import {
  type CodecOptions,
  CodecScratch,
  type DownlinkEncoding,
  ErrorFeedback,
  HEADER_BYTES,
  encodeWithFeedback,
  offsetBits,
  sparseK,
  sparseKept,
  sparseSections,
} from '../codec/index.ts';
import { type OuterConfig, OuterOptimizer, applyUpdate } from './outer.ts';
import { type ProposalSums, agreementOf, chunkScratch, combineAll, proposeInt8 } from './outer-int8.ts';

/**
 * The downlink the fragments quantize to (the coordinator's downlink config; sparse: the codec's chunk options);
 * `deflate`: the frame is sealed deflated (the pool's 'seal').
 */
export type DownlinkSpec = Omit<CodecOptions, 'encoding' | 'blockSize'> & {
  encoding: DownlinkEncoding;
  blockSize: number;
};

/** Fragments start on multiples of this many entries (OuterPool's default alignment). */
export const FRAGMENT_ALIGN = 65536;

/** Per-fragment sums for each delta's agreement with g: Σ d_j·g, Σ d_j², and Σ g² (weighted steps only). */
export interface AgreementSums {
  dots: number[];
  sqs: number[];
  gg: number;
}

/**
 * One outer step over the fragments: g = `slots[0]` itself (weights null) or Σ weights[j]·slots[j];
 * u by `outer` with scale and period (period 0: the plain step u = scale·g; `share`: a merge
 * window's share of a step, as OuterOptimizer.propose); then the downlink quantization.
 */
export interface FragmentStep {
  slots: number[];
  weights: number[] | null;
  outer: OuterConfig;
  downlink: DownlinkSpec;
  scale: number;
  period: number;
  share: boolean;
  /** The trust region's gain on g alone (trust.ts; default 1). */
  gain?: number;
  /** The momentum's decay follows the inner schedule (OuterOptimizer.propose; default 1). */
  anneal?: number;
}

/** One section of a fragment's own payload, `from` there, `bytes` long, and where it goes in the whole payload. */
export interface FragmentSection {
  at: number;
  from: number;
  bytes: number;
}

/** Entries a sparse downlink keeps per chunk, its layout, and bits per offset (top-k) of a chunk. */
function sparseShape(d: DownlinkSpec): { C: number; k: number; v: 1 | 2; strided: boolean; bits: number } {
  const C = d.blockSize;
  return { C, k: sparseK(C, d.topkFraction), v: d.valueBits ?? 2, strided: d.strided === true, bits: offsetBits(C) };
}

/**
 * The sections of fragment [a, b)'s own payload and their offsets in the whole frame's payload. a is on a
 * block boundary (so, blocks being even, on a whole int4 byte; sparse: fragmentProblem says it is on a whole
 * byte of every section).
 */
export function fragmentSections(n: number, a: number, b: number, d: DownlinkSpec): FragmentSection[] {
  const len = b - a;
  if (d.encoding === 'f32') return [{ at: 4 * a, from: 0, bytes: 4 * len }];
  const B = d.blockSize,
    c0 = a / B;
  if (d.encoding === 'sparse') {
    const s = sparseShape(d),
      layout = { strided: s.strided, valueBits: s.v };
    const whole = sparseSections(n, B, s.k, layout),
      own = sparseSections(len, B, s.k, layout);
    const before = sparseKept(a, B, s.k, s.strided); // a whole number of chunks: c0·k entries
    return [
      { at: 4 * s.v * c0, from: 0, bytes: own.places },
      {
        at: whole.places + (s.strided ? 2 * c0 : (before * s.bits) / 8),
        from: own.places,
        bytes: own.codes - own.places,
      },
      { at: whole.codes + (before * s.v) / 8, from: own.codes, bytes: own.end - own.codes },
    ];
  }
  const nb = Math.ceil(n / B),
    scales = { at: 4 * c0, from: 0, bytes: 4 * Math.ceil(len / B) };
  const values =
    d.encoding === 'int4' ? { at: 4 * nb + a / 2, bytes: Math.ceil(len / 2) } : { at: 4 * nb + a, bytes: len };
  return [scales, { ...values, from: scales.bytes }];
}

/**
 * Why fragments on multiples of `align` cannot be cut from a frame of this downlink, or null: a block must divide
 * `align`, and (sparse) the chunks of `align` entries must keep whole bytes of offsets and codes.
 */
export function fragmentProblem(d: DownlinkSpec, align = FRAGMENT_ALIGN): string | null {
  if (d.encoding === 'f32') return null;
  if (align % d.blockSize !== 0)
    return `downlink block size ${d.blockSize} does not divide the fragment alignment ${align}`;
  if (d.encoding !== 'sparse') return null;
  const s = sparseShape(d),
    kept = (align / s.C) * s.k;
  if ((kept * s.v) % 8 !== 0 || (!s.strided && (kept * s.bits) % 8 !== 0))
    return (
      `a sparse downlink keeping ${s.k} of ${s.C} entries at ${s.v} bit(s) cannot be cut into fragments of ` +
      `${align} entries on whole bytes: choose topkFraction so that ${align / s.C} × k × valueBits is a multiple of 8`
    );
  return null;
}

/** One fragment's outer optimizer and downlink residual, with the shadow buffers of a proposal. */
export class Fragment {
  outer: OuterOptimizer;
  readonly fb: ErrorFeedback;
  private readonly residualBackup: Float32Array;
  private readonly scratch = new CodecScratch();
  private readonly g: Float32Array;
  // the fused int8 path proposes into these and swaps them in on commit
  private mNext: Float32Array;
  private bNext: Float32Array;
  private eNext: Float32Array;
  private readonly dq: Float32Array;
  private nextCount = 0;
  /** Whether the fused proposal wrote a new momentum into mNext / a new delayed-Nesterov buffer into bNext. */
  private momentumMoved = false;
  private bufferMoved = false;
  private acc: Float64Array = new Float64Array(0);
  /** What the last proposal would subtract from θ, or null when there is none. */
  private decoded: Float32Array | null = null;
  private fused = false;

  constructor(readonly len: number) {
    this.outer = new OuterOptimizer(len);
    this.fb = new ErrorFeedback(len);
    this.residualBackup = new Float32Array(len);
    this.g = new Float32Array(len);
    this.mNext = new Float32Array(len);
    this.bNext = new Float32Array(len);
    this.eNext = new Float32Array(len);
    this.dq = new Float32Array(len);
    // touch every page of the fused path's buffers now: a fresh page faults on its first write, and
    // the first steps (which write mNext, bNext, eNext, then their swapped twins) ran 3× slower
    for (const a of [this.g, this.mNext, this.bNext, this.eNext, this.dq]) a.fill(0);
  }

  /**
   * The fragment of g: the one delta (weights null), or Σ w_j·d_j accumulated in f64 in slot order
   * and rounded once (as the coordinator's combineDeltas), with each delta's agreement sums: the
   * int8 path's first pass (outer-int8.ts).
   */
  private gradient(slots: Float32Array[], m: FragmentStep, a: number): { g: Float32Array; agreement?: AgreementSums } {
    const len = this.len;
    if (m.weights === null) return { g: slots[m.slots[0]].subarray(a, a + len) };
    const D = m.slots.map((s) => slots[s].subarray(a, a + len));
    const sums: ProposalSums = new Float64Array(2 * D.length + 2);
    this.acc = chunkScratch(0, this.acc);
    combineAll(D, Float64Array.from(m.weights), this.g, this.acc, sums);
    return { g: this.g, agreement: agreementOf(sums, D.length) };
  }

  /**
   * Returns Σu² of the proposed update (and, for a weighted g, the
   * agreement sums), or an error (then nothing may be committed).
   */
  propose(
    slots: Float32Array[],
    m: FragmentStep,
    n: number,
    a: number,
    frame: SharedArrayBuffer,
  ): { sumSq: number; agreement?: AgreementSums } | { code: string; message: string } {
    this.fused = m.downlink.encoding === 'int8';
    if (this.fused) return this.proposeInt8(slots, m, n, a, frame);
    const { g, agreement } = this.gradient(slots, m, a);
    const gain = m.gain ?? 1;
    const finite =
      m.period === 0
        ? this.outer.proposePlain(g, m.scale * gain)
        : this.outer.propose(m.outer, g, m.scale, m.period, m.share, gain, m.anneal ?? 1);
    if (!finite) return { code: 'E_NON_FINITE', message: 'the outer update overflowed' };
    this.residualBackup.set(this.fb.residual);
    // the fragment's own frame is never deflated: its bytes are cut into the whole frame, which the pool seals
    const q = encodeWithFeedback(this.outer.update, this.fb, { ...m.downlink, deflate: false }, this.scratch);
    if (!q.ok) {
      this.fb.residual.set(this.residualBackup);
      return { code: q.error.code, message: `the outer update could not be encoded: ${q.error.message}` };
    }
    this.decoded = q.value.decoded;
    // each section of the fragment's own payload goes to its place in the whole frame
    const own = q.value.frame.subarray(HEADER_BYTES);
    for (const x of fragmentSections(n, a, a + this.len, m.downlink))
      new Uint8Array(frame, HEADER_BYTES + x.at, x.bytes).set(own.subarray(x.from, x.from + x.bytes));
    let sumSq = 0;
    const u = this.outer.update;
    for (let i = 0; i < this.len; i++) sumSq += u[i] * u[i];
    return { sumSq, agreement };
  }

  /**
   * `gradient` (with the agreement sums), OuterOptimizer.propose, then encodeWithFeedback with int8
   * blocks, fused into passes over chunks of the fragment (outer-int8.ts): the same float
   * operations in the same order (test/cluster-outer.test.ts checks the bits).
   */
  private proposeInt8(
    slots: Float32Array[],
    m: FragmentStep,
    n: number,
    a: number,
    frame: SharedArrayBuffer,
  ): { sumSq: number; agreement?: AgreementSums } | { code: string; message: string } {
    const { lr, momentum: mu, kind } = m.outer;
    const st = this.outer.state,
      len = this.len,
      B = m.downlink.blockSize;
    const plain = m.period === 0; // u = s·g, the state kept (OuterOptimizer.proposePlain)
    const dn = !plain && kind === 'delayed-nesterov';
    const flush = dn && st.bufferCount + 1 >= Math.max(1, m.period);
    const D = m.slots.map((j) => slots[j].subarray(a, a + len));
    const W = m.weights === null ? null : Float64Array.from(m.weights);
    const k = D.length;
    this.acc = chunkScratch(B, this.acc);
    const sums: ProposalSums = new Float64Array(2 * k + 2);
    const r = proposeInt8(
      {
        D,
        W,
        kind: plain
          ? 'plain'
          : dn
            ? flush
              ? 'delayed-flush'
              : 'delayed'
            : kind === 'nesterov'
              ? 'nesterov'
              : m.share
                ? 'momentum-share'
                : 'momentum',
        s: m.scale * (m.gain ?? 1), // the trust region's gain on g alone; decay and part keep the share
        lr,
        mu,
        decay: (m.share ? Math.pow(mu, m.scale) : mu) * (m.anneal ?? 1),
        part: m.share ? m.scale : 1,
        m: st.momentum,
        b: st.buffer,
        e: this.fb.residual,
        mNext: this.mNext,
        bNext: this.bNext,
        eNext: this.eNext,
        g: this.g,
        dq: this.dq,
        scales: new Float32Array(frame, HEADER_BYTES + 4 * (a / B), Math.ceil(len / B)),
        q: new Int8Array(frame, HEADER_BYTES + 4 * Math.ceil(n / B) + a, len),
        blockSize: B,
        acc: this.acc,
      },
      sums,
    );
    if (r === 1) return { code: 'E_NON_FINITE', message: 'the outer update overflowed' };
    if (r === 2) return { code: 'E_CORRUPT', message: 'the outer update could not be encoded: int8 value -128' };
    this.nextCount = dn ? (flush ? 0 : st.bufferCount + 1) : st.bufferCount;
    this.momentumMoved = !plain && (!dn || flush);
    this.bufferMoved = dn;
    this.decoded = this.dq;
    return { sumSq: sums[2 * k + 1], agreement: W === null ? undefined : agreementOf(sums, k) };
  }

  /** θ ← θ − Q(u) and the proposal's state becomes the live one. */
  commit(theta: Float32Array): void {
    if (!this.decoded) return;
    if (this.fused) {
      const st = this.outer.state;
      if (this.momentumMoved) [st.momentum, this.mNext] = [this.mNext, st.momentum]; // else unchanged: no copy
      if (this.bufferMoved) [st.buffer, this.bNext] = [this.bNext, st.buffer]; // else unchanged: no copy
      st.bufferCount = this.nextCount;
      st.steps += 1;
      [this.fb.residual, this.eNext] = [this.eNext, this.fb.residual];
    } else this.outer.commit();
    applyUpdate(theta, this.decoded);
    this.decoded = null;
  }

  abort(): void {
    if (this.decoded && !this.fused) this.fb.residual.set(this.residualBackup); // the generic path moved its residual
    this.decoded = null;
  }
}
