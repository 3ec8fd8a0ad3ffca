// A TrainingEngine that survives a lost GPU device without losing work.
//
// WebGPU devices can be lost at any time (GPU process crash, driver update, the
// ~10 s watchdog, the OS reclaiming memory); every buffer dies with the device. This
// wrapper keeps, on the CPU side, what it needs to rebuild the exact engine state:
//   - θ_start: the parameters of the last setParams (the last synced global model),
//   - the optimizer state as it was at that moment,
//   - the batches and step options of the round's steps since then (a few KB).
// When the device is lost, it opens a new device (new adapter too), restores θ_start
// and the optimizer state, replays the recorded steps, and retries the call that
// failed. The island runtime above never notices, so the round, its sequence number
// and its place on the server all continue.

import type { Batch, EngineOptions, OptimizerState, StepOptions, TrainingEngine } from '../../core/engine/index.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import { backoff } from '../../core/random.ts';
import { median } from '../../core/coord/aggregate.ts';

export interface EngineHandle {
  engine: TrainingEngine;
  /** Resolves when this engine's device is lost (never, for the CPU). */
  lost: Promise<{ reason: string; message: string }>;
  /** Releases the device (after engine.destroy()). */
  dispose: () => void;
  /** Test hook: lose the device as a GPU crash would. */
  simulateLoss: () => void;
  /** The WebGPU device (null for the CPU), for other engines that may share it. */
  gpuDevice: GPUDevice | null;
}

export interface ResilientEngineOptions {
  /** Opens a fresh device and engine. */
  open: () => Promise<EngineHandle>;
  /** Called when a loss is detected, and when recovery finished or failed. */
  onLoss?: (info: { reason: string; message: string }) => void;
  onRecovered?: (info: { device: string; replayedSteps: number; ms: number }) => void;
  /** Give up after this many losses in a row without a completed step in between. Default 3. */
  maxConsecutiveLosses?: number;
  /** The busy-GPU back-off engaged (steps much slower than usual) or released. */
  onBusy?: (info: BusyInfo) => void;
}

export interface BusyInfo {
  busy: boolean;
  /** Compute time of the last step and the island's recent median, ms. */
  stepMs: number;
  medianMs: number;
  /** The usage cap in force now (lowered while busy). */
  dutyCycle: number;
}

/** The busy-GPU back-off. */
const BUSY = {
  /** A step this many times the recent median is slow; under `recover` × the median it is normal again. */
  factor: 3,
  recover: 2,
  /** …and this many ms over it: a CPU step of a few ms jitters by 3× with no one else on the cores. */
  minExtraMs: 50,
  /** Slow (or recovered) steps in a row before the back-off engages (or releases). */
  run: 2,
  /** While backing off, the cap is divided by this (floor 5 %). */
  divisor: 4,
  /** Normal steps kept for the median, and how many it needs before judging. */
  window: 15,
  minSteps: 4,
} as const;

interface RecordedStep {
  inputs: Uint8Array;
  targets: Uint8Array;
  B: number;
  T: number;
  opts: StepOptions;
}

class DeviceLostError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DeviceLostError';
  }
}

export class ResilientEngine implements TrainingEngine {
  readonly kind: TrainingEngine['kind'];
  readonly config: GPTConfig;
  private handle: EngineHandle;
  private generation = 0;
  private lostGeneration = -1;
  private lostInfo: { reason: string; message: string } | null = null;
  private recovering: Promise<void> | null = null;
  private start: Float32Array | null = null;
  private startOpt: OptimizerState | null = null;
  private steps: RecordedStep[] = [];
  /** Losses of recorded steps already handed out by takeLosses(). */
  private lossesTaken = 0;
  private consecutiveLosses = 0;
  private readonly opts: ResilientEngineOptions;
  /** Device losses survived. */
  losses = 0;

  private constructor(handle: EngineHandle, opts: ResilientEngineOptions) {
    this.handle = handle;
    this.opts = opts;
    this.kind = handle.engine.kind;
    this.config = handle.engine.config;
    this.watch();
  }

