// The volunteer page: explains the run, checks WebGPU, and drives the island
// worker. The page only renders; training, sockets and the GPU live in
// island.worker.ts, so the tab stays responsive while the GPU works.

import { LiveChart } from '../ui/chart.ts';
import { formatBytes, formatCount, formatDuration, formatFixed, formatInt, formatRate } from '../ui/format.ts';
import { cleanDisplayName, loadPrefs, savePrefs } from './identity.ts';
import type { EngineKind, FromWorker, GpuProbe, IslandView, LogLevel, LossPoint, ModelShape, PauseReason, ToWorker } from './messages.ts';
import { initialView } from './messages.ts';
import type { Assignment } from '../../core/protocol.ts';
import { type GlobalStatus, estimateTrainingBytes, parseRunInfo, parseStatus, type RunInfo } from './run-info.ts';

// ---------------------------------------------------------------- DOM handles

function $<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`missing #${id}`);
  return el as T;
}

const ui = {
  runName: $('run-name'),
  runDesc: $('run-description'),
  costGpu: $('cost-gpu'),
  costDown: $('cost-down'),
  costUp: $('cost-up'),
  costMem: $('cost-mem'),
  gpuStatus: $('gpu-status'),
  gpuStatusText: $('gpu-status-text'),
  cpuOptin: $('cpu-optin'),
  gpuHelp: $('gpu-missing-help'),
  useCpu: $<HTMLInputElement>('use-cpu'),
  start: $<HTMLButtonElement>('start'),
  pause: $<HTMLButtonElement>('pause'),
  capRadios: Array.from(document.querySelectorAll<HTMLInputElement>('input[name="cap"]')),
  pauseHidden: $<HTMLInputElement>('pause-hidden'),
  displayName: $<HTMLInputElement>('display-name'),
  saveName: $<HTMLButtonElement>('save-name'),
  contributorId: $('contributor-id'),
  live: $('live'),
  conn: $('conn'),
  connText: $('conn-text'),
  phaseText: $('phase-text'),
  deviceName: $('device-name'),
  roundSteps: $('round-steps'),
  roundEta: $('round-eta'),
  roundProgress: $('round-progress'),
  roundFill: $('round-fill'),
  sVersion: $('s-version'),
  sEval: $('s-eval'),
  sLoss: $('s-loss'),
  sSpeed: $('s-speed'),
  sTokens: $('s-tokens'),
  sRounds: $('s-rounds'),
  sUp: $('s-up'),
  sDown: $('s-down'),
  lossChart: $('loss-chart'),
  rejection: $('rejection'),
  log: $('log'),
  samplePrompt: $<HTMLInputElement>('sample-prompt'),
  sampleGo: $<HTMLButtonElement>('sample-go'),
  sampleOut: $('sample-out'),
  sampleMeta: $('sample-meta'),
};

/** Sets text only when it changed (no needless layout work at 10 Hz). */
function setText(el: HTMLElement, text: string): void {
  if (el.textContent !== text) el.textContent = text;
}

// ---------------------------------------------------------------- state

const prefs = loadPrefs();
let run: RunInfo | null = null;
let probe: GpuProbe | null = null;
let started = false;
let view: IslandView = initialView(prefs.dutyCycle);
let status: GlobalStatus | null = null;
const losses: LossPoint[] = [];
const assignments: Assignment[] = [];
const logLines: Array<{ level: LogLevel; text: string; at: number }> = [];
let chart: LiveChart | null = null;
let sampleSeq = 0;
let sampleBusy = false;

/** Test and debugging hook: the page's state, read by the end-to-end tests. */
const debug = {
  get run() { return run; },
  get probe() { return probe; },
  get view() { return view; },
  get status() { return status; },
  get started() { return started; },
  losses,
  assignments,
  log: logLines,
  /** Test hook: make the worker lose its GPU device. */
  loseDevice: () => send({ type: 'debug-lose-device' }),
  prefs,
};
(globalThis as unknown as { __atoll: typeof debug }).__atoll = debug;

// ---------------------------------------------------------------- worker

const worker = new Worker(new URL('./island.worker.ts', import.meta.url), { type: 'module', name: 'atoll-island' });
const send = (m: ToWorker) => worker.postMessage(m);

worker.addEventListener('message', (e: MessageEvent<FromWorker>) => {
  const m = e.data;
  switch (m.type) {
    case 'probe': probe = m.probe; renderProbe(); break;
    case 'view': view = m.view; renderView(); break;
    case 'losses': addLosses(m.points); break;
    case 'assignment': assignments.push(m.assignment); if (assignments.length > 50) assignments.shift(); break;
    case 'log': addLog(m.level, m.text, m.at); break;
    case 'sample': renderSample(m); break;
    case 'sample-progress': renderSampleProgress(m.id, m.text); break;
  }
});
worker.addEventListener('error', (e) => {
  addLog('error', `The island worker failed: ${e.message || 'unknown error'}`, Date.now());
  setText(ui.phaseText, 'The island stopped because of an error in its worker. Reload the page to start again.');
});

