// IslandRuntime: one island's loop, engine-agnostic and transport-agnostic.
//
//   hello → assignment ─┐
//   ┌───────────────────┘
//   │ bring the replica θ to the assignment's base version (updates, else snapshot; hash-checked)
//   │ engine.setParams(θ_v) (fresh AdamW if the assignment says so)
//   │ innerSteps × engine.step (lr from the assignment's plan)
//   │ Δ = engine.readDelta(); frame = encodeWithFeedback(Δ, residual)   (residual stays here)
//   │ submitDelta(meta, frame) → ack (durable)            nextAssignment() → assignment
//   │ (not applied, sparse codes: what was sent goes back into the residual, so no work is dropped)
//   └─ (and again, from the next assignment)
//
// The browser worker, the Node island (`atoll island`) and the simulator all run this class; only
// the Transport, the Clock and the TrainingEngine differ. No node: imports.

import { CodecScratch, ErrorFeedback, encodeWithFeedback } from '../../core/codec/index.ts';
import { AUDITABLE_ENCODINGS } from '../../core/coord/audit.ts';
import { allocBatch, sampleBatch } from '../../core/data/dataset.ts';
import { rangeBatch } from '../../core/data/shards.ts';
import type { Batch, TrainingEngine } from '../../core/engine/index.ts';
import {
  type AckMsg,
  type Assignment,
  type DeltaMeta,
  type IslandCaps,
  ErrorCode,
  PROTOCOL_VERSION,
  innerLearningRate,
} from '../../core/protocol.ts';
import { backoff } from '../../core/random.ts';
import type { AtollError, Result } from '../../core/result.ts';
import { type Clock, type Transport, wallClock } from './transport.ts';
import type { TokenArray } from '../../core/data/tokenizer.ts';
import { ReplicaSync } from './replica-sync.ts';
import { hashParams } from '../../core/coord/hash.ts';
import type {
  IslandEvent,
  IslandProgress,
  IslandRunSummary,
  IslandRuntimeOptions,
  IslandStatusName,
} from './runtime-types.ts';

export type {
  IslandEvent,
  IslandProgress,
  IslandRunSummary,
  IslandRuntimeOptions,
  IslandStatusName,
} from './runtime-types.ts';

export class IslandRuntime {
  readonly engine: TrainingEngine;
  private readonly transport: Transport;
  private readonly train: TokenArray;
  private readonly clock: Clock;
  private readonly opts: IslandRuntimeOptions;
  private readonly listeners = new Set<(e: IslandEvent) => void>();
  readonly progress: IslandProgress = {
    status: 'idle',
    islandId: null,
    roundId: null,
    step: 0,
    of: 0,
    loss: NaN,
    lr: 0,
    tokensPerSec: 0,
    version: -1,
    rounds: 0,
    tokens: 0,
    accepted: 0,
    rejected: {},
    bytesUp: 0,
    bytesDown: 0,
    snapshots: 0,
  };
  /** θ's replica and the downlink (replica-sync.ts). */
  private readonly replicas: ReplicaSync;
  private unsubscribe: (() => void) | null = null;
  private feedback: ErrorFeedback | null = null;
  /** The decoded frame of the delta in flight (sparse codes: put back into the residual unless applied). */
  private sent: Float32Array | null = null;
  private readonly scratch = new CodecScratch();
  private batch: Batch | null = null;
  /** AdamW steps of the engine's optimizer state since it was fresh (its lr warmup, InnerLrPlan.localWarmupSteps). */
  private optimizerSteps = 0;
  private seq = 0;
  private paused = false;
  private stopped = false;
  private resumeWaiters: Array<() => void> = [];
  private running: Promise<IslandRunSummary> | null = null;

  constructor(opts: IslandRuntimeOptions) {
    this.opts = opts;
    this.engine = opts.engine;
    this.transport = opts.transport;
    this.train = opts.train;
    this.clock = opts.clock ?? wallClock;
    this.replicas = new ReplicaSync(this.transport, this.progress, (e) => this.emit(e));
  }

