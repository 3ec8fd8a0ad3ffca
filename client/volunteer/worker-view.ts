// The island worker's view of itself (IslandView): refreshed from its state and posted to the
// page at most ~8 times a second, or at once for a change the page should show now.

import { mfu } from '../../core/model/config.ts';
import type { Phase } from './messages.ts';
import { phaseOf } from './phase-text.ts';
import { post, state } from './worker-state.ts';

let viewTimer: ReturnType<typeof setTimeout> | null = null;
let lastPost = 0;
/** Posts the view at most ~8 times a second. */
export function publish(now = false): void {
  if (now || performance.now() - lastPost > 125) {
    if (viewTimer) {
      clearTimeout(viewTimer);
      viewTimer = null;
    }
    lastPost = performance.now();
    refreshView();
    post({ type: 'view', view: state.view });
    return;
  }
  viewTimer ??= setTimeout(() => {
    viewTimer = null;
    publish(true);
  }, 125);
}

function refreshView(): void {
  const s = state;
  const view = s.view;
  const engine = s.engine;
  const p = s.runtime?.progress;
  view.bytesUp = s.carried.bytesUp + (p?.bytesUp ?? 0);
  view.dataBytes = s.dataDown + (s.ranges?.bytes ?? 0);
  view.rangeCache = s.ranges?.cache ? { ...s.ranges.cache } : null;
  view.bytesDown = s.carried.bytesDown + (p?.bytesDown ?? 0) + s.extraDown + view.dataBytes;
  if (p && p.version >= 0) view.globalVersion = Math.max(view.globalVersion ?? -1, p.version);
  view.pauseReasons = [...s.pauseReasons];
  view.paused = s.pauseReasons.size > 0;
  view.dutyCycle = engine?.dutyCycle ?? s.opts?.dutyCycle ?? 1;
  view.effectiveDutyCycle = engine?.effectiveDutyCycle ?? view.dutyCycle;
  view.busy = engine?.busy ?? false;
  view.stepMs = engine?.medianStepMs ?? s.calibration?.stepMs ?? null;
  // MFU of the compute itself (rests excluded), where the engine knows its device's peak
  const peak = engine?.peakFlops;
  const a = s.assignment;
  view.mfu =
    peak && a && view.stepMs
      ? mfu(engine!.config, (1000 * a.batchSize * a.seqLen) / view.stepMs, peak, a.seqLen)
      : null;
  view.calibration = s.calibration;
  view.roundsMixed = s.mixStats.mixed;
  view.roundsDirect = s.mixStats.direct;
  view.phase = currentPhase();
  view.reconnectInSec = s.reconnectAt != null ? Math.max(0, (s.reconnectAt - performance.now()) / 1000) : null;
  if (view.round) {
    // the steps left at the usage cap in force (compute, then its rest); none while paused
    const left = view.round.total - view.round.step;
    const stepMs = engine?.lastStepMs != null && engine.busy ? engine.lastStepMs : view.stepMs;
    view.round.etaSec = stepMs != null && !view.paused ? (left * stepMs) / view.effectiveDutyCycle / 1000 : null;
  }
}

function currentPhase(): Phase {
  const s = state;
  if (s.fatal !== null) s.view.detail = s.fatal;
  return phaseOf({
    fatal: s.fatal !== null,
    recovering: s.deviceRecovering || s.backingOff,
    started: s.opts !== null,
    runtimeStatus: s.runtimeStatus,
    pausing: s.pauseReasons.size > 0,
  });
}

/** The island cannot go on: shown as the 'error' phase with this reason. */
export function stopWith(reason: string): void {
  state.fatal = reason;
  publish(true);
}