  static async create(opts: ResilientEngineOptions): Promise<ResilientEngine> {
    return new ResilientEngine(await opts.open(), opts);
  }

  get device(): string {
    return this.handle.engine.device;
  }
  get numerics(): TrainingEngine['numerics'] {
    return this.handle.engine.numerics;
  }
  get gpuBytes(): number {
    return this.handle.engine.gpuBytes;
  }
  get peakFlops(): number | undefined {
    return this.handle.engine.peakFlops;
  }
  /** The engine currently in use (changes after a recovery). */
  get current(): TrainingEngine {
    return this.handle.engine;
  }
  /** The current WebGPU device (changes after a recovery; null for the CPU). */
  get gpuDevice(): GPUDevice | null {
    return this.handle.gpuDevice;
  }

  /** Test hook: loses the current device as a GPU crash would; recovery starts at once. */
  simulateLoss(): void {
    this.handle.simulateLoss();
  }

  private watch(): void {
    const gen = this.generation;
    void this.handle.lost.then((info) => {
      if (gen !== this.generation) return; // a device we replaced or destroyed ourselves
      this.lostGeneration = gen;
      this.lostInfo = info;
      this.opts.onLoss?.(info);
      // rebuild at once (the island may be idle, waiting for its next round); a failure here is
      // retried by the next call, which then reports it
      void this.recover().catch(() => {});
    });
  }

  /** Runs `fn` on the current engine; after a device loss, rebuilds the state and retries. */
  private async call<T>(fn: (e: TrainingEngine) => Promise<T>): Promise<T> {
    for (;;) {
      if (this.recovering) await this.recovering.catch(() => {});
      if (this.lostGeneration === this.generation) await this.recover();
      const gen = this.generation;
      const lost = this.handle.lost.then(() => {
        throw new DeviceLostError('device lost during the call');
      });
      try {
        return await Promise.race([fn(this.handle.engine), lost]);
      } catch (e) {
        // a call may fail before `lost` resolves: give the loss a moment to be reported
        if (this.lostGeneration !== gen) await Promise.race([this.handle.lost, new Promise((r) => setTimeout(r, 250))]);
        if (this.lostGeneration !== gen && !(e instanceof DeviceLostError)) throw e;
        this.lostGeneration = gen; // a DeviceLostError implies it
      }
    }
  }

  /** Opens a new device and brings it to the state the lost one had. */
  private recover(): Promise<void> {
    this.recovering ??= (async () => {
      const t0 = performance.now();
      this.consecutiveLosses += 1;
      this.losses += 1;
      if (this.consecutiveLosses > (this.opts.maxConsecutiveLosses ?? 3)) {
        throw new Error(
          `E_DEVICE_LOST: the GPU device was lost ${this.consecutiveLosses} times in a row ` +
            `(${this.lostInfo?.message ?? ''})`,
        );
      }
      try {
        this.handle.engine.destroy();
        this.handle.dispose();
      } catch {
        /* already dead */
      }
      // right after a GPU process crash the browser may need a moment to offer an adapter again
      let handle: EngineHandle | null = null;
      for (let attempt = 0; !handle; attempt++) {
        try {
          handle = await this.opts.open();
        } catch (e) {
          if (attempt >= 2) throw e;
          await new Promise((r) => setTimeout(r, backoff(attempt, 1000, 4000)));
        }
      }
      this.generation += 1;
      this.handle = handle;
      this.watch();
      const e = handle.engine;
      if (this.start) {
        await e.setParams(this.start);
        if (this.startOpt) await e.setOptimizerState(this.startOpt);
        for (const s of this.steps) await e.step({ inputs: s.inputs, targets: s.targets, B: s.B, T: s.T }, s.opts);
        // the replayed steps' losses: drop those the runtime already has
        const l = await e.takeLosses();
        this.pendingLosses = l.slice(this.lossesTaken);
      }
      this.opts.onRecovered?.({ device: e.device, replayedSteps: this.steps.length, ms: performance.now() - t0 });
    })().finally(() => {
      this.recovering = null;
    });
    return this.recovering;
  }

