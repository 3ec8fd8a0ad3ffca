// The volunteer page: explains the run, checks WebGPU, and drives the island
// worker. The page only renders; training, sockets and the GPU live in
// island.worker.ts, so the tab stays responsive while the GPU works.

import { formatBytes, formatCount, formatDuration, formatInt, formatRate } from '../ui/format.ts';
import { costDownText, estimateCosts } from './costs.ts';
import { forgetSavedModel, savedModel } from './theta-cache.ts';
import { caret, sampleNodes } from './sample-text.ts';
import { cleanDisplayName, loadPrefs, savePrefs } from './identity.ts';
import type {
  DebugDelays,
  EngineKind,
  FromWorker,
  GpuProbe,
  IslandView,
  ModelShape,
  PauseReason,
  ToWorker,
} from './messages.ts';
import { initialView } from './messages.ts';
import type { ContributorCredit } from '../../core/api.ts';
import type { Assignment } from '../../core/protocol.ts';
import { type GlobalStatus, estimateTrainingBytes, parseRunInfo, parseStatus, type RunInfo } from './run-info.ts';
import { hostPeerNet } from '../island/mix-relay.ts';
import type { DataRange } from '../../core/server-messages.ts';
import type { RtcPeerConstructor } from '../island/mix-webrtc.ts';

import { setText, ui } from './dom.ts';
import {
  addLog,
  addLosses,
  ensureChart,
  logLines,
  losses,
  phasesSeen,
  renderView as renderLiveView,
} from './live-view.ts';

// ---------------------------------------------------------------- state

const prefs = loadPrefs();
let run: RunInfo | null = null;
let probe: GpuProbe | null = null;
let started = false;
let view: IslandView = initialView(prefs.dutyCycle);
let status: GlobalStatus | null = null;
/** This contributor's credit on the server (all islands with this contributor id). */
let credit: ContributorCredit | null = null;
const assignments: Assignment[] = [];
let sampleSeq = 0;
let sampleBusy = false;
/** When contributing started (for the measured bytes per hour). */
let startedAt = 0;

/** Test and debugging hook: the page's state, read by the end-to-end tests. */
const debug = {
  get run() {
    return run;
  },
  get probe() {
    return probe;
  },
  get view() {
    return view;
  },
  get status() {
    return status;
  },
  get credit() {
    return credit;
  },
  get started() {
    return started;
  },
  losses,
  assignments,
  log: logLines,
  phasesSeen,
  /** Test hook: make the worker lose its GPU device. */
  loseDevice: () => send({ type: 'debug-lose-device' }),
  /** Test hook: slow steps (a busy GPU) and slow phases (to look at each). */
  setDelays: (delays: Partial<DebugDelays>) => send({ type: 'debug-delays', delays }),
  /** Test hook: a shard run's range through the worker's cached source, with the network bytes it cost. */
  fetchRange: (range: DataRange) =>
    new Promise<DebugRange>((resolve) => {
      const id = ++rangeSeq;
      rangeWaits.set(id, resolve);
      send({ type: 'debug-fetch-range', id, range });
    }),
  prefs,
};
type DebugRange = Extract<FromWorker, { type: 'debug-range' }>;
let rangeSeq = 0;
const rangeWaits = new Map<number, (m: DebugRange) => void>();
(globalThis as unknown as { __atoll: typeof debug }).__atoll = debug;

// ---------------------------------------------------------------- worker

const worker = new Worker(new URL('./island.worker.ts', import.meta.url), { type: 'module', name: 'atoll-island' });
const send = (m: ToWorker) => worker.postMessage(m);

worker.addEventListener('message', (e: MessageEvent<FromWorker>) => {
  const m = e.data;
  switch (m.type) {
    case 'probe':
      probe = m.probe;
      renderProbe();
      break;
    case 'calibrated':
      prefs.calibration = m.calibration;
      savePrefs(prefs);
      if (run) renderCosts(run);
      break;
    case 'view': {
      // credit moves when a round is accepted: ask the server at once
      const accepted = m.view.roundsAccepted > view.roundsAccepted;
      view = m.view;
      renderView();
      if (accepted) void pollStatus();
      break;
    }
    case 'losses':
      addLosses(m.points);
      break;
    case 'assignment':
      assignments.push(m.assignment);
      if (assignments.length > 50) assignments.shift();
      break;
    case 'log':
      addLog(m.level, m.text, m.at);
      break;
    case 'sample':
      renderSample(m);
      break;
    case 'sample-progress':
      renderSampleProgress(m.id, m.bytes, m.written, m.tokens);
      break;
    case 'debug-range':
      rangeWaits.get(m.id)?.(m);
      rangeWaits.delete(m.id);
      break;
  }
});
worker.addEventListener('error', (e) => {
  addLog('error', `The island worker failed: ${e.message || 'unknown error'}`, Date.now());
  setText(ui.phaseText, 'The island stopped because of an error in its worker. Reload the page to start again.');
});

