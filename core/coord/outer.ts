// Outer optimizers (the server side of DiLoCo) and the one function every replica uses to apply
// an update.
//
// Conventions: g is a pseudo-gradient (θ_start − θ_end, so a *descent* direction is +g), and an
// update u is subtracted: θ ← θ − u. All state is flat Float32Array in the parameter layout.
//
//   sgd / nesterov (PyTorch SGD(nesterov=True) semantics, as DiLoCo):
//       g' = s·g;  m ← μ·m + g';  u = lr·(g' + μ·m)          (nesterov)
//                                  u = lr·m                   (sgd with momentum; μ = 0 → lr·g')
//     DiLoCo: nesterov lr 0.7, μ 0.9.   FedAvg: sgd lr 1, μ 0.
//   delayed-nesterov (Async Local-SGD, Liu et al. 2024; our reading of "DN"):
//       every arrival:   g' = s·g;  b ← b + g';  u = lr·g'        (plain step, no momentum)
//       every N-th one:  m ← μ·m + b;  u += lr·μ·m;  b ← 0        (momentum applied once per N)
//     With s = 1/N, N arrivals move θ by lr·(ḡ + μ·m) with ḡ their mean: exactly one sync
//     Nesterov step on the average, but each arrival still lands immediately.
//
// s is the caller's scale: 1 in sync mode (g is already the round's weighted mean), 1/N in async
// mode (one island's Δ is 1/N of a round's worth of progress). An async merge window that holds the
// share s of a fleet round (`share`) takes that fraction of an outer step:
//       m ← μ^s·m + s·g;  u = lr·(s·g + s·μ·m)  (nesterov),  u = lr·s·m  (sgd)
// so 1/s such windows move θ about as one full step does; a full momentum step per small window
// (the budget's tail, a window of the fast islands alone) overshot.
//
// The momentum follows the inner learning-rate schedule (`anneal`, momentumAnneal in anneal.ts): its
// decay takes the factor η(now)/η(last step) ≤ 1, as PyTorch's SGD momentum under a schedule, whose
// buffer holds raw gradients that the current lr scales. A pseudo-gradient is already η-scaled, so
// without it a run of a few outer steps ends with a momentum of its early, large-η pseudo-gradients,
// which undoes the cosine's annealing (a fleet twin on sotu: eval 3.14 → 4.63 over its last 4 steps).

export type OuterKind = 'nesterov' | 'sgd' | 'delayed-nesterov';

export interface OuterConfig {
  kind: OuterKind;
  lr: number;
  momentum: number;
  /** delayed-nesterov: arrivals per momentum step; 0 = the number of active islands. */
  dnPeriod: number;
}

export const DILOCO_OUTER: OuterConfig = { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 };
export const FEDAVG_OUTER: OuterConfig = { kind: 'sgd', lr: 1, momentum: 0, dnPeriod: 0 };

/** The optimizer's persistent state (part of every snapshot). */
export interface OuterState {
  momentum: Float32Array;
  /** delayed-nesterov: sum of scaled pseudo-gradients since the last momentum step. */
  buffer: Float32Array;
  /** delayed-nesterov: arrivals in `buffer`. */
  bufferCount: number;
  /** Outer steps taken. */
  steps: number;
}

export function newOuterState(n: number): OuterState {
  return { momentum: new Float32Array(n), buffer: new Float32Array(n), bufferCount: 0, steps: 0 };
}

/**
 * Two-phase outer step: `propose` computes the update u and the next state into shadow buffers
 * without touching the live state; `commit` swaps them in. A caller that finds u unusable (non-finite
 * after quantization, say) simply does not commit, so a failed step leaves no trace.
 */
export class OuterOptimizer {
  state: OuterState;
  private nextMomentum: Float32Array;
  private nextBuffer: Float32Array;
  private nextBufferCount = 0;
  /** The proposed update (θ ← θ − u), valid after `propose`. */
  readonly update: Float32Array;