function shape(): ModelShape | null {
  return run ? { config: run.config, maxBatch: run.batch, maxT: run.seqLen } : null;
}

// ---------------------------------------------------------------- run info

async function loadRun(): Promise<void> {
  try {
    const res = await fetch('/api/run', { headers: { accept: 'application/json' } });
    if (!res.ok) throw new Error(`the server answered ${res.status}`);
    run = parseRunInfo(await res.json());
  } catch (e) {
    ui.runName.textContent = 'Cannot reach the Atoll server';
    ui.runDesc.textContent = `Loading the run failed (${(e as Error).message}). Retrying in 5 s…`;
    setTimeout(() => void loadRun(), 5000);
    return;
  }
  renderRun(run);
  const s = shape();
  if (s) send({ type: 'probe', shape: s });
  updateButtons();
}

function renderRun(r: RunInfo): void {
  document.title = `${r.name} · Atoll volunteer`;
  ui.runName.textContent = r.name;
  ui.runDesc.textContent = r.description;
  const tokensPerStep = r.batch * r.seqLen;
  ui.costGpu.textContent = r.innerSteps
    ? `Rounds of ${formatInt(r.innerSteps)} training steps (${formatCount(tokensPerStep * r.innerSteps)} tokens each), as long as you let it run, within the cap you set`
    : `Rounds of training steps (${formatCount(tokensPerStep)} tokens each), sized to your device's speed, within the cap you set`;
  ui.costDown.textContent = `${formatBytes(r.modelBytes + (r.trainBytes ?? 0))} once (the ${formatCount(r.params)}-parameter model` +
    (r.trainBytes != null ? ` and ${formatBytes(r.trainBytes)} of training text)` : ')') +
    (r.bytesDownPerRound != null ? `, then ${formatBytes(r.bytesDownPerRound)} per round` : '');
  ui.costUp.textContent = r.bytesUpPerRound != null
    ? `${formatBytes(r.bytesUpPerRound)} (${r.codec} compressed update)`
    : `One ${r.codec} compressed update, about ${formatBytes(r.params * (r.codec === 'int4' ? 0.6 : r.codec === 'f16' ? 2 : 1.1))}`;
  if (!probe) ui.costMem.textContent = `About ${formatBytes(estimateTrainingBytes(r.config, r.batch, r.seqLen))}`;
}

/** The global model's version and held-out loss, polled (every 5 s while contributing, else 30 s). */
let statusTimer: ReturnType<typeof setTimeout> | undefined;
async function pollStatus(): Promise<void> {
  clearTimeout(statusTimer);
  try {
    const res = await fetch('/api/status', { headers: { accept: 'application/json' }, cache: 'no-store' });
    if (res.ok) {
      status = parseStatus(await res.json());
      renderView();
    }
  } catch { /* the server is away: the worker reports the connection */ }
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => void pollStatus(), started && !document.hidden ? 5000 : 30_000);
}

// ---------------------------------------------------------------- WebGPU check

function renderProbe(): void {
  if (!probe) return;
  const dot = ui.gpuStatus.querySelector('.dot')!;
  if (probe.ok) {
    dot.className = 'dot dot-ok';
    ui.gpuStatusText.textContent = `WebGPU is ready: ${probe.adapter.name}${probe.adapter.isFallbackAdapter ? ' (a software renderer: it works, slowly)' : ''}.`;
    ui.cpuOptin.hidden = true;
  } else {
    dot.className = 'dot dot-bad';
    const lead: Record<typeof probe.reason, string> = {
      'no-navigator-gpu': 'WebGPU is not available in this browser.',
      'no-adapter': 'WebGPU is present, but the browser offered no GPU adapter.',
      'too-small': 'Your GPU is too small for this model.',
      error: 'Checking WebGPU failed.',
    };
    ui.gpuStatusText.textContent = `${lead[probe.reason]} ${probe.message}`;
    ui.gpuHelp.textContent = probe.reason === 'too-small'
      ? 'You can still help with your processor instead.'
      : 'Recent Chrome or Edge on Windows, macOS, ChromeOS and Android, Safari 26 and Firefox 141 on Windows have WebGPU; on Linux it may need to be enabled. Or help with your processor instead:';
    ui.cpuOptin.hidden = false;
  }
  document.body.dataset.webgpu = probe.ok ? 'yes' : probe.reason;
  if (probe.gpuBytes > 0) ui.costMem.textContent = `${formatBytes(probe.gpuBytes)} while training`;
  updateButtons();
}

