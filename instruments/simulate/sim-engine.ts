// A TrainingEngine wrapper that charges virtual time for each step (speed model of one island),
// counts the tokens it computes, and lets the simulator crash the island at a chosen time. With
// numerics 'f16' or 'bf16' the island keeps its weights in that format: they are rounded after every
// step (activations stay f32), and Δ is taken against the f32 θ it was given.

import type { Batch, OptimizerState, StepOptions, TrainingEngine } from '../../core/engine/index.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import type { EngineKind, Numerics } from '../../core/protocol.ts';
import type { Clock } from '../../client/island/transport.ts';
import { f16ToF32, f32ToF16 } from '../../core/codec/index.ts';

export type { Numerics };

const bits = new Uint32Array(1),
  asFloat = new Float32Array(bits.buffer);
/** Rounds to bfloat16 (nearest even) and back. */
function bf16(x: number): number {
  asFloat[0] = x;
  const b = bits[0];
  bits[0] = ((b + 0x7fff + ((b >>> 16) & 1)) & 0xffff0000) >>> 0;
  return asFloat[0];
}

function roundTo(p: Float32Array, numerics: Numerics): void {
  if (numerics === 'f16') for (let i = 0; i < p.length; i++) p[i] = f16ToF32(f32ToF16(p[i]));
  else if (numerics === 'bf16') for (let i = 0; i < p.length; i++) p[i] = bf16(p[i]);
}

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
    /** The simulator's weight rounding (after each step); f32: none. */
    readonly weights: Numerics = 'f32',
    /** Devices behind the island (reported in its hello). */
    readonly devices = 1,
  ) {
    this.kind = inner.kind;
    this.config = inner.config;
    this.device = `sim(${inner.device}, ${Math.round(tokensPerSec)} tok/s)`;
  }

  get gpuBytes(): number {
    return this.inner.gpuBytes;
  }
  /** What the hello reports: the weight rounding where there is one, else the engine's storage precision. */
  get numerics(): Numerics {
    return this.weights !== 'f32' ? this.weights : (this.inner.numerics ?? 'f32');
  }
  private start: Float32Array | null = null;

  async setParams(p: Float32Array): Promise<void> {
    if (this.weights === 'f32') return this.inner.setParams(p);
    this.start = p.slice();
    const r = p.slice();
    roundTo(r, this.weights);
    await this.inner.setParams(r);
  }
  getParams(): Promise<Float32Array> {
    return this.inner.getParams();
  }
  async readDelta(): Promise<Float32Array> {
    if (this.weights === 'f32' || !this.start) return this.inner.readDelta();
    const d = await this.inner.getParams();
    for (let i = 0; i < d.length; i++) d[i] = this.start[i] - d[i];
    return d;
  }
  getOptimizerState(): Promise<OptimizerState> {
    return this.inner.getOptimizerState();
  }
  setOptimizerState(s: OptimizerState): Promise<void> {
    return this.inner.setOptimizerState(s);
  }
  resetOptimizerState(): Promise<void> {
    return this.inner.resetOptimizerState();
  }
  takeLosses(): Promise<number[]> {
    return this.inner.takeLosses();
  }
  evalLoss(b: Batch): Promise<number> {
    return this.inner.evalLoss(b);
  }
  nextTokenLogits(c: Uint8Array): Promise<Float32Array> {
    return this.inner.nextTokenLogits(c);
  }
  destroy(): void {
    this.inner.destroy();
  }

  async step(batch: Batch, opts: StepOptions): Promise<void> {
    await this.inner.step(batch, opts);
    if (this.weights !== 'f32') {
      const p = await this.inner.getParams();
      roundTo(p, this.weights);
      await this.inner.setParams(p);
    }
    const tokens = batch.B * batch.T;
    this.tokensComputed += tokens;
    await this.clock.sleep((1000 * tokens) / this.tokensPerSec);
    this.afterStep?.();
  }
}
