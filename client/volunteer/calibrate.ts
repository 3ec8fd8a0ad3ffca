// Calibration before the first assignment: the island times a few real training steps on its own
// engine, so the server can size even the first round to the run's target round time (DyLU reads
// caps.tokensPerSec from hello). A reload re-uses the last measurement of the same device and shape.

import { sampleBatch } from '../../core/data/dataset.ts';
import type { TrainingEngine } from '../../core/engine.ts';
import { initParams } from '../../core/model/gpt.ts';
import type { Calibration, ModelShape } from './messages.ts';

/** A full-batch step shorter than this is timed twice (their mean counts: a round sees both kinds). */
const SECOND_STEP_UNDER_MS = 3000;

/** Which saved measurement fits this engine and shape. */
export function calibrationKey(kind: string, device: string, shape: ModelShape): string {
  const c = shape.config;
  return [kind, device, c.vocabSize, c.blockSize, c.nLayer, c.nHead, c.nEmbd, shape.maxBatch, shape.maxT ?? c.blockSize].join('|');
}

async function timeStep(e: TrainingEngine, train: Uint8Array, B: number, T: number, i: number): Promise<number> {
  const t0 = performance.now();
  await e.step(sampleBatch(train, B, T, 7, 0, i), { lr: 0, gradClip: 1 });
  await e.takeLosses();
  return performance.now() - t0;
}

/**
 * Times real steps on `e` (its θ and optimizer state are overwritten: call before the first round).
 * A batch-1 warm-up step first (first dispatches upload and settle), then a full-batch step, and a
 * second one when that was quick. A smaller batch cannot stand in: a GPU bound by dispatches, not
 * arithmetic, takes about as long for batch 1 as for batch 8.
 */
export async function calibrate(e: TrainingEngine, train: Uint8Array, shape: ModelShape, key: string): Promise<Calibration> {
  const t0 = performance.now();
  const B = shape.maxBatch;
  const T = Math.min(shape.maxT ?? shape.config.blockSize, shape.config.blockSize);
  await e.setParams(initParams(shape.config, 1));
  await timeStep(e, train, 1, T, 0);
  let stepMs = await timeStep(e, train, B, T, 1);
  let steps = 2;
  if (stepMs < SECOND_STEP_UNDER_MS) {
    stepMs = (stepMs + (await timeStep(e, train, B, T, 2))) / 2;
    steps += 1;
  }
  await e.resetOptimizerState();
  return { key, tokensPerSec: (1000 * B * T) / stepMs, stepMs, steps, ms: performance.now() - t0, at: Date.now() };
}