function chosenEngine(): EngineKind | null {
  if (started) return view.engine;
  if (probe?.ok) return 'webgpu';
  if (probe && !probe.ok && ui.useCpu.checked) return 'cpu';
  return null;
}

function updateButtons(): void {
  const engine = chosenEngine();
  ui.start.disabled = started || !run || !engine;
  ui.start.textContent = started ? 'Contributing' : engine === 'cpu' ? 'Start contributing (CPU)' : 'Start contributing';
  ui.pause.disabled = !started || view.phase === 'error';
  const userPaused = view.pauseReasons.includes('user');
  ui.pause.setAttribute('aria-pressed', String(userPaused));
  ui.pause.textContent = !userPaused ? 'Pause' : view.phase === 'pausing' ? 'Pausing…' : 'Resume';
  ui.sampleGo.disabled = sampleBusy || !run || !engine;
}

ui.useCpu.addEventListener('change', updateButtons);

// ---------------------------------------------------------------- controls

ui.start.addEventListener('click', () => {
  const engine = chosenEngine();
  const s = shape();
  if (started || !engine || !s) return;
  started = true;
  ui.live.dataset.active = 'true';
  ensureChart();
  send({
    type: 'start',
    opts: { engine, serverUrl: location.origin, contributorId: prefs.contributorId, displayName: prefs.displayName, dutyCycle: prefs.dutyCycle, shape: s },
  });
  syncHiddenPause();
  void pollStatus();
  updateButtons();
  ui.pause.focus();
});

ui.pause.addEventListener('click', () => {
  if (!started) return;
  const reason: PauseReason = 'user';
  const paused = view.pauseReasons.includes(reason);
  send({ type: paused ? 'resume' : 'pause', reason });
  // reflect the press at once; the worker's next view confirms it
  view = { ...view, pauseReasons: paused ? view.pauseReasons.filter((r) => r !== reason) : [...view.pauseReasons, reason] };
  updateButtons();
});

for (const r of ui.capRadios) {
  r.checked = Number(r.value) === prefs.dutyCycle;
  r.addEventListener('change', () => {
    if (!r.checked) return;
    prefs.dutyCycle = Number(r.value);
    savePrefs(prefs);
    send({ type: 'set-duty-cycle', dutyCycle: prefs.dutyCycle });
  });
}

ui.pauseHidden.checked = prefs.pauseWhenHidden;
ui.pauseHidden.addEventListener('change', () => {
  prefs.pauseWhenHidden = ui.pauseHidden.checked;
  savePrefs(prefs);
  syncHiddenPause();
});
document.addEventListener('visibilitychange', syncHiddenPause);

let hiddenPauseSent = false;
function syncHiddenPause(): void {
  if (!started) return;
  const want = prefs.pauseWhenHidden && document.hidden;
  if (want === hiddenPauseSent) return;
  hiddenPauseSent = want;
  send({ type: want ? 'pause' : 'resume', reason: 'hidden' });
}

ui.contributorId.textContent = prefs.contributorId;
ui.displayName.value = prefs.displayName;
function saveName(): void {
  const name = cleanDisplayName(ui.displayName.value);
  ui.displayName.value = name;
  prefs.displayName = name;
  savePrefs(prefs);
  send({ type: 'set-display-name', displayName: name });
  ui.saveName.textContent = 'Saved';
  setTimeout(() => { ui.saveName.textContent = 'Save'; }, 1500);
}
ui.saveName.addEventListener('click', saveName);
ui.displayName.addEventListener('keydown', (e) => { if (e.key === 'Enter') saveName(); });

// ---------------------------------------------------------------- live view