/**
 * The worker's end of this page's WebRTC data channels (mix-relay.ts), or null: no RTCPeerConnection here (the island
 * uploads directly).
 */
function peerPort(): MessagePort | null {
  if (typeof RTCPeerConnection !== 'function') return null;
  const ch = new MessageChannel();
  hostPeerNet(ch.port1, RTCPeerConnection as unknown as RtcPeerConstructor);
  return ch.port2;
}

function shape(): ModelShape | null {
  return run ? { config: run.model, maxBatch: run.batch, maxT: run.seqLen } : null;
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
  document.title = `${r.title} · Atoll volunteer`;
  ui.runName.textContent = r.title;
  ui.runDesc.textContent = r.description;
  renderCosts(r);
}

/** The θ this browser keeps (theta-cache.ts): which version, and that only the updates since are fetched. */
async function showSavedModel(): Promise<void> {
  const s = await savedModel(location.origin);
  ui.savedModel.hidden = !s;
  if (!s) return;
  setText(
    ui.savedModelText,
    s.kind === 'partial'
      ? `Partly downloaded in this browser: ${s.chunks} of ${s.of} chunks of model v${s.version}; a start ` +
          'fetches the rest (all of it if the model has moved on since).'
      : `Saved in this browser: model v${s.version} (${formatBytes(s.bytes)}): a start fetches only the ` +
          'updates since it (the whole model again if the server no longer keeps them).',
  );
}
ui.forgetModel.addEventListener('click', () => {
  void forgetSavedModel().then(() => {
    ui.savedModel.hidden = true;
    addLog('info', 'The model saved in this browser is forgotten: the next start downloads it again.', Date.now());
  });
});

/** The cost card; the per-hour line from this device's measured speed at the chosen cap. */
function renderCosts(r: RunInfo): void {
  const tokensPerStep = r.batch * r.seqLen;
  ui.costGpu.textContent = r.innerSteps
    ? `Rounds of ${formatInt(r.innerSteps)} training steps (${formatCount(tokensPerStep * r.innerSteps)} tokens ` +
      `each), as long as you let it run, within the cap you set`
    : `Rounds of training steps (${formatCount(tokensPerStep)} tokens each), sized to your device's speed, ` +
      `within the cap you set`;
  const cal = prefs.calibration;
  const est = estimateCosts(r, cal ? cal.tokensPerSec * prefs.dutyCycle : null, status?.bytesPerUpdate ?? null);
  ui.costDown.textContent = costDownText(r, est.downPerRound, est.dataPerRound, status?.bytesPerUpdate != null);
  void showSavedModel();
  ui.costUp.textContent = `${formatBytes(r.bytesPerRound.up)} per round (${r.codec.encoding} compressed update)`;
  if (!probe) ui.costMem.textContent = `About ${formatBytes(estimateTrainingBytes(r.model, r.batch, r.seqLen))}`;
  if (est.roundsPerHour != null && est.roundSec != null) {
    ui.costHour.textContent =
      `About ${formatBytes(est.upPerHour)} up and ${formatBytes(est.downPerHour)} down an hour: a round every ` +
      `${formatDuration(est.roundSec)} at this device's measured ${formatRate(cal!.tokensPerSec, 'tok')} and your ` +
      `${Math.round(prefs.dutyCycle * 100)}% cap`;
  }
}

/** The global model's version and held-out loss, polled (every 5 s while contributing, else 30 s). */
let statusTimer: ReturnType<typeof setTimeout> | undefined;
async function pollStatus(): Promise<void> {
  clearTimeout(statusTimer);
  try {
    const res = await fetch('/api/status', { headers: { accept: 'application/json' }, cache: 'no-store' });
    if (res.ok) {
      const was = status?.bytesPerUpdate;
      status = parseStatus(await res.json());
      if (run && status.bytesPerUpdate !== was) renderCosts(run);
    }
    const cr = await fetch(`/api/contributors/${encodeURIComponent(prefs.contributorId)}`, {
      headers: { accept: 'application/json' },
      cache: 'no-store',
    });
    if (cr.ok) credit = (await cr.json()) as ContributorCredit;
    renderView();
  } catch {
    /* the server is away: the worker reports the connection */
  }
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => void pollStatus(), started && !document.hidden ? 5000 : 30_000);
}

// ---------------------------------------------------------------- WebGPU check

