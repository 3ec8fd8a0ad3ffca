// The outer step off the event loop, for a Run: the coordinator's OuterOffload backed by OuterPool
// (worker threads, each owning one fragment of θ, on shared memory).
//   ingest(frame)  decodes a delta on a worker into a shared buffer the coordinator's submit takes over;
//   step(req)      runs the step the coordinator asks for (OuterOffload.step): the weighted mean of
//                  the held deltas (or g, combined by the coordinator for a robust rule), the outer
//                  optimizer, the downlink quantization with error feedback, θ ← θ − Q(u), θ's hash
//                  and the frame's CRC; the round closes with its answer;
//   syncState      hands the optimizer's and downlink's state over when a snapshot needs it.
// The event loop only posts messages meanwhile. Bit-identical to the coordinator's own step
// (test/outer-offload.test.ts).

import type { Coordinator, OuterStepDone, OuterStepRequest } from '../../core/coord/coordinator.ts';
import { type Result, ok } from '../../core/result.ts';
import { OuterPool } from './pool.ts';

export class OuterOffloadHost {
  /** The pool slot behind each delta buffer handed to the coordinator, and the free ones. */
  private readonly slotOf = new Map<Float32Array, number>();
  private readonly free: Float32Array[] = [];
  /** Decodes in flight, and the ingests waiting for one to finish (at most 2 per worker run). */
  private decoding = 0;
  private readonly queued: Array<() => void> = [];

  private constructor(
    private readonly pool: OuterPool,
    private readonly gSlot: number,
    readonly workers: number,
  ) {}

  /**
   * Moves `coord`'s outer step into `workers` threads (its θ, optimizer and downlink state with it),
   * each owning a fragment of a whole number of `align` elements (OuterPool.start).
   */
  static async start(coord: Coordinator, workers: number, align?: number): Promise<OuterOffloadHost> {
    const pool = OuterPool.start({ theta: coord.params() as Float32Array, workers, align });
    await pool.importState({ outer: coord.outerState(), residual: coord.downlinkResidual() });
    const host = new OuterOffloadHost(pool, pool.newSlot(), workers);
    coord.useOffload({
      step: (req) => host.step(req),
      theta: pool.theta,
      g: pool.slotView(host.gSlot),
      buffer: () => host.buffer(),
      release: (b) => host.release(b),
    });
    return host;
  }

  /** A free delta buffer in shared memory, known to every worker. */
  buffer(): Float32Array {
    const reused = this.free.pop();
    if (reused) return reused;
    const slot = this.pool.newSlot();
    const view = this.pool.slotView(slot);
    this.slotOf.set(view, slot);
    return view;
  }

  /**
   * Decode + validate a delta frame on a worker, into a shared buffer that the coordinator's
   * `submit` takes over (DeltaSubmission.decoded). At most two decodes per worker run at once.
   */
  async ingest(frame: Uint8Array): Promise<Result<{ delta: Float32Array; norm: number }>> {
    while (this.decoding >= 2 * this.workers) await new Promise<void>((go) => this.queued.push(go));
    this.decoding++;
    const delta = this.buffer();
    try {
      const r = await this.pool.decodeInto(this.slotOf.get(delta)!, frame);
      if (!r.ok) this.free.push(delta);
      return r.ok ? ok({ delta, norm: r.value }) : r;
    } finally {
      this.decoding--;
      this.queued.shift()?.();
    }
  }

  /**
   * Takes one outer step the coordinator asked for (OuterOffload.step); a rejected step, e.g. a
   * non-finite update, is an error result: nothing moved. Rejects only when a worker died: θ may
   * then be half moved, and the caller must stop the process (nothing unacknowledged is lost).
   */
  async step(req: OuterStepRequest): Promise<Result<OuterStepDone>> {
    const slots = req.deltas
      ? req.deltas.map((d) => this.slotOf.get(d) ?? fail('a delta outside the shared buffers'))
      : [this.gSlot];
    return this.pool.step({
      slots,
      weights: req.weights,
      outer: req.outer,
      downlink: { ...req.downlink },
      scale: req.scale,
      period: req.period,
      share: req.share,
      anneal: req.anneal,
      trustLimit: req.trustLimit,
    });
  }

  /**
   * Hands the workers' optimizer and downlink state to the coordinator (for a snapshot), unless a
   * step completed meanwhile (then it is still stale: sync again).
   */
  async syncState(coord: Coordinator): Promise<void> {
    const version = coord.version;
    const state = await this.pool.exportViews();
    if (coord.version === version && !coord.stepping) coord.syncOuterState(state.outer, state.residual);
  }

  /** The coordinator's optimizer and downlink state go to the workers again (θ is shared already): after a revert. */
  async importState(coord: Coordinator): Promise<void> {
    await this.pool.importState({ outer: coord.outerState(), residual: coord.downlinkResidual() });
  }

  /** Gives a buffer from `ingest` back unused. */
  release(b: Float32Array): void {
    this.free.push(b);
  }

  /** Shared buffers handed out (tests: the coordinator reuses them). */
  get buffers(): number {
    return this.slotOf.size;
  }

  async close(): Promise<void> {
    await this.pool.close();
  }
}

function fail(why: string): never {
  throw new Error(`outer offload: ${why}`);
}
