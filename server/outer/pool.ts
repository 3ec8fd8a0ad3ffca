// The outer step off the event loop: worker threads, each owning one fragment of the parameters,
// on shared memory. The event loop only posts small messages and awaits their answers.
//
//   ingest(frame)   decode + validate (CRC, size, finite) + ‖Δ‖ on one worker (round-robin),
//                   into a shared delta slot; the caller applies its norm bound to the answer.
//   step(…)         in parallel per fragment: the weighted mean of the slots (sync) or the one
//                   delta (async), the outer optimizer's proposal, the downlink quantization with
//                   error feedback written into the shared frame; then, only if every fragment
//                   is finite, commit (θ ← θ − Q(u)); else abort (no trace). Last, θ's hash
//                   (its 65,536-word chunks split over the workers) and the frame's CRC.
//
// The result is bit-identical to the coordinator's sequential outer step (test/cluster-outer.test.ts).

import { Worker } from 'node:worker_threads';
import { type Result, err, ok } from '../../core/result.ts';
import type { OuterState } from '../../core/coord/outer.ts';
import { HEADER_BYTES, plainHeader, writeHeader } from '../../core/codec/index.ts';
import { combineChunkHashes, hashChunkCount } from '../../core/coord/hash.ts';
import { TRUST_PROBES, overLimit, trustGain } from '../../core/coord/trust.ts';
import {
  type AgreementSums,
  FRAGMENT_ALIGN,
  type FragmentStep,
  fragmentProblem,
} from '../../core/coord/outer-fragment.ts';
import type { FromOuterWorker, OuterWorkerInit, ToOuterWorker } from './worker.ts';

const REGISTER_URL = new URL('../../bin/register.js', import.meta.url).href;
const WORKER_URL = new URL('./worker.ts', import.meta.url);

/** Distributes T over the union of the message variants (so each keeps its own fields). */
type Omitted<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
type Request = Omitted<ToOuterWorker, 'id'>;
type Answer = Extract<FromOuterWorker, { ok: true }>;

/** One outer step (FragmentStep; `share` defaults to false), ‖u‖ at most `trustLimit` (trust.ts; default none). */
export type OuterStepSpec = Omit<FragmentStep, 'share' | 'gain'> & { share?: boolean; trustLimit?: number };

export interface OuterStepResult {
  /** The downlink frame every replica applies (a fresh buffer owned by the caller). */
  frame: Uint8Array;
  hash: string;
  updateNorm: number;
  /** With weights: each delta's Σ d·g and Σ d², and Σ g² (for its cosine with g). */
  agreement?: AgreementSums;
  /** The trust region's gain on g, present when it acted (< 1). */
  trustGain?: number;
}

