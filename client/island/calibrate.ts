// Calibration before the first assignment: the island (the volunteer page, `atoll island`) times a
// few real training steps on its own engine, so the server can size even the first round to the
// run's target round time (DyLU reads caps.tokensPerSec from hello). A reload of the page re-uses the
// last measurement of the same device and shape.
//
// It must not cost a round's worth of time on a slow device (on a software GPU one full-batch step
// of the `small` preset is about a minute): there it times batches of 1 and 2 and scales them up.

import { sampleBatch } from '../../core/data/dataset.ts';
import type { TrainingEngine } from '../../core/engine/index.ts';
import { initParams } from '../../core/model/gpt.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import type { TokenArray } from '../../core/data/tokenizer.ts';

/** The model and batch shape an engine is built for. */
export interface ModelShape {
  config: GPTConfig;
  maxBatch: number;
  maxT?: number;
}

/** This device's measured training speed (the page saves it across reloads). */
export interface Calibration {
  /** Engine, device and shape it was measured for (calibrationKey). */
  key: string;
  /** Full-batch training speed while computing, tokens/s (the usage cap not applied). */
  tokensPerSec: number;
  /** One full-batch step, ms. */
  stepMs: number;
  /** The steps timed: batch size and time, ms. */
  timed: Array<{ B: number; ms: number }>;
  /** True when the full-batch step was estimated from batches 1 and 2 (a slow device), not timed. */
  estimated: boolean;
  /** Time the calibration took, ms; when it was measured (epoch ms). */
  ms: number;
  at: number;
  /** The engine's storage precision it was measured with (the page's choice; absent: f32). */
  numerics?: 'f32' | 'f16';
  /** With precision 'auto': f16's speed ÷ f32's, when both were timed. */
  f16Speedup?: number;
}

/** A full-batch step that would take under this is timed itself. */
const FULL_STEP_UNDER_MS = 3000;

/**
 * f32 or f16 storage from their two calibrations: f16 when it trains faster, with the line the page
 * logs (the ratio is f16's tokens/s ÷ f32's).
 */
export function pickNumerics(
  f32: Calibration,
  f16: Calibration,
): { numerics: 'f32' | 'f16'; speedup: number; line: string } {
  const speedup = f16.tokensPerSec / f32.tokensPerSec;
  const both =
    `f16 ${Math.round(f16.tokensPerSec).toLocaleString('en-US')} vs f32 ` +
    `${Math.round(f32.tokensPerSec).toLocaleString('en-US')} tokens/s`;
  return speedup > 1
    ? {
        numerics: 'f16',
        speedup,
        line: `Numerics: f16 storage, ${speedup.toFixed(2)}× faster than f32 here (${both}); master weights stay f32.`,
      }
    : { numerics: 'f32', speedup, line: `Numerics: f32; f16 storage was not faster here (${both}).` };
}

/** Which saved measurement fits this engine and shape. */
export function calibrationKey(kind: string, device: string, shape: ModelShape): string {
  const c = shape.config;
  return [
    kind,
    device,
    c.vocabSize,
    c.blockSize,
    c.nLayer,
    c.nHead,
    c.nEmbd,
    shape.maxBatch,
    shape.maxT ?? c.blockSize,
  ].join('|');
}

/** The full batch a round trains on: what the calibration measures. */
export function fullBatch(shape: ModelShape): { B: number; T: number } {
  return { B: shape.maxBatch, T: Math.min(shape.maxT ?? shape.config.blockSize, shape.config.blockSize) };
}

async function timeStep(e: TrainingEngine, train: TokenArray, B: number, T: number, i: number): Promise<number> {
  const t0 = performance.now();
  await e.step(sampleBatch(train, B, T, 7, 0, i), { lr: 0, gradClip: 1 });
  await e.takeLosses();
  return performance.now() - t0;
}

/**
 * How a full batch of B is timed, from a batch-1 and a batch-2 step (ms): 'full' (time it: it is
 * cheap) or an estimate. A step costs f + m·B (fixed work f ≥ 0: dispatches, the optimizer; m per
 * batch row), so B × batch 1 and B/2 × batch 2 are both at least the full step: the estimate is the
 * smaller (a first step slowed by warm-up or a busy moment drops out). It is high by about
 * f·(B/2 − 1): on a slow GPU bound by dispatches the first round comes out short rather than long.
 */
export function fullStepPlan(
  oneMs: number,
  twoMs: number,
  B: number,
  rows = 1,
): { kind: 'full' } | { kind: 'estimated'; stepMs: number } {
  // rows: the smallest batch timed (an island of N devices: N rows, one per device), then twice that
  const stepMs = Math.min((oneMs * B) / rows, (twoMs * B) / (2 * rows));
  return B <= 2 * rows || stepMs < FULL_STEP_UNDER_MS ? { kind: 'full' } : { kind: 'estimated', stepMs };
}

/**
 * Times real steps on `e` (its θ and optimizer state are overwritten: call before the first round).
 * A batch-1 step (it also warms up the first dispatches) and a batch-2 step (N and 2N rows on N
 * devices); then either the full
 * batch is estimated from them (a slow device) or one or two full-batch steps are timed.
 */
export async function calibrate(
  e: TrainingEngine,
  train: TokenArray,
  shape: ModelShape,
  key: string,
): Promise<Calibration> {
  const t0 = performance.now();
  const { B, T } = fullBatch(shape);
  const timed: Calibration['timed'] = [];
  const time = async (b: number) => {
    const ms = await timeStep(e, train, b, T, timed.length);
    timed.push({ B: b, ms });
    return ms;
  };
  await e.setParams(initParams(shape.config, 1));
  // a multi-device engine splits a batch's rows over its devices: each needs at least one
  const rows = Math.min(B, Math.max(1, e.devices ?? 1));
  const oneMs = await time(rows);
  const plan = fullStepPlan(oneMs, B >= 2 * rows ? await time(2 * rows) : oneMs, B, rows);
  let stepMs: number;
  if (plan.kind === 'estimated') {
    stepMs = plan.stepMs;
  } else {
    stepMs = await time(B);
    // quick: a second one, and their mean counts (a round sees both kinds of step)
    if (stepMs < FULL_STEP_UNDER_MS) stepMs = (stepMs + (await time(B))) / 2;
  }
  await e.resetOptimizerState();
  return {
    key,
    tokensPerSec: (1000 * B * T) / stepMs,
    stepMs,
    timed,
    estimated: plan.kind === 'estimated',
    ms: performance.now() - t0,
    at: Date.now(),
  };
}
