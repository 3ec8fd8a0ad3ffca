// The island worker's engines: opened through worker-gpu.ts and wrapped in a ResilientEngine
// whose busy-GPU back-off, device loss and recovery are logged and shown in the view.

import { formatStepTime } from '../ui/format.ts';
import { WebGpuEngine } from '../island/engine/webgpu.ts';
import type { EngineKind, ModelShape } from './messages.ts';
import { ResilientEngine, type EngineHandle } from './resilient-engine.ts';
import { autotuneLine, openEngineHandle } from './worker-gpu.ts';
import { log, state } from './worker-state.ts';
import { publish } from './worker-view.ts';

/** An engine of `kind`; `onLog` false for a quiet one (the sampler's, a timed f16 candidate). */
export async function openEngine(
  kind: EngineKind,
  shape: ModelShape,
  onLog = true,
  precision: 'f32' | 'f16' = 'f32',
): Promise<ResilientEngine> {
  const open = async (): Promise<EngineHandle> => {
    const h = await openEngineHandle(kind, shape, state.opts?.autotune !== false, precision);
    if (onLog && h.engine instanceof WebGpuEngine) log('info', autotuneLine(h.engine.tuning));
    return h;
  };
  return ResilientEngine.create({
    open,
    onBusy: (b) => {
      if (!onLog) return;
      const pct = (u: number) => `${Math.round(u * 100)}%`;
      if (b.busy)
        log(
          'warn',
          `The ${kind === 'cpu' ? 'CPU' : 'GPU'} seems busy with something else (a step took ` +
            `${formatStepTime(b.stepMs)}, usually ${formatStepTime(b.medianMs)}): backing off to ` +
            `${pct(b.dutyCycle)} until steps are quick again.`,
        );
      else
        log('info', `Steps are quick again (${formatStepTime(b.stepMs)}): back to the ${pct(b.dutyCycle)} usage cap.`);
      publish(true);
    },
    onLoss: (i) => {
      if (!onLog) return; // the sampler's own device: rebuilt quietly on the next sample
      log(
        'warn',
        `The GPU device was lost (${i.reason}${i.message ? `: ${i.message}` : ''}); opening a new one and resuming ` +
          `from the last synced model.`,
      );
      state.deviceRecovering = true;
      state.view.detail = 'The GPU device was lost; rebuilding it and replaying this round’s steps.';
      publish(true);
    },
    onRecovered: (r) => {
      if (!onLog) return;
      log(
        'info',
        `GPU device rebuilt (${r.device}); replayed ${r.replayedSteps} step(s) of the round in ` +
          `${Math.round(r.ms)} ms. Nothing was lost.`,
      );
      state.deviceRecovering = false;
      state.view.detail = '';
      state.view.device = r.device;
      publish(true);
    },
  });
}