export class OuterPool {
  readonly theta: Float32Array;
  private readonly workers: Worker[] = [];
  private readonly ranges: Array<[number, number]> = [];
  private readonly waiting = new Map<number, { resolve: (m: FromOuterWorker) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  private readonly slots: SharedArrayBuffer[] = [];
  private readonly freeSlots: number[] = [];
  private readonly frameSab: SharedArrayBuffer;
  /** θ's chunk hashes (core/coord/hash.ts), two words per chunk, written by the workers. */
  private readonly hashSab: SharedArrayBuffer;
  private rr = 0;
  private steps: Promise<unknown> = Promise.resolve();
  private broken: Error | null = null;
  private closing = false;
  private exported: { momentum: SharedArrayBuffer; buffer: SharedArrayBuffer; residual: SharedArrayBuffer } | null =
    null;

  private constructor(
    readonly n: number,
    theta: Float32Array,
    workers: number,
    readonly align: number,
  ) {
    this.theta = new Float32Array(new SharedArrayBuffer(4 * n));
    this.theta.set(theta);
    this.frameSab = new SharedArrayBuffer(HEADER_BYTES + 4 * n);
    this.hashSab = new SharedArrayBuffer(8 * hashChunkCount(n));
    const blocks = Math.ceil(n / align);
    workers = Math.max(1, Math.min(workers, blocks)); // no empty fragment (it would start off a block boundary)
    for (let w = 0; w < workers; w++) {
      const a = Math.min(n, Math.round((w * blocks) / workers) * align);
      const b = Math.min(n, Math.round(((w + 1) * blocks) / workers) * align);
      this.ranges.push([a, b]);
      const init: OuterWorkerInit & { kind: string } = {
        kind: 'atoll-outer',
        n,
        a,
        b,
        theta: this.theta.buffer as SharedArrayBuffer,
      };
      const wk = new Worker(WORKER_URL, { workerData: init, execArgv: ['--import', REGISTER_URL] });
      wk.on('message', (m: FromOuterWorker) => {
        const p = this.waiting.get(m.id);
        this.waiting.delete(m.id);
        p?.resolve(m);
      });
      // a worker that died leaves its fragment behind: every call from then on fails (never hangs)
      wk.on('error', (e) => this.fail(e));
      wk.on('exit', (code) => {
        if (!this.closing) this.fail(new Error(`outer worker ${w} exited (code ${code})`));
      });
      this.workers.push(wk);
    }
  }

  /**
   * `workers` fragments (default 2), each a whole number of `align` elements: every downlink block
   * size that divides `align` (default 65,536: every power of two the codec allows) keeps fragments
   * on block boundaries (a sparse downlink's also on whole bytes: fragmentProblem).
   */
  static start(o: { theta: Float32Array; workers?: number; align?: number }): OuterPool {
    return new OuterPool(o.theta.length, o.theta, Math.max(1, o.workers ?? 2), o.align ?? FRAGMENT_ALIGN);
  }

  private fail(e: Error): void {
    this.broken ??= e;
    for (const p of this.waiting.values()) p.reject(e);
    this.waiting.clear();
  }

  private call(w: number, req: Request): Promise<FromOuterWorker> {
    if (this.broken) return Promise.reject(this.broken);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.workers[w].postMessage({ ...req, id } as ToOuterWorker);
    });
  }

  private async all(req: Request): Promise<FromOuterWorker[]> {
    return Promise.all(this.workers.map((_, w) => this.call(w, req)));
  }

  /** A free slot (a new one is posted to every worker; each handles messages in order, so no wait). */
  newSlot(): number {
    const free = this.freeSlots.pop();
    if (free !== undefined) return free;
    const slot = this.slots.length;
    const sab = new SharedArrayBuffer(4 * this.n);
    this.slots.push(sab);
    // a failure here shows on the next call that waits for an answer
    for (let w = 0; w < this.workers.length; w++) this.call(w, { op: 'slot', slot, sab }).catch(() => {});
    return slot;
  }

  /** The decoded delta in `slot` (shared memory: valid until `release`). */
  slotView(slot: number): Float32Array {
    return new Float32Array(this.slots[slot]);
  }

  release(slot: number): void {
    this.freeSlots.push(slot);
  }

  /** Decode + validate one delta frame into a slot; its L2 norm for the caller's norm bound. */
  async ingest(frame: Uint8Array): Promise<Result<{ slot: number; norm: number }>> {
    const slot = this.newSlot();
    const r = await this.decodeInto(slot, frame);
    if (!r.ok) this.release(slot);
    return r.ok ? ok({ slot, norm: r.value }) : r;
  }

  /** Decode + validate one delta frame into `slot` on one worker (round-robin); ‖Δ‖. */
  async decodeInto(slot: number, frame: Uint8Array): Promise<Result<number>> {
    const w = this.rr++ % this.workers.length;
    const r = await this.call(w, { op: 'decode', slot, frame });
    return r.ok ? ok(r.norm!) : err(r.code, r.message);
  }

  /**
   * θ ← θ − Q(u), u the outer update for g: `slots[0]` itself when `weights` is null (async), else
   * Σ weights[j]·slots[j] (sync). Steps run one at a time, in call order. On an error nothing changed.
   */
  step(o: OuterStepSpec): Promise<Result<OuterStepResult>> {
    const run = this.steps.then(() => this.stepNow(o));
    this.steps = run.catch(() => {});
    return run;
  }

  private async stepNow(o: OuterStepSpec): Promise<Result<OuterStepResult>> {
    const cut = fragmentProblem(o.downlink, this.align);
    if (cut) return err('E_POOL_ALIGN', cut);
    const { trustLimit = Infinity, ...spec } = o;
    const propose = (gain: number) =>
      this.all({ op: 'propose', ...spec, share: o.share ?? false, gain, frame: this.frameSab });
    let proposed = await propose(1);
    let gain = 1;
    // the trust region (core/coord/trust.ts): over the limit, probe γ = 0 and −1, then propose at the γ that fits
    if (proposed.every((r) => r.ok) && overLimit(sumSquares(proposed), trustLimit)) {
      const probes: number[] = [];
      for (const probe of TRUST_PROBES) {
        await this.all({ op: 'abort' });
        const r = await propose(probe);
        probes.push(r.every((x) => x.ok) ? sumSquares(r) : NaN);
      }
      await this.all({ op: 'abort' });
      gain = probes.some(Number.isNaN) ? 0 : trustGain(sumSquares(proposed), probes[0], probes[1], trustLimit);
      proposed = await propose(gain);
    }
    const bad = proposed.find((r): r is Extract<FromOuterWorker, { ok: false }> => !r.ok);
    if (bad) {
      await this.all({ op: 'abort' });
      return err(bad.code, bad.message);
    }
    await this.all({ op: 'commit' });
    const n = this.n;
    const header = plainHeader(n, o.downlink);
    const length = HEADER_BYTES + header.rawBytes;
    writeHeader(new Uint8Array(this.frameSab, 0, HEADER_BYTES), header);
    // θ's hash chunks split over the workers; the frame sealed (deflate where asked, CRC) after the first worker's
    // share
    const W = this.workers.length,
      chunks = hashChunkCount(n);
    const hashed = this.workers.map((_, w) =>
      this.call(w, {
        op: 'hash',
        c0: Math.floor((w * chunks) / W),
        c1: Math.floor(((w + 1) * chunks) / W),
        out: this.hashSab,
      }),
    );
    const [c] = await Promise.all([
      this.call(0, { op: 'seal', frame: this.frameSab, length, deflate: o.downlink.deflate === true }),
      ...hashed,
    ]);
    let frame = (c as Answer).sealed;
    if (!frame) {
      frame = new Uint8Array(length);
      frame.set(new Uint8Array(this.frameSab, 0, length));
      new DataView(frame.buffer).setUint32(28, (c as Answer).crc!, true);
    }
    return ok({
      frame,
      hash: combineChunkHashes(new Uint32Array(this.hashSab)),
      updateNorm: Math.sqrt(sumSquares(proposed)),
      agreement: o.weights ? sumAgreement(proposed as Answer[]) : undefined,
      ...(gain < 1 ? { trustGain: gain } : {}),
    });
  }

  /**
   * The outer optimizer's state and the downlink residual, gathered from every fragment into
   * buffers kept by the pool: valid until the next export (a snapshot copies them).
   */
  async exportViews(): Promise<{ outer: OuterState; residual: Float32Array }> {
    const n = this.n;
    const sabs = (this.exported ??= {
      momentum: new SharedArrayBuffer(4 * n),
      buffer: new SharedArrayBuffer(4 * n),
      residual: new SharedArrayBuffer(4 * n),
    });
    const r = await this.all({ op: 'export', ...sabs });
    const a = r[0] as Answer;
    return {
      outer: {
        momentum: new Float32Array(sabs.momentum),
        buffer: new Float32Array(sabs.buffer),
        bufferCount: a.bufferCount!,
        steps: a.steps!,
      },
      residual: new Float32Array(sabs.residual),
    };
  }

  /** Restores state exported before (or read from a snapshot); θ is set through `theta`. */
  async importState(s: { outer: OuterState; residual: Float32Array }): Promise<void> {
    const share = (x: Float32Array) => {
      const sab = new SharedArrayBuffer(4 * this.n);
      new Float32Array(sab).set(x);
      return sab;
    };
    await this.all({
      op: 'import',
      momentum: share(s.outer.momentum),
      buffer: share(s.outer.buffer),
      residual: share(s.residual),
      bufferCount: s.outer.bufferCount,
      steps: s.outer.steps,
    });
  }

  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

/** Σu² of a proposal: the fragments' sums added up. */
function sumSquares(proposed: FromOuterWorker[]): number {
  return proposed.reduce((s, r) => s + ((r as Answer).sumSq ?? 0), 0);
}

/** The fragments' agreement sums added up. */
function sumAgreement(parts: Answer[]): AgreementSums {
  const k = parts[0].agreement!.dots.length;
  const total: AgreementSums = { dots: new Array<number>(k).fill(0), sqs: new Array<number>(k).fill(0), gg: 0 };
  for (const p of parts) {
    const a = p.agreement!;
    total.gg += a.gg;
    for (let j = 0; j < k; j++) {
      total.dots[j] += a.dots[j];
      total.sqs[j] += a.sqs[j];
    }
  }
  return total;
}