  /** Subscribes to events; returns the unsubscribe function. */
  on(listener: (e: IslandEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Starts from a θ kept elsewhere (a page's cache) before the first round: its sync then fetches only the
   * updates since (the snapshot only if the server no longer keeps them). False: `params` is not `hash`.
   */
  seedReplica(version: number, hash: string, params: Float32Array): boolean {
    if (hashParams(params) !== hash) return false;
    this.replicas.replica = { version, hash, params };
    this.replicas.latestKnownVersion = Math.max(this.replicas.latestKnownVersion, version);
    this.progress.version = version;
    return true;
  }

  /** The replica's version and hash (null before the first model download). */
  get replicaState(): { version: number; hash: string } | null {
    const rep = this.replicas.replica;
    return rep && { version: rep.version, hash: rep.hash };
  }

  /** A copy of the error-feedback residual e (what was meant but not yet sent; null before the first delta). */
  residual(): Float32Array | null {
    return this.feedback ? this.feedback.residual.slice() : null;
  }

  /** A copy of the replica θ (null before the first model download). */
  replicaParams(): Float32Array | null {
    const rep = this.replicas.replica;
    return rep ? rep.params.slice() : null;
  }

  /** Runs until the server says the run is done, stop() is called, or an unrecoverable error. */
  start(): Promise<IslandRunSummary> {
    this.running ??= this.loop().then(
      (reason) => this.finish(reason),
      (e: unknown) => {
        this.emit({
          type: 'error',
          error: { code: ErrorCode.TRANSPORT, message: e instanceof Error ? e.message : String(e) },
        });
        return this.finish('error');
      },
    );
    return this.running;
  }

  /** Pauses after the current step (also before the next round starts). */
  pause(): void {
    if (this.stopped || this.paused) return;
    this.paused = true;
  }

  /** Resumes: the round continues if its base version is still accepted, otherwise it is abandoned. */
  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    const w = this.resumeWaiters;
    this.resumeWaiters = [];
    for (const f of w) f();
  }

  /** Stops after the current step; start()'s promise resolves with reason 'stopped'. */
  stop(): void {
    this.stopped = true;
    this.resume();
  }

  get isPaused(): boolean {
    return this.paused;
  }

  // ── internals ────────────────────────────────

  private emit(e: IslandEvent): void {
    for (const l of this.listeners) l(e);
  }

  private setStatus(status: IslandStatusName, detail?: string): void {
    this.progress.status = status;
    this.emit({ type: 'status', status, detail });
  }

  private async finish(reason: string): Promise<IslandRunSummary> {
    this.unsubscribe?.();
    this.unsubscribe = null;
    try {
      await this.transport.close(reason);
    } catch {
      /* closing is best effort */
    }
    this.setStatus(reason === 'done' ? 'done' : reason === 'stopped' ? 'stopped' : 'error', reason);
    return {
      islandId: this.progress.islandId,
      reason,
      progress: { ...this.progress, rejected: { ...this.progress.rejected } },
    };
  }

  private waitForResume(): Promise<void> {
    if (!this.paused) return Promise.resolve();
    this.setStatus('paused');
    return new Promise((resolve) => this.resumeWaiters.push(resolve));
  }

  private fail(error: AtollError): string {
    this.emit({ type: 'error', error });
    return error.code;
  }

  private async loop(): Promise<string> {
    this.setStatus('connecting');
    this.unsubscribe = this.transport.onUpdate((msg) => this.replicas.onPushed(msg));
    const caps: IslandCaps = {
      engine: this.engine.kind,
      adapter: this.engine.device,
      numerics: this.engine.numerics ?? 'f32',
      devices: this.engine.devices ?? 1,
      ...this.opts.caps,
    };
    const hello = await this.transport.hello({
      protocolVersion: PROTOCOL_VERSION,
      caps,
      resumeIslandId: this.opts.resumeIslandId,
    });
    if (!hello.ok) return hello.error.code === ErrorCode.DONE ? 'done' : this.fail(hello.error);
    this.progress.islandId = hello.value.islandId;
    let assignment = hello.value.assignment;

    while (!this.stopped) {
      if (!assignment) {
        this.setStatus('waiting');
        const next = await this.transport.nextAssignment();
        if (!next.ok) return next.error.code === ErrorCode.DONE ? 'done' : this.fail(next.error);
        assignment = next.value;
      }
      await this.waitForResume();
      if (this.stopped) break;
      const a = assignment;
      assignment = null;
      this.emit({ type: 'assignment', assignment: a });
      this.progress.roundId = a.roundId;

      // 1. θ at (at least) the base version
      this.setStatus('syncing');
      const synced = await this.replicas.sync(a.baseVersion);
      if (!synced.ok) return this.fail(synced.error);
      const rep = this.replicas.replica!;
      if (rep.version > a.baseVersion && a.mode === 'sync') continue; // that round already closed
      const baseVersion = rep.version; // async: a newer base is strictly better

      // 2. inner steps
      const trained = await this.runInnerSteps(a, rep.params);
      if (trained === 'stopped') break;
      if (trained === 'abandoned') continue;

      // 3. Δ → frame (error feedback kept here), submit, wait for the durable ack
      this.setStatus('submitting');
      const delta = await this.engine.readDelta();
      this.feedback ??= new ErrorFeedback(delta.length);
      const enc = encodeWithFeedback(delta, this.feedback, a.codec, this.scratch);
      if (!enc.ok) {
        // this island diverged (non-finite Δ): drop the work, restart from the server's θ
        this.emit({ type: 'error', error: enc.error });
        await this.engine.resetOptimizerState();
        this.optimizerSteps = 0;
        this.replicas.replica = null;
        continue;
      }
      const frame = enc.value.frame;
      if (!this.sent || this.sent.length !== delta.length) this.sent = new Float32Array(delta.length);
      this.sent.set(enc.value.decoded);
      // seq: strictly increasing, and never below what the server still expects (a restarted island)
      this.seq = Math.max(this.seq + 1, a.minSeq ?? 0);
      const meta: DeltaMeta = {
        islandId: a.islandId,
        roundId: a.roundId,
        baseVersion,
        seq: this.seq,
        steps: trained.steps,
        tokens: trained.steps * a.batchSize * a.seqLen,
        lossFirst: trained.lossFirst,
        lossLast: trained.lossLast,
        lossMean: trained.lossMean,
        elapsedMs: trained.elapsedMs,
      };
      const ack = await this.submitWithRetry(meta, frame);
      // sparse codes: what was not applied goes back into the residual (no work dropped). Dense codes
      // drop it: their residual holds only quantization error, so the next Δ stays recomputable
      // (a rejected Δ carried over doubled the next one's norm and failed an honest audit)
      if ((!ack.ok || ack.value.status !== 'applied') && !AUDITABLE_ENCODINGS.includes(a.codec.encoding))
        this.feedback.unsend(this.sent);
      // the run ended and the delta's fate could not be learnt (a server that refuses the resume)
      if (!ack.ok) return ack.error.code === ErrorCode.DONE ? 'done' : this.fail(ack.error);
      this.progress.rounds += 1;
      this.progress.tokens += meta.tokens;
      if (ack.value.status === 'applied') this.progress.accepted += 1;
      else {
        const code = ack.value.error?.code ?? 'E_REJECTED';
        this.progress.rejected[code] = (this.progress.rejected[code] ?? 0) + 1;
      }
      this.emit({ type: 'submitted', meta, frameBytes: frame.length, frame, ack: ack.value });
    }
    return 'stopped';
  }

  /** Runs the round's inner steps. 'abandoned' when a pause outlived the round's base version. */
  private async runInnerSteps(
    a: Assignment,
    theta: Float32Array,
  ): Promise<
    | { steps: number; lossFirst: number; lossLast: number; lossMean: number; elapsedMs: number }
    | 'stopped'
    | 'abandoned'
  > {
    await this.engine.setParams(theta);
    // a fresh AdamW when the server says so (dense codes in a run that audits: a validator then
    // recomputes Δ from the job alone, core/coord/audit.ts); otherwise the state carries over, as in
    // one long training run (a reset every short round cost one island 5 % of its loss)
    if (a.freshOptimizer) {
      await this.engine.resetOptimizerState();
      this.optimizerSteps = 0;
    }
    const B = a.batchSize,
      T = a.seqLen;
    if (!this.batch || this.batch.inputs.length < B * T) this.batch = allocBatch(B, T);
    // a shard run: this round's range, fetched once (only it), each step's batch read from it in order
    const range = a.data.range;
    if (!range !== !this.opts.fetchRange) throw new Error('E_BAD_RANGE: a range needs fetchRange, a shard run a range');
    const tokens = range && this.opts.fetchRange ? await this.opts.fetchRange(range) : null;
    const lossEvery = Math.max(1, this.opts.lossEvery ?? 1);
    const duty = Math.min(1, Math.max(0.01, this.opts.dutyCycle ?? 1));
    const yieldEveryMs = this.opts.yieldEveryMs ?? 0;
    let heldSince = this.clock.now();
    let lossFirst = NaN,
      lossLast = NaN,
      lossSum = 0,
      lossCount = 0,
      elapsed = 0;
    this.progress.of = a.innerSteps;
    this.progress.step = 0;
    this.setStatus('training');
    for (let i = 0; i < a.innerSteps; i++) {
      if (this.stopped) return 'stopped';
      if (this.paused) {
        await this.waitForResume();
        if (this.stopped) return 'stopped';
        if (!this.baseStillAccepted(a)) {
          this.setStatus('syncing', `round ${a.roundId} moved on while paused: abandoning it`);
          return 'abandoned';
        }
        this.setStatus('training');
      }
      const batch = tokens
        ? rangeBatch(tokens, B, T, i, this.batch)
        : sampleBatch(this.train, B, T, a.data.seed, a.data.stream, a.data.stepStart + i, this.batch);
      const lr = innerLearningRate(a.lr, i, this.optimizerSteps);
      const t0 = this.clock.now();
      await this.engine.step(batch, { lr, gradClip: a.gradClip, weightDecay: a.lr.weightDecay });
      this.optimizerSteps += 1;
      if ((i + 1) % lossEvery === 0 || i + 1 === a.innerSteps) {
        for (const l of await this.engine.takeLosses()) {
          if (lossCount === 0) lossFirst = l;
          lossLast = l;
          lossSum += l;
          lossCount++;
        }
      }
      const dt = this.clock.now() - t0;
      elapsed += dt;
      const p = this.progress;
      p.step = i + 1;
      p.loss = lossLast;
      p.lr = lr;
      p.tokensPerSec = elapsed > 0 ? (1000 * (i + 1) * B * T) / elapsed : 0;
      this.emit({ type: 'step', step: i + 1, of: a.innerSteps, loss: lossLast, lr, tokensPerSec: p.tokensPerSec });
      if (duty < 1 && dt > 0) {
        await this.clock.sleep((dt * (1 - duty)) / duty);
        heldSince = this.clock.now();
      } else if (yieldEveryMs > 0 && this.clock.now() - heldSince >= yieldEveryMs) {
        await this.clock.sleep(0);
        heldSince = this.clock.now();
      }
    }
    return {
      steps: a.innerSteps,
      lossFirst,
      lossLast,
      lossMean: lossCount ? lossSum / lossCount : NaN,
      elapsedMs: elapsed,
    };
  }

  /** After a pause: may the round still be submitted? (sync: its round is open; async: not too stale). */
  private baseStillAccepted(a: Assignment): boolean {
    this.replicas.drain();
    const latest = Math.max(this.replicas.latestKnownVersion, this.replicas.replica?.version ?? -1);
    return a.mode === 'sync' ? latest <= a.baseVersion : latest - a.baseVersion < a.maxStaleness;
  }

  private async submitWithRetry(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    const maxRetries = this.opts.maxRetries ?? 5;
    let failures = 0;
    for (;;) {
      const r = await this.transport.submitDelta(meta, frame);
      this.progress.bytesUp += frame.length;
      if (r.ok) {
        // paused server: the delta was not counted; the same seq may be sent again
        if (r.value.status === 'rejected' && r.value.error?.code === ErrorCode.PAUSED && !this.stopped) {
          await this.clock.sleep(backoff(failures++, 1000, 30_000));
          continue;
        }
        return r;
      }
      if (r.error.code === ErrorCode.DONE || ++failures > maxRetries || this.stopped) return r;
      await this.clock.sleep(backoff(failures, 500, 30_000));
    }
  }
}
