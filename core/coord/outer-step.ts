// The coordinator's outer step: θ, the outer optimizer, and the downlink with its error feedback
// and kept update frames. θ ← θ − Q(u) with u the optimizer's update for the round's g and Q the
// downlink codec, taken here, or by a host when one is attached (OuterOffload, types.ts): then the
// step waits as `request` until the host hands its result to `complete`.

import { type Result, err, ok } from '../result.ts';
import { ErrorCode } from '../protocol.ts';
import { agreement } from './aggregate.ts';
import type { CoordinatorConfig } from './config.ts';
import { Downlink } from './downlink.ts';
import { hashParams } from './hash.ts';
import { OuterOptimizer, type OuterState, applyUpdate } from './outer.ts';
import type { UpdateMsg } from '../protocol.ts';
import { TRUST_PROBES, overLimit, trustGain } from './trust.ts';
import type { OuterOffload, OuterStepDone, OuterStepRequest, PendingDelta } from './types.ts';

/** A step taken: the downlink frame every replica applies, θ's new hash, ‖u‖. */
export interface StepTaken {
  frame: Uint8Array;
  hash: string;
  updateNorm: number;
  /** The trust region's gain on g (trust.ts), present when it acted (< 1). */
  trustGain?: number;
}

/** How much of a step: scale s, period (0: the plain step u = s·g), a merge window's share, the momentum's anneal. */
export interface StepSize {
  scale: number;
  period: number;
  share?: boolean;
  anneal?: number;
}

export class OuterStep {
  theta: Float32Array;
  readonly outer: OuterOptimizer;
  readonly downlink: Downlink;
  /** Where the coordinator combines g (the host's shared buffer once offloaded). */
  g: Float32Array;
  offload: OuterOffload | null = null;
  /** The step the host must take now (offload only), or null. */
  request: OuterStepRequest | null = null;
  /** The downlink residual as snapshots see it (the host's after an offloaded step). */
  private residualView: Float32Array;
  /** Offloaded steps taken since the host last handed its optimizer and downlink state over. */
  stale = 0;
  /** Delta buffers given back, reused (here; the host keeps its own once offloaded). */
  private readonly pool: Float32Array[] = [];

  constructor(params: Float32Array) {
    const n = params.length;
    this.theta = params.slice();
    this.outer = new OuterOptimizer(n);
    this.downlink = new Downlink(n);
    this.residualView = this.downlink.fb.residual;
    this.g = new Float32Array(n);
  }

  /** The optimizer's state and the downlink residual as they stand (views: a snapshot copies them). */
  state(): { outer: OuterState; residual: Float32Array } {
    if (this.stale) throw new Error('coordinator: the outer state is in the host (syncOuterState first)');
    return { outer: this.outer.state, residual: this.residualView };
  }

  /** Restores the state and the kept update frames of a snapshot (here, before any offload). */
  restore(outer: OuterState, residual: Float32Array, updates: UpdateMsg[]): void {
    this.outer.state = outer;
    this.downlink.fb.residual.set(residual);
    this.downlink.updates = updates;
  }

  /**
   * θ and the state of a rebuilt run (a revert) replace these; no kept
   * update frame leads to it. A host must import the state again.
   */
  adopt(theta: Float32Array, outer: OuterState, residual: Float32Array): void {
    this.theta.set(theta);
    this.outer.state = {
      momentum: outer.momentum.slice(),
      buffer: outer.buffer.slice(),
      bufferCount: outer.bufferCount,
      steps: outer.steps,
    };
    this.downlink.fb.residual.set(residual);
    this.residualView = this.downlink.fb.residual;
    this.downlink.updates = [];
    this.stale = 0;
  }

  /** The host's optimizer and downlink state after its last step (views kept for snapshots). */
  sync(outer: OuterState, residual: Float32Array): void {
    this.outer.state = outer;
    this.residualView = residual;
    this.stale = 0;
  }

  /** A buffer to hold a delta in (the host's shared memory once offloaded). */
  take(): Float32Array {
    return this.offload?.buffer() ?? this.pool.pop() ?? new Float32Array(this.theta.length);
  }