  constructor(n: number, state?: OuterState) {
    this.state = state ?? newOuterState(n);
    if (this.state.momentum.length !== n || this.state.buffer.length !== n)
      throw new RangeError('outer state does not match the parameter count');
    this.nextMomentum = new Float32Array(n);
    this.nextBuffer = new Float32Array(n);
    this.update = new Float32Array(n);
  }

  /**
   * Computes u for pseudo-gradient `g` with scale `s` and (delayed-nesterov) period `period`; with
   * `share`, s is the window's share of a fleet round (sgd/nesterov: that fraction of a step: sgd
   * without momentum moves lr·s·g). `gain` multiplies g alone, s keeping its share of a step (the
   * trust region's γ, trust.ts: the momentum takes γ·s·g). `anneal` (≤ 1) multiplies the momentum's
   * decay: the schedule's η ratio since the last step (header).
   * Returns false when u has a non-finite entry (then nothing may be committed).
   */
  propose(cfg: OuterConfig, g: Float32Array, s: number, period: number, share = false, gain = 1, anneal = 1): boolean {
    const { lr, momentum: mu } = cfg;
    const m = this.state.momentum,
      mNext = this.nextMomentum,
      u = this.update;
    const n = g.length;
    const sg = s * gain; // the trust region's gain on g alone (trust.ts); s·1 is s
    let probe = 0;
    if (cfg.kind === 'delayed-nesterov') {
      const b = this.state.buffer,
        bNext = this.nextBuffer;
      const flush = this.state.bufferCount + 1 >= Math.max(1, period);
      for (let i = 0; i < n; i++) {
        const gi = sg * g[i];
        let ui = lr * gi;
        const bi = b[i] + gi;
        if (flush) {
          const mi = Math.fround(mu * m[i] + Math.fround(bi));
          mNext[i] = mi;
          bNext[i] = 0;
          ui += lr * mu * mi;
        } else {
          mNext[i] = m[i];
          bNext[i] = bi;
        }
        u[i] = ui;
        probe += u[i] * 0;
      }
      this.nextBufferCount = flush ? 0 : this.state.bufferCount + 1;
    } else {
      const nesterov = cfg.kind === 'nesterov';
      const decay = (share ? Math.pow(mu, s) : mu) * anneal,
        part = share ? s : 1;
      for (let i = 0; i < n; i++) {
        const gi = sg * g[i];
        const mi = Math.fround(decay * m[i] + gi);
        mNext[i] = mi;
        // a share s of a step: the step's gradient term s·g plus s of its momentum term
        u[i] = nesterov ? lr * (gi + part * mu * mi) : share ? lr * (gi + part * decay * m[i]) : lr * mi;
        probe += u[i] * 0;
      }
      this.nextBufferCount = this.state.bufferCount;
      this.nextBuffer.set(this.state.buffer);
    }
    return probe === 0;
  }

  /** Proposes u = s·g with the state left as it is (a plain FedAvg step that does not touch momentum). */
  proposePlain(g: Float32Array, s: number): boolean {
    const u = this.update;
    let probe = 0;
    for (let i = 0; i < g.length; i++) {
      u[i] = s * g[i];
      probe += u[i] * 0;
    }
    this.nextMomentum.set(this.state.momentum);
    this.nextBuffer.set(this.state.buffer);
    this.nextBufferCount = this.state.bufferCount;
    return probe === 0;
  }

  /** Makes the last proposal the live state. */
  commit(): void {
    const s = this.state;
    const m = s.momentum,
      b = s.buffer;
    s.momentum = this.nextMomentum;
    s.buffer = this.nextBuffer;
    s.bufferCount = this.nextBufferCount;
    s.steps += 1;
    this.nextMomentum = m;
    this.nextBuffer = b;
  }
}

/**
 * θ ← θ − u, elementwise in float32. THE function every replica (server, islands, simulator)
 * uses to apply a decoded update, so all of them produce the same bits.
 */
export function applyUpdate(theta: Float32Array, decoded: Float32Array): void {
  const n = theta.length;
  if (decoded.length !== n) throw new RangeError(`update has ${decoded.length} elements, θ has ${n}`);
  for (let i = 0; i < n; i++) theta[i] = theta[i] - decoded[i];
}