  private pendingLosses: number[] = [];

  async setParams(params: Float32Array): Promise<void> {
    await this.call((e) => e.setParams(params));
    this.start = params.slice();
    this.startOpt = this.kind === 'cpu' ? null : await this.call((e) => e.getOptimizerState());
    this.steps = [];
    this.lossesTaken = 0;
    this.pendingLosses = [];
  }

  getParams(): Promise<Float32Array> {
    return this.call((e) => e.getParams());
  }
  readDelta(): Promise<Float32Array> {
    return this.call((e) => e.readDelta());
  }
  getOptimizerState(): Promise<OptimizerState> {
    return this.call((e) => e.getOptimizerState());
  }

  async setOptimizerState(state: OptimizerState): Promise<void> {
    await this.call((e) => e.setOptimizerState(state));
    if (this.startOpt) this.startOpt = { m: state.m.slice(), v: state.v.slice(), step: state.step };
  }

  async resetOptimizerState(): Promise<void> {
    await this.call((e) => e.resetOptimizerState());
    if (this.startOpt) {
      this.startOpt.m.fill(0);
      this.startOpt.v.fill(0);
      this.startOpt.step = 0;
    }
  }

  private holds = 0;
  private holdWaiters: Array<() => void> = [];
  /** Steps queued whose losses are not read yet (training is "between steps" when false). */
  private working = false;
  private stepsWaiting = 0;
  private idleWaiters: Array<() => void> = [];

