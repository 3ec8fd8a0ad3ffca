// A TrainingEngine wrapper that charges virtual time for each step (speed model of one island),
// counts the tokens it computes, and lets the simulator crash the island at a chosen time.

import type { Batch, OptimizerState, StepOptions, TrainingEngine } from '../../core/engine.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import type { EngineKind } from '../../core/protocol.ts';
import type { Clock } from '../../client/island/transport.ts';

export class SimEngine implements TrainingEngine {
  readonly kind: EngineKind;
  readonly config: GPTConfig;
  readonly device: string;
  /** Tokens this island computed (every step, whether its delta ever counted or not). */
  tokensComputed = 0;
  /** Called after each step with the virtual time; the simulator uses it to inject crashes. */
  afterStep: (() => void) | null = null;

  constructor(
    readonly inner: TrainingEngine,
    private readonly clock: Clock,
    /** Virtual training throughput of this island, tokens/s. */
    readonly tokensPerSec: number,
  ) {
    this.kind = inner.kind;
    this.config = inner.config;
    this.device = `sim(${inner.device}, ${Math.round(tokensPerSec)} tok/s)`;
  }

  get gpuBytes(): number { return this.inner.gpuBytes; }
  setParams(p: Float32Array): Promise<void> { return this.inner.setParams(p); }
  getParams(): Promise<Float32Array> { return this.inner.getParams(); }
  readDelta(): Promise<Float32Array> { return this.inner.readDelta(); }
  getOptimizerState(): Promise<OptimizerState> { return this.inner.getOptimizerState(); }
  setOptimizerState(s: OptimizerState): Promise<void> { return this.inner.setOptimizerState(s); }
  resetOptimizerState(): Promise<void> { return this.inner.resetOptimizerState(); }
  takeLosses(): Promise<number[]> { return this.inner.takeLosses(); }
  evalLoss(b: Batch): Promise<number> { return this.inner.evalLoss(b); }
  nextTokenLogits(c: Uint8Array): Promise<Float32Array> { return this.inner.nextTokenLogits(c); }
  destroy(): void { this.inner.destroy(); }

  async step(batch: Batch, opts: StepOptions): Promise<void> {
    await this.inner.step(batch, opts);
    const tokens = batch.B * batch.T;
    this.tokensComputed += tokens;
    await this.clock.sleep((1000 * tokens) / this.tokensPerSec);
    this.afterStep?.();
  }
}