const PHASE_TEXT: Record<IslandView['phase'], string> = {
  idle: 'Not started.',
  starting: 'Starting: preparing the GPU and connecting…',
  syncing: 'Downloading the current global model…',
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

function renderView(): void {
  const v = view;
  document.body.dataset.phase = v.phase;
  ui.conn.dataset.conn = v.connection;
  setText(ui.connText, v.connection === 'reconnecting' && v.reconnectInSec != null
    ? `Reconnecting in ${Math.max(0, Math.ceil(v.reconnectInSec))} s`
    : CONN_TEXT[v.connection]);
  let phase = PHASE_TEXT[v.phase];
  if (v.phase === 'paused' && v.pauseReasons.length === 1 && v.pauseReasons[0] === 'hidden') phase = 'Paused while this tab is hidden.';
  if (v.detail) phase = `${phase} ${v.detail}`;
  if (started && status?.paused && v.phase !== 'paused') phase = `${phase} The researchers have paused the run for now; your island waits and goes on when they resume it.`;
  if (started && status?.done) phase = 'The run has reached its goal. Thank you for contributing!';
  setText(ui.phaseText, phase);
  setText(ui.deviceName, v.device ? (v.engine === 'cpu' ? `${v.device} (CPU engine)` : v.device) : '–');

  const r = v.round;
  const frac = r && r.total > 0 ? Math.min(1, r.step / r.total) : 0;
  setText(ui.roundSteps, r ? `${formatInt(r.step)} / ${formatInt(r.total)} steps` : '– / – steps');
  setText(ui.roundEta, r && v.phase === 'training' && r.etaSec != null ? `ETA ${formatDuration(r.etaSec)}` : r && r.step >= r.total ? 'done' : 'ETA –');
  ui.roundFill.style.transform = `scaleX(${frac})`;
  ui.roundProgress.setAttribute('aria-valuenow', frac.toFixed(3));
  ui.roundProgress.setAttribute('aria-valuetext', r ? `${r.step} of ${r.total} steps of the round from model version ${r.baseVersion}` : 'no round');

  const version = Math.max(v.globalVersion ?? -1, status?.version ?? -1);
  setText(ui.sVersion, version >= 0 ? `v${formatInt(version)}` : '–');
  const evalLoss = status?.evalLoss ?? v.globalEvalLoss;
  setText(ui.sEval, evalLoss != null ? `${formatFixed(evalLoss, 3)}${status?.evalVersion != null ? ` (v${status.evalVersion})` : ''}` : '–');
  setText(ui.sLoss, formatFixed(v.lastLoss, 3));
  setText(ui.sSpeed, formatRate(v.tokensPerSec, 'tok'));
  setText(ui.sTokens, formatCount(v.tokensContributed));
  setText(ui.sRounds, v.roundsRejected > 0 ? `${formatInt(v.roundsAccepted)} (${formatInt(v.roundsRejected)} rejected)` : formatInt(v.roundsAccepted));
  setText(ui.sUp, formatBytes(v.bytesUp));
  setText(ui.sDown, formatBytes(v.bytesDown));

  if (v.lastRejection) {
    ui.rejection.hidden = false;
    setText(ui.rejection, `The server did not accept an update (${v.lastRejection.code}): ${v.lastRejection.message} The island goes on with the next round.`);
  }
  updateButtons();
}

function ensureChart(): LiveChart {
  chart ??= new LiveChart(ui.lossChart, { title: 'Local training loss per inner step', xLabel: 'step', series: [{ label: 'loss' }], height: 180, integerX: true });
  return chart;
}

function addLosses(points: LossPoint[]): void {
  const c = ensureChart();
  for (const p of points) {
    losses.push(p);
    c.push(p.step, p.loss);
  }
}

function addLog(level: LogLevel, text: string, at: number): void {
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

// ---------------------------------------------------------------- samples

const SAMPLE_TOKENS = 100;

ui.sampleGo.addEventListener('click', () => {
  const engine = chosenEngine();
  const s = shape();
  if (!engine || !s || sampleBusy) return;
  sampleBusy = true;
  sampleSeq += 1;
  ui.sampleGo.textContent = 'Writing…';
  setText(ui.sampleMeta, 'Generating on your device…');
  send({ type: 'sample', id: sampleSeq, prompt: ui.samplePrompt.value, tokens: SAMPLE_TOKENS, temperature: 0.8, seed: (Math.random() * 2 ** 31) >>> 0, engine, shape: s });
  updateButtons();
});

function renderSampleProgress(id: number, text: string): void {
  if (id !== sampleSeq) return;
  const p = document.createElement('span');
  p.className = 'prompt';
  p.textContent = ui.samplePrompt.value;
  ui.sampleOut.replaceChildren(p, text, caret());
}

function caret(): HTMLElement {
  const c = document.createElement('span');
  c.className = 'caret';
  c.setAttribute('aria-hidden', 'true');
  c.textContent = '▍';
  return c;
}

function renderSample(m: Extract<FromWorker, { type: 'sample' }>): void {
  if (m.id !== sampleSeq) return;
  sampleBusy = false;
  ui.sampleGo.textContent = 'Write a sample';
  ui.sampleOut.replaceChildren();
  if (m.ok) {
    const p = document.createElement('span');
    p.className = 'prompt';
    p.textContent = ui.samplePrompt.value;
    ui.sampleOut.append(p, m.text);
    setText(ui.sampleMeta, `Model ${m.version != null ? `v${m.version}` : '(latest)'}, ${m.device}, ${formatDuration(m.ms / 1000)}`);
  } else {
    ui.sampleOut.textContent = '';
    setText(ui.sampleMeta, `Could not write a sample (${m.code}): ${m.message}`);
  }
  updateButtons();
}

// ---------------------------------------------------------------- go

renderView();
void loadRun();
void pollStatus();