  /** Gives a delta's buffer back. */
  release(b: Float32Array): void {
    if (this.offload) this.offload.release(b);
    else if (this.pool.length < 64) this.pool.push(b);
  }

  /** θ and g move into the host's buffers; deltas held (since a restore) move there too. */
  useOffload(o: OuterOffload, pending: PendingDelta[]): void {
    if (o.theta.length !== this.theta.length || o.g.length !== this.theta.length)
      throw new RangeError('offload buffers do not match the parameter count');
    o.theta.set(this.theta);
    this.theta = o.theta;
    this.g = o.g;
    this.offload = o;
    this.pool.length = 0; // deltas live in the host's buffers from now on
    for (const p of pending) {
      const b = o.buffer();
      b.set(p.delta);
      p.delta = b;
    }
  }

  /**
   * The step for the round's `kept` deltas, weighed, and combined into `g` unless `inHost` (the
   * host then takes their weighted mean), its ‖u‖ at most `trustLimit` (trust.ts). Here: its
   * result. Offloaded: null, and `request` waits.
   */
  begin(
    cfg: CoordinatorConfig,
    kept: PendingDelta[],
    inHost: boolean,
    { scale, period, share, anneal = 1 }: StepSize,
    trustLimit = Infinity,
  ): Result<StepTaken> | null {
    if (this.offload) {
      this.request = {
        deltas: inHost ? kept.map((p) => p.delta) : null,
        weights: inHost ? kept.map((p) => p.weight) : null,
        outer: { ...cfg.outer },
        downlink: { ...cfg.downlink },
        scale,
        period,
        share: share ?? false,
        anneal,
        trustLimit,
      };
      return null;
    }
    // Σu² of the proposal at gain γ on g, or null when u is not finite
    const propose = (gain: number): number | null => {
      const finite =
        period === 0
          ? this.outer.proposePlain(this.g, scale * gain)
          : this.outer.propose(cfg.outer, this.g, scale, period, share, gain, anneal);
      return finite ? sumSquares(this.outer.update) : null;
    };
    let sumSq = propose(1);
    let gain = 1;
    if (sumSq !== null && overLimit(sumSq, trustLimit)) {
      const [q0, qm1] = TRUST_PROBES.map(propose);
      gain = q0 === null || qm1 === null ? 0 : trustGain(sumSq, q0, qm1, trustLimit);
      sumSq = propose(gain);
    }
    if (sumSq === null) return err(ErrorCode.NON_FINITE, 'the outer update overflowed');
    const q = this.downlink.encode(this.outer.update, cfg.downlink);
    if (!q.ok) return q;
    this.outer.commit();
    applyUpdate(this.theta, q.value.decoded);
    const taken = { frame: q.value.frame, hash: hashParams(this.theta), updateNorm: Math.sqrt(sumSq) };
    return ok(gain < 1 ? { ...taken, trustGain: gain } : taken);
  }

  /** The host took the requested step (θ moved) or failed to (nothing moved). */
  complete(res: Result<OuterStepDone>, kept: PendingDelta[]): Result<StepTaken> {
    if (!this.request) throw new Error('coordinator: no outer step is in flight');
    this.request = null;
    if (!res.ok) return res;
    const { frame, hash, updateNorm, agreement: a, trustGain: gain } = res.value;
    this.stale++;
    if (a)
      agreement(
        kept,
        a.dots.map((dot, j) => (a.sqs[j] > 0 && a.gg > 0 ? dot / Math.sqrt(a.sqs[j] * a.gg) : 0)),
      );
    return ok(
      gain !== undefined && gain < 1 ? { frame, hash, updateNorm, trustGain: gain } : { frame, hash, updateNorm },
    );
  }

  /** Copies of the optimizer's state. */
  outerState(): OuterState {
    const s = this.state().outer;
    return { momentum: s.momentum.slice(), buffer: s.buffer.slice(), bufferCount: s.bufferCount, steps: s.steps };
  }
}

/** Σx² in element order (l2's sum, before its root). */
function sumSquares(x: Float32Array): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i] * x[i];
  return s;
}
