// The island runtime's events, as the volunteer sees them: each updates the worker's view and
// log, and posts to the page what it charts (assignments, losses).

import type { IslandEvent } from '../island/index.ts';
import { ErrorCode } from '../../core/protocol.ts';
import type { LossPoint } from './messages.ts';
import { refineCalibration } from './worker-calibration.ts';
import { log, post, state } from './worker-state.ts';
import { publish } from './worker-view.ts';

const capitalize = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

/** One runtime event; `healthy` is called when the island got an assignment (the backoff resets). */
export function onEvent(e: IslandEvent, healthy: () => void): void {
  const s = state;
  const view = s.view;
  switch (e.type) {
    case 'status': {
      s.runtimeStatus = e.status;
      if (e.status !== 'connecting' && e.status !== 'error' && e.status !== 'stopped') {
        view.connection = s.link?.connected() === false ? 'reconnecting' : 'connected';
      }
      if (e.detail && e.status === 'syncing') log('info', capitalize(e.detail) + '.');
      if (e.status === 'paused')
        log('info', 'Paused. The round continues on resume if the server still accepts its base model.');
      publish(true);
      break;
    }
    case 'assignment': {
      healthy();
      const a = e.assignment;
      s.assignment = a;
      if (a.data.range) view.rangeBytesAssigned += 2 * a.data.range.length;
      // losses are read back every few steps on a fast GPU (a readback drains the queue), about
      // every 250 ms; every step on a slow one. The first round reads every step.
      const p = s.runtime?.progress;
      const stepMs = p && p.tokensPerSec > 0 ? (1000 * a.batchSize * a.seqLen) / p.tokensPerSec : Infinity;
      s.roundLossEvery = Math.max(1, Math.min(32, Math.ceil(250 / stepMs)));
      if (s.runtimeOpts) s.runtimeOpts.lossEvery = s.roundLossEvery;
      view.islandId = a.islandId;
      view.round = { baseVersion: a.baseVersion, step: 0, total: a.innerSteps, etaSec: null };
      post({ type: 'assignment', assignment: a });
      log(
        'info',
        `Round ${a.roundId}: ${a.innerSteps} steps of ${a.batchSize}×${a.seqLen} tokens from model v${a.baseVersion}.`,
      );
      publish(true);
      break;
    }
    case 'step': {
      s.globalStep += 1;
      if (view.round) view.round.step = e.step;
      view.lastLoss = e.loss;
      view.tokensPerSec = e.tokensPerSec;
      const a = s.assignment;
      if (a) view.tokensTrained += a.batchSize * a.seqLen;
      view.stepsDone = s.globalStep;
      if (e.step % s.roundLossEvery === 0 || e.step === e.of) {
        const point: LossPoint = {
          step: s.globalStep,
          roundId: a?.roundId ?? -1,
          roundStep: e.step,
          version: a?.baseVersion ?? -1,
          loss: e.loss,
          at: Date.now(),
        };
        post({ type: 'losses', points: [point] });
      }
      publish();
      break;
    }
    case 'submitted': {
      const { ack, meta, frameBytes } = e;
      if (ack.status === 'applied') {
        view.roundsAccepted += 1;
        view.tokensContributed += meta.tokens;
        if (s.assignment) refineCalibration(s.assignment);
        log(
          'info',
          `Update accepted into model v${ack.version}: ${meta.tokens.toLocaleString('en-US')} tokens, ` +
            `${frameBytes.toLocaleString('en-US')} bytes, mean loss ${meta.lossMean.toFixed(3)}.`,
        );
      } else {
        view.roundsRejected += 1;
        const code = ack.error?.code ?? 'E_REJECTED';
        const message = ack.error?.message ?? 'no reason given';
        view.lastRejection = { code, message, at: Date.now() };
        log('warn', `Update rejected (${code}): ${message}. Going on with the next round.`);
      }
      publish(true);
      break;
    }
    case 'synced': {
      if (e.via === 'update') view.hashChecks += 1; // the runtime applied it and θ's hash agreed
      view.globalVersion = Math.max(view.globalVersion ?? -1, e.version);
      if (e.via === 'snapshot') log('info', `Downloaded the global model v${e.version}.`);
      publish();
      break;
    }
    case 'error': {
      s.lastError = `${e.error.code}: ${e.error.message}`;
      if (e.error.code === ErrorCode.HASH_MISMATCH) view.hashMismatches += 1;
      log(e.error.code === 'E_DONE' ? 'info' : 'warn', s.lastError);
      if (e.error.code === 'E_TRANSPORT') view.connection = 'reconnecting';
      publish(true);
      break;
    }
  }
}