  /** Holds training steps back (they wait before queueing) until the returned release is called. */
  hold(): () => void {
    this.holds += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (--this.holds === 0) wake(this.holdWaiters);
    };
  }

  /**
   * A slot for other GPU work (a sample) between training steps: waits until no step runs or
   * waits (training takes precedence), then holds steps back until release. `budgetMs` is how
   * long the slot may last: under a third of a usual step, so a waiting step is never stretched 2×.
   */
  async between(): Promise<{ release: () => void; budgetMs: number }> {
    while (this.working || this.stepsWaiting > 0) await new Promise<void>((r) => this.idleWaiters.push(r));
    const med = this.medianStepMs;
    return { release: this.hold(), budgetMs: med != null ? Math.max(20, 0.3 * med) : 1000 };
  }

  /** A step is waiting for a slot to end. */
  get stepWaiting(): boolean {
    return this.stepsWaiting > 0;
  }

  /**
   * GPU usage cap: the fraction of wall time spent computing, (0, 1]. After each step's losses
   * are read, the engine rests work·(1−u)/u, where work is the time the step took. Read at
   * every step, so a change applies at once. The rest counts in the runtime's round time, so the
   * server sizes rounds by the island's real pace.
   */
  dutyCycle = 1;
  /** Test hook: extra compute time per step, as a GPU shared with a game or a video would add. */
  extraStepMs = 0;
  private workMs = 0;
  private workSteps = 0;
  private wakeRest: (() => void) | null = null;

  // busy-GPU back-off: per-step compute times of normal steps, and the runs of slow / recovered ones
  private normalMs: number[] = [];
  private slowRun = 0;
  private okRun = 0;
  /** Backing off: steps take much longer than this island's recent median (the GPU is busy elsewhere). */
  busy = false;
  /** Compute time of the last step (losses read), ms. */
  lastStepMs: number | null = null;

  /** Median compute time of the recent normal steps, ms (null before any). */
  get medianStepMs(): number | null {
    return this.normalMs.length === 0 ? null : median(this.normalMs);
  }

  /** The usage cap in force: the chosen one, lowered while the GPU is busy. */
  get effectiveDutyCycle(): number {
    const u = Math.min(1, Math.max(0.05, this.dutyCycle));
    return this.busy ? Math.max(0.05, u / BUSY.divisor) : u;
  }

  /** Ends a rest early (pause: the runtime then stops before the next step). */
  interruptRest(): void {
    this.wakeRest?.();
  }

  /** Judges the last step's compute time against the recent median; engages or releases the back-off. */
  private observe(stepMs: number): void {
    this.lastStepMs = stepMs;
    const med = this.medianStepMs;
    const judged = med != null && this.normalMs.length >= BUSY.minSteps;
    const slow = judged && stepMs > BUSY.factor * med && stepMs > med + BUSY.minExtraMs;
    const normal = !judged || stepMs < BUSY.recover * med || stepMs < med + BUSY.minExtraMs;
    this.slowRun = slow ? this.slowRun + 1 : 0;
    this.okRun = normal ? this.okRun + 1 : 0;
    if (!this.busy && this.slowRun >= BUSY.run) this.setBusy(true, stepMs, med!);
    else if (this.busy && this.okRun >= BUSY.run) this.setBusy(false, stepMs, med!);
    if (!this.busy && normal) {
      this.normalMs.push(stepMs);
      if (this.normalMs.length > BUSY.window) this.normalMs.shift();
    }
  }

  private setBusy(busy: boolean, stepMs: number, medianMs: number): void {
    this.busy = busy;
    this.okRun = 0;
    this.slowRun = 0;
    this.opts.onBusy?.({ busy, stepMs, medianMs, dutyCycle: this.effectiveDutyCycle });
  }

  private async rest(): Promise<void> {
    const u = this.effectiveDutyCycle;
    const ms = Math.min(60_000, (this.workMs * (1 - u)) / u);
    this.workMs = 0;
    if (ms < 1) return;
    await new Promise<void>((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.wakeRest = done;
    });
    this.wakeRest = null;
  }

  async step(batch: Batch, opts: StepOptions): Promise<void> {
    this.stepsWaiting += 1;
    while (this.holds > 0) await new Promise<void>((r) => this.holdWaiters.push(r));
    this.stepsWaiting -= 1;
    this.working = true;
    const t0 = performance.now();
    const rec: RecordedStep = {
      inputs: Uint8Array.from(batch.inputs.subarray(0, batch.B * batch.T)),
      targets: Uint8Array.from(batch.targets.subarray(0, batch.B * batch.T)),
      B: batch.B,
      T: batch.T,
      opts: { ...opts },
    };
    // a recovery inside this call replays the recorded steps, then this one is retried
    await this.call((e) => e.step(batch, opts));
    if (this.extraStepMs > 0) await new Promise((r) => setTimeout(r, this.extraStepMs));
    if (this.kind !== 'cpu') this.steps.push(rec);
    this.consecutiveLosses = 0;
    this.workMs += performance.now() - t0;
    this.workSteps += 1;
  }

  async takeLosses(): Promise<number[]> {
    const t0 = performance.now();
    const fresh = await this.call((e) => e.takeLosses());
    const out = this.pendingLosses.concat(fresh);
    this.pendingLosses = [];
    this.lossesTaken += out.length;
    this.working = false;
    wake(this.idleWaiters);
    if (this.workSteps > 0) {
      this.workMs += performance.now() - t0;
      this.observe(this.workMs / this.workSteps);
      this.workSteps = 0;
      await this.rest();
    }
    return out;
  }

  evalLoss(batch: Batch): Promise<number> {
    return this.call((e) => e.evalLoss(batch));
  }
  nextTokenLogits(context: Uint8Array): Promise<Float32Array> {
    return this.call((e) => e.nextTokenLogits(context));
  }

  destroy(): void {
    this.generation += 1; // a loss caused by this destroy is expected
    this.handle.engine.destroy();
    this.handle.dispose();
  }
}

function wake(waiters: Array<() => void>): void {
  for (const f of waiters.splice(0)) f();
}

export type { EngineOptions };
