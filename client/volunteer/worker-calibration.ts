// This device's speed for the island worker: the saved calibration when its key fits, else a few
// timed steps (and, with ?precision=auto, f16 storage timed against f32); an estimate is replaced
// by the real steps' median once a full-batch round is accepted.

import type { Assignment } from '../../core/protocol.ts';
import { calibrate, calibrationKey, fullBatch, pickNumerics } from '../island/calibrate.ts';
import type { StartOptions } from './messages.ts';
import type { ResilientEngine } from './resilient-engine.ts';
import { lastAdapter } from './worker-gpu.ts';
import { openEngine } from './worker-engine.ts';
import { log, post, state } from './worker-state.ts';
import { publish } from './worker-view.ts';
import type { TokenArray } from '../../core/data/tokenizer.ts';

/** This device's speed: the saved measurement when it fits, else a few timed steps now. */
export async function ensureCalibration(o: StartOptions, data: TokenArray): Promise<void> {
  const s = state;
  if (s.calibration || !s.engine) return;
  // the precision setting is part of the key: ?precision=f32 never reuses an f16 choice
  const key = `${calibrationKey(o.engine, s.engine.device, o.shape)}|${o.precision}`;
  if (o.calibration?.key === key) {
    s.calibration = o.calibration;
    log(
      'info',
      `Speed measured earlier on this device: ` +
        `${Math.round(s.calibration.tokensPerSec).toLocaleString('en-US')} tokens/s (a step ` +
        `${(s.calibration.stepMs / 1000).toFixed(1)} s).`,
    );
    return;
  }
  s.view.detail = 'Measuring this device’s speed on a few training steps…';
  publish(true);
  s.calibration = {
    ...(await calibrate(s.engine.current, data, o.shape, key)),
    numerics: s.engine.numerics === 'f16' ? 'f16' : 'f32',
  };
  if (o.engine === 'webgpu' && o.precision === 'auto' && s.engine.numerics !== 'f16') await tryF16(o, data, key);
  s.view.detail = '';
  if (!s.calibration) return;
  post({ type: 'calibrated', calibration: s.calibration });
  const c = s.calibration;
  const steps = c.timed.map((t) => `${t.B}: ${(t.ms / 1000).toFixed(1)} s`).join(', ');
  log(
    'info',
    `Measured ${Math.round(c.tokensPerSec).toLocaleString('en-US')} tokens/s in ${(c.ms / 1000).toFixed(1)} s (steps ` +
      `of batch ${steps}; ` +
      `a full step ${c.estimated ? 'estimated at' : 'takes'} ${(c.stepMs / 1000).toFixed(1)} s): ` +
      `the first round is sized from it.`,
  );
  publish(true);
}

/**
 * ?precision=auto on a first visit: time an f16 engine as the f32 one was and keep the faster; the
 * choice is saved with the calibration. A software adapter keeps f32 (its speed says nothing of a GPU).
 */
async function tryF16(o: StartOptions, data: TokenArray, key: string): Promise<void> {
  const s = state;
  if (!s.engine || !s.calibration) return;
  if (lastAdapter()?.isFallbackAdapter) {
    log('info', 'Numerics: f32 (a software adapter: f16 storage is not timed here).');
    return;
  }
  let f16: ResilientEngine;
  try {
    f16 = await openEngine(o.engine, o.shape, false, 'f16');
  } catch (e) {
    log('info', `Numerics: f32 (f16 storage does not run here: ${(e as Error).message}).`);
    return;
  }
  s.view.detail = 'Timing f16 storage against f32 on a few training steps…';
  publish(true);
  const c16 = await calibrate(f16.current, data, o.shape, key);
  const pick = pickNumerics(s.calibration, c16);
  log('info', pick.line);
  if (pick.numerics === 'f16') {
    s.engine.destroy();
    s.engine = f16;
    s.engine.dutyCycle = o.dutyCycle;
    s.engine.extraStepMs = s.delays.stepMs;
    s.calibration = { ...c16, numerics: 'f16', f16Speedup: pick.speedup };
    s.view.device = s.engine.device;
  } else {
    f16.destroy();
    s.calibration = { ...s.calibration, f16Speedup: pick.speedup };
  }
}

/**
 * An estimated speed is replaced by the real steps' median once a full-batch round is accepted, so
 * the cost card and a reload's first round use what this device really does.
 */
export function refineCalibration(a: Assignment): void {
  const c = state.calibration,
    med = state.engine?.medianStepMs;
  const full = state.opts && fullBatch(state.opts.shape);
  if (!c?.estimated || med == null || !full || a.batchSize !== full.B || a.seqLen !== full.T) return;
  state.calibration = {
    ...c,
    stepMs: med,
    tokensPerSec: (1000 * a.batchSize * a.seqLen) / med,
    estimated: false,
    at: Date.now(),
  };
  post({ type: 'calibrated', calibration: state.calibration });
  log(
    'info',
    `A full step takes ${(med / 1000).toFixed(1)} s here (estimated ${(c.stepMs / 1000).toFixed(1)} s): ` +
      `saved for the next visit.`,
  );
}
