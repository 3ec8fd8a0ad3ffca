// The volunteer page's live view, from the worker's IslandView: the round stepper, the connection and phase lines,
// the device, the round's progress, the run's and this contributor's figures, the loss chart and the activity log.

import { LiveChart } from '../ui/chart.ts';
import {
  formatBytes,
  formatCount,
  formatDuration,
  formatStepTime,
  formatFixed,
  formatInt,
  formatPercent,
  formatRate,
} from '../ui/format.ts';
import type { ContributorCredit } from '../../core/api.ts';
import { measuredPerHour } from './costs.ts';
import { setText, ui } from './dom.ts';
import type { IslandView, LogLevel, LossPoint, Phase } from './messages.ts';
import { connLine, phaseLine, roundStepper } from './phase-text.ts';
import type { GlobalStatus } from './run-info.ts';

/** Every phase the page has shown, in order (repeats collapsed); read by the tests. */
export const phasesSeen: Phase[] = [];
export const losses: LossPoint[] = [];
export const logLines: Array<{ level: LogLevel; text: string; at: number }> = [];
let chart: LiveChart | null = null;

let roundPhase: Phase | null = null;

function renderPhases(v: IslandView): void {
  const stepper = roundStepper(v, roundPhase);
  roundPhase = stepper.roundPhase;
  ui.phases.forEach((li, i) => {
    li.dataset.state = stepper.states[i];
  });
  const r = v.round;
  setText(ui.phTraining, r ? `step ${formatInt(r.step)} of ${formatInt(r.total)}` : 'step – of –');
  setText(ui.phUploading, v.bytesUp > 0 ? `${formatBytes(v.bytesUp)} sent so far` : 'compressed Δ');
  if (phasesSeen[phasesSeen.length - 1] !== v.phase) phasesSeen.push(v.phase);
}

/** What the live view shows beside the island's own view. */
export interface ViewContext {
  started: boolean;
  status: GlobalStatus | null;
  credit: ContributorCredit | null;
  /** When contributing started (for the measured bytes per hour). */
  startedAt: number;
}

export function renderView(v: IslandView, c: ViewContext): void {
  const { started, status, credit, startedAt } = c;
  document.body.dataset.phase = v.phase;
  renderPhases(v);
  ui.conn.dataset.conn = v.connection;
  setText(ui.connText, connLine(v));
  setText(ui.phaseText, phaseLine(v, { started, paused: !!status?.paused, done: !!status?.done }));
  setText(ui.deviceName, v.device ? (v.engine === 'cpu' ? `${v.device} (CPU engine)` : v.device) : '–');
  setText(
    ui.deviceSpeed,
    (v.stepMs != null ? `· a step takes ${formatStepTime(v.stepMs)} of compute` : '') +
      (v.mfu != null ? ` · MFU ${formatPercent(v.mfu, 2)}` : ''),
  );
  ui.busyNote.hidden = !v.busy;
  if (v.busy) {
    setText(
      ui.busyNote,
      `Your ${v.engine === 'cpu' ? 'CPU' : 'GPU'} seems busy with something else (steps take much longer ` +
        'than usual), so Atoll backs off to ' +
        `${Math.round(v.effectiveDutyCycle * 100)}% of the time. It returns to your ` +
        `${Math.round(v.dutyCycle * 100)}% cap by itself when steps are quick again.`,
    );
  }

  const r = v.round;
  const frac = r && r.total > 0 ? Math.min(1, r.step / r.total) : 0;
  setText(ui.roundSteps, r ? `${formatInt(r.step)} / ${formatInt(r.total)} steps` : '– / – steps');
  setText(
    ui.roundEta,
    r && r.step >= r.total
      ? 'done'
      : r && v.paused
        ? 'ETA: paused'
        : r && (v.phase === 'training' || v.phase === 'recovering') && r.etaSec != null
          ? `ETA ${formatDuration(r.etaSec)}`
          : 'ETA –',
  );
  ui.roundFill.style.transform = `scaleX(${frac})`;
  ui.roundProgress.setAttribute('aria-valuenow', frac.toFixed(3));
  ui.roundProgress.setAttribute(
    'aria-valuetext',
    r ? `${r.step} of ${r.total} steps of the round from model version ${r.baseVersion}` : 'no round',
  );

  const version = Math.max(v.globalVersion ?? -1, status?.version ?? -1);
  setText(ui.sVersion, version >= 0 ? `v${formatInt(version)}` : '–');
  const evalLoss = status?.evalLoss ?? v.globalEvalLoss;
  setText(
    ui.sEval,
    evalLoss != null
      ? `${formatFixed(evalLoss, 3)}${status?.evalVersion != null ? ` (v${status.evalVersion})` : ''}`
      : '–',
  );
  setText(ui.sLoss, formatFixed(v.lastLoss, 3));
  setText(ui.sSpeed, formatRate(v.tokensPerSec, 'tok'));
  // the server's totals for this contributor (earlier sessions too), this session's until they arrive
  const accepted = Math.max(credit?.accepted ?? 0, v.roundsAccepted);
  setText(ui.sTokens, formatCount(Math.max(credit?.tokens ?? 0, v.tokensContributed)));
  setText(
    ui.sRounds,
    v.roundsRejected > 0 ? `${formatInt(accepted)} (${formatInt(v.roundsRejected)} rejected)` : formatInt(accepted),
  );
  renderCredit(credit);
  // counted as it goes, with the hourly rate once a few minutes have passed
  const perHour = (b: number) => measuredPerHour(b, startedAt, Date.now(), 120_000);
  const upH = perHour(v.bytesUp),
    downH = perHour(v.bytesDown);
  setText(ui.sUp, upH != null ? `${formatBytes(v.bytesUp)} (${formatBytes(upH)}/h)` : formatBytes(v.bytesUp));
  setText(ui.sDown, downH != null ? `${formatBytes(v.bytesDown)} (${formatBytes(downH)}/h)` : formatBytes(v.bytesDown));

  if (v.lastRejection) {
    ui.rejection.hidden = false;
    setText(
      ui.rejection,
      `The server did not accept an update (${v.lastRejection.code}): ` +
        `${v.lastRejection.message} The island goes on with the next round.`,
    );
  }
}

function renderCredit(c: ContributorCredit | null): void {
  setText(ui.crTokens, c ? formatCount(c.tokens) : '–');
  setText(ui.crComputed, c ? formatCount(c.tokensComputed) : '–');
  setText(ui.crAccepted, c ? formatInt(c.accepted) : '–');
  setText(
    ui.crRank,
    c?.rank != null ? `#${formatInt(c.rank)} of ${formatInt(c.contributors)}` : c ? 'not yet ranked' : '–',
  );
}

export function ensureChart(): LiveChart {
  chart ??= new LiveChart(ui.lossChart, {
    title: 'Local training loss per inner step',
    xLabel: 'step',
    series: [{ label: 'loss' }],
    height: 180,
    integerX: true,
  });
  return chart;
}

export function addLosses(points: LossPoint[]): void {
  const c = ensureChart();
  for (const p of points) {
    losses.push(p);
    c.push(p.step, p.loss);
  }
}

export function addLog(level: LogLevel, text: string, at: number): void {
  logLines.push({ level, text, at });
  if (logLines.length > 300) logLines.shift();
  const li = document.createElement('li');
  li.dataset.level = level;
  const t = document.createElement('time');
  t.dateTime = new Date(at).toISOString();
  t.textContent = new Date(at).toLocaleTimeString();
  li.append(t, text);
  ui.log.prepend(li);
  while (ui.log.children.length > 100) ui.log.lastElementChild?.remove();
}