function renderProbe(): void {
  if (!probe) return;
  const dot = ui.gpuStatus.querySelector('.dot')!;
  if (probe.ok) {
    dot.className = 'dot dot-ok';
    const software = probe.adapter.isFallbackAdapter ? ' (a software renderer: it works, slowly)' : '';
    ui.gpuStatusText.textContent = `WebGPU is ready: ${probe.adapter.name}${software}.`;
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
    ui.gpuHelp.textContent =
      probe.reason === 'too-small'
        ? 'You can still help with your processor instead.'
        : 'Recent Chrome or Edge on Windows, macOS, ChromeOS and Android, Safari 26 and Firefox 141 on Windows have ' +
          'WebGPU; on Linux it may need to be enabled. Or help with your processor instead:';
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
  ui.start.textContent = started
    ? 'Contributing'
    : engine === 'cpu'
      ? 'Start contributing (CPU)'
      : 'Start contributing';
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
  startedAt = Date.now();
  ui.live.dataset.active = 'true';
  ensureChart();
  const opts = {
    engine,
    serverUrl: location.origin,
    contributorId: prefs.contributorId,
    displayName: prefs.displayName,
    dutyCycle: prefs.dutyCycle,
    shape: s,
    calibration: prefs.calibration,
    autotune: new URLSearchParams(location.search).get('autotune') !== '0',
    precision: precisionParam(),
    shardRun: run?.data.shards != null,
  };
  // butterfly mixing's peer connections live here (workers have no RTCPeerConnection); the worker relays through a port
  const peers = peerPort();
  worker.postMessage({ type: 'start', opts, peers: peers ?? undefined } satisfies ToWorker, peers ? [peers] : []);
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
  view = {
    ...view,
    pauseReasons: paused ? view.pauseReasons.filter((r) => r !== reason) : [...view.pauseReasons, reason],
  };
  updateButtons();
});

for (const r of ui.capRadios) {
  r.checked = Number(r.value) === prefs.dutyCycle;
  r.addEventListener('change', () => {
    if (!r.checked) return;
    prefs.dutyCycle = Number(r.value);
    savePrefs(prefs);
    send({ type: 'set-duty-cycle', dutyCycle: prefs.dutyCycle });
    if (run) renderCosts(run);
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
  setTimeout(() => {
    ui.saveName.textContent = 'Save';
  }, 1500);
}
ui.saveName.addEventListener('click', saveName);
ui.displayName.addEventListener('keydown', (e) => {
  if (e.key === 'Enter') saveName();
});

// ---------------------------------------------------------------- live view (live-view.ts)

function renderView(): void {
  renderLiveView(view, { started, status, credit, startedAt });
  updateButtons();
}

// ---------------------------------------------------------------- samples

/** Short by default: on a slow device each token waits for a gap between training steps. */
const SAMPLE_TOKENS = 40;

ui.sampleGo.addEventListener('click', () => {
  const engine = chosenEngine();
  const s = shape();
  if (!engine || !s || sampleBusy) return;
  sampleBusy = true;
  sampleSeq += 1;
  ui.sampleGo.textContent = 'Writing…';
  const where = started ? 'Writing between training steps (training goes first)…' : 'Writing on your device…';
  setText(ui.sampleMeta, where);
  send({
    type: 'sample',
    id: sampleSeq,
    prompt: ui.samplePrompt.value,
    tokens: SAMPLE_TOKENS,
    temperature: 0.8,
    seed: (Math.random() * 2 ** 31) >>> 0,
    engine,
    shape: s,
  });
  updateButtons();
});

function renderSampleProgress(id: number, bytes: Uint8Array, written: number, tokens: number): void {
  if (id !== sampleSeq) return;
  ui.sampleOut.replaceChildren(...sampleNodes(ui.samplePrompt.value, bytes), caret());
  setText(
    ui.sampleMeta,
    `${formatInt(written)} of ` +
      `${formatInt(tokens)} tokens${started ? ', between training steps (training goes first)' : ''}…`,
  );
}

function renderSample(m: Extract<FromWorker, { type: 'sample' }>): void {
  if (m.id !== sampleSeq) return;
  sampleBusy = false;
  ui.sampleGo.textContent = 'Write a sample';
  ui.sampleOut.replaceChildren();
  if (m.ok) {
    ui.sampleOut.append(...sampleNodes(ui.samplePrompt.value, m.bytes));
    setText(
      ui.sampleMeta,
      `Model ${m.version != null ? `v${m.version}` : '(latest)'}, ${m.device}: ${formatInt(m.tokens)} tokens ` +
        `in ${formatDuration(m.ms / 1000)}`,
    );
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

/** ?precision=f32|f16 fixes the WebGPU storage precision; absent (auto): the worker times both on a first visit. */
function precisionParam(): 'auto' | 'f32' | 'f16' {
  const p = new URLSearchParams(location.search).get('precision');
  return p === 'f32' || p === 'f16' ? p : 'auto';
}
