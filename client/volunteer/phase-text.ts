// The volunteer page's words for what the island does: the phase line, the connection line and
// the round stepper's states, from the worker's IslandView. No DOM: main.ts writes them in.
// Also the phase itself, as the island worker derives it from its state (phaseOf).

import { formatInt } from '../ui/format.ts';
import type { IslandView, Phase } from './messages.ts';

/** What the island worker's phase is made of. `runtimeStatus`: the IslandRuntime's last status. */
export interface PhaseState {
  fatal: boolean;
  recovering: boolean;
  started: boolean;
  runtimeStatus: string;
  pausing: boolean;
}

export function phaseOf(s: PhaseState): Phase {
  if (s.fatal) return 'error';
  if (s.recovering) return 'recovering';
  if (!s.started) return 'idle';
  const r = s.runtimeStatus;
  if (r === 'paused') return 'paused';
  if (s.pausing) {
    // nothing computes while waiting for the next round: that is paused already
    if (r === 'waiting' || r === 'idle') return 'paused';
    return 'pausing';
  }
  switch (r) {
    case 'connecting':
      return 'starting';
    case 'syncing':
      return 'syncing';
    case 'training':
      return 'training';
    case 'submitting':
      return 'uploading';
    case 'waiting':
      return 'waiting';
    default:
      return 'starting';
  }
}

const PHASE_TEXT: Record<IslandView['phase'], string> = {
  idle: 'Not started.',
  starting: 'Starting: preparing the GPU and connecting…',
  syncing: 'Downloading the current global model (θ)…',
  training: 'Training on your device.',
  uploading: 'Sending this round’s update…',
  waiting: 'Update sent; waiting for the round to close…',
  pausing: 'Pausing after the current step…',
  paused: 'Paused. Finished work is kept; resume whenever you like.',
  recovering: 'Recovering…',
  error: 'Stopped.',
};

const CONN_TEXT: Record<IslandView['connection'], string> = {
  offline: 'Not connected',
  connecting: 'Connecting…',
  connected: 'Connected',
  reconnecting: 'Reconnecting…',
};

/** The round's phases, in order, for the stepper. */
const ROUND_PHASES: Phase[] = ['syncing', 'training', 'uploading', 'waiting'];

/**
 * The round stepper's state per phase (done, current, paused, todo), and the round phase it marks:
 * the last round phase seen (`last`), kept through a pause, cleared when the island stops.
 */
export function roundStepper(v: IslandView, last: Phase | null): { states: string[]; roundPhase: Phase | null } {
  let roundPhase = last;
  if (ROUND_PHASES.includes(v.phase)) roundPhase = v.phase;
  else if (v.phase === 'idle' || v.phase === 'starting' || v.phase === 'error') roundPhase = null;
  const at = roundPhase ? ROUND_PHASES.indexOf(roundPhase) : -1;
  const halted = v.phase === 'paused' || v.phase === 'pausing' || v.phase === 'recovering';
  return {
    states: ROUND_PHASES.map((_, i) => (i < at ? 'done' : i === at ? (halted ? 'paused' : 'current') : 'todo')),
    roundPhase,
  };
}

/** The connection line. */
export function connLine(v: IslandView): string {
  return v.connection === 'reconnecting' && v.reconnectInSec != null
    ? `Reconnecting in ${Math.max(0, Math.ceil(v.reconnectInSec))} s`
    : CONN_TEXT[v.connection];
}

/** The phase line: what runs now, with the step, the cap in force and why it is lowered. */
export function phaseLine(v: IslandView, run: { started: boolean; paused: boolean; done: boolean }): string {
  const pct = (u: number) => `${Math.round(u * 100)}%`;
  let phase = PHASE_TEXT[v.phase];
  if (v.phase === 'training' && v.round) {
    phase =
      `Training: step ${formatInt(v.round.step)} of ${formatInt(v.round.total)}` +
      (v.effectiveDutyCycle < 1 ? `, at a ${pct(v.effectiveDutyCycle)} usage cap.` : '.');
  }
  if (v.phase === 'paused' && v.pauseReasons.length === 1 && v.pauseReasons[0] === 'hidden')
    phase = 'Paused while this tab is hidden.';
  if (v.detail) phase = `${phase} ${v.detail}`;
  if (run.started && run.paused && v.phase !== 'paused')
    phase = `${phase} The researchers have paused the run for now; your island waits and goes on when they resume it.`;
  if (run.started && run.done) phase = 'The run has reached its goal. Thank you for contributing!';
  return phase;
}
