// An island of several WebGPU devices in one process (`atoll island --devices N`): data-parallel
// inner steps, one Δ. Each device holds the whole model (θ, AdamW state) and runs forward and
// backward on its share of the batch's rows; the gradients are all-reduced every step (a
// row-weighted mean, so the step equals one device at the whole batch up to summation order);
// then every device clips and applies the same AdamW step to the same gradients, so θ stays the
// same on all of them and device 0 alone answers getParams and readDelta.
//
// WebGPU has no copy between devices: the all-reduce goes through host memory, one readback and
// one upload of the gradients per device per step (the one readback inside a training step this
// engine has; a single-device step has none). The devices run their halves concurrently.
// No node: imports.

import type { Batch, OptimizerState, StepOptions, TrainingEngine } from '../../../core/engine/index.ts';
import type { GPTConfig } from '../../../core/model/config.ts';
import type { Tokens } from '../../../core/model/ops.ts';
import type { Numerics } from '../../../core/protocol.ts';
import { engineError } from './webgpu-plan.ts';
import type { WebGpuEngine } from './webgpu.ts';

/** Rows of a batch of B per device: as even as it goes, the first devices one more. */
export function splitRows(B: number, devices: number): number[] {
  const base = Math.floor(B / devices),
    extra = B % devices;
  return Array.from({ length: devices }, (_, i) => base + (i < extra ? 1 : 0));
}

export class MultiDeviceEngine implements TrainingEngine {
  readonly kind = 'webgpu' as const;
  readonly config: GPTConfig;
  readonly device: string;
  readonly devices: number;
  readonly numerics: Numerics;
  /** The all-reduced gradients (allocated once). */
  private readonly sum: Float32Array;
  /** Per step not yet taken: each device's share of the batch's rows (weights its loss). */
  private shares: number[][] = [];

  constructor(private readonly engines: WebGpuEngine[]) {
    if (engines.length < 1) throw engineError('E_BAD_CONFIG', 'a multi-device island needs at least one device');
    const e0 = engines[0];
    this.config = e0.config;
    this.devices = engines.length;
    this.numerics = e0.numerics;
    this.device = engines.length === 1 ? e0.device : `${engines.length} × ${e0.device}`;
    this.sum = new Float32Array(e0.paramCount);
  }

  get gpuBytes(): number {
    return this.engines.reduce((s, e) => s + e.gpuBytes, 0);
  }

  /** One data-parallel step: the batch's rows split over the devices, gradients all-reduced. */
  async step(batch: Batch, opts: StepOptions): Promise<void> {
    const { B, T } = batch;
    if (B < this.devices) throw engineError('E_BAD_BATCH', `a batch of ${B} rows cannot feed ${this.devices} devices`);
    const rows = splitRows(B, this.devices);
    let r0 = 0;
    for (let i = 0; i < this.devices; i++) {
      const sl = (x: Batch['inputs']) => x.subarray(r0 * T, (r0 + rows[i]) * T);
      this.engines[i].gradientsStep({ inputs: sl(batch.inputs), targets: sl(batch.targets), B: rows[i], T }, opts);
      r0 += rows[i];
    }
    // all-reduce: Σ_i (B_i / B)·g_i, each device's mean gradient weighted by its rows
    this.sum.fill(0);
    for (let i = 0; i < this.devices; i++) await this.engines[i].addGradientsInto(this.sum, rows[i] / B);
    for (const e of this.engines) e.applyGradients(this.sum);
    this.shares.push(rows.map((n) => n / B));
  }

  /** Each step's loss over the whole batch: the devices' losses weighted by their rows. */
  async takeLosses(): Promise<number[]> {
    const per = await Promise.all(this.engines.map((e) => e.takeLosses()));
    const shares = this.shares;
    this.shares = [];
    return shares.map((w, s) => w.reduce((acc, wi, i) => acc + wi * per[i][s], 0));
  }

  async setParams(p: Float32Array): Promise<void> {
    await Promise.all(this.engines.map((e) => e.setParams(p)));
  }

  getParams(): Promise<Float32Array> {
    return this.engines[0].getParams();
  }
  readDelta(): Promise<Float32Array> {
    return this.engines[0].readDelta();
  }
  getOptimizerState(): Promise<OptimizerState> {
    return this.engines[0].getOptimizerState();
  }

  async setOptimizerState(s: OptimizerState): Promise<void> {
    await Promise.all(this.engines.map((e) => e.setOptimizerState(s)));
  }

  async resetOptimizerState(): Promise<void> {
    await Promise.all(this.engines.map((e) => e.resetOptimizerState()));
  }

  evalLoss(batch: Batch): Promise<number> {
    return this.engines[0].evalLoss(batch);
  }
  nextTokenLogits(context: Tokens): Promise<Float32Array> {
    return this.engines[0].nextTokenLogits(context);
  }

  destroy(): void {
    for (const e of this.engines) e.destroy();
  }
}
