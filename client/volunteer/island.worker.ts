// The volunteer's island, in a dedicated module worker: WebGPU (or CPU) engine,
// socket.io transport and the shared IslandRuntime. The page sends commands
// (messages.ts) and renders the IslandView snapshots posted from here.
//
// Supervision: the runtime is restarted with exponential backoff whenever it stops
// on a transport error (server restart, network loss); a lost GPU device is
// rebuilt underneath it by ResilientEngine, without losing the round.

import { WebGpuEngine } from '../island/engine/webgpu.ts';
import { IslandRuntime, type IslandEvent, type IslandRuntimeOptions } from '../island/index.ts';
import { backoff } from '../../core/random.ts';
import { mfu, numParams } from '../../core/model/config.ts';
import { type Assignment, ErrorCode } from '../../core/protocol.ts';
import { connectTransport, type ConnectedTransport, delayedTransport } from './connect.ts';
import { RelayPeerNet } from '../island/mix-relay.ts';
import type { MixMemberStats } from '../island/mix-member.ts';
import { calibrate, calibrationKey, fullBatch, pickNumerics } from '../island/calibrate.ts';
import type {
  Calibration,
  DebugDelays,
  EngineKind,
  FromWorker,
  IslandView,
  LogLevel,
  LossPoint,
  ModelShape,
  PauseReason,
  Phase,
  StartOptions,
  ToWorker,
} from './messages.ts';
import { initialView } from './messages.ts';
import { ResilientEngine, type EngineHandle } from './resilient-engine.ts';
import { answerSample, SamplerEngines } from './sampler.ts';
import { phaseOf } from './phase-text.ts';
import { autotuneLine, cpuName, lastAdapter, openEngineHandle, probeGpu } from './worker-gpu.ts';
import type { TokenArray } from '../../core/data/tokenizer.ts';

const post = (m: FromWorker) => (self as unknown as { postMessage(m: FromWorker): void }).postMessage(m);
const log = (level: LogLevel, text: string) => post({ type: 'log', level, text, at: Date.now() });

// ---------------------------------------------------------------- state

let opts: StartOptions | null = null;
let view: IslandView = initialView();
let engine: ResilientEngine | null = null;
let runtime: IslandRuntime | null = null;
let runtimeOpts: IslandRuntimeOptions | null = null;
let link: ConnectedTransport | null = null;
let train: TokenArray | null = null;
const pauseReasons = new Set<PauseReason>();
/** Totals of runtimes that ended (each runtime counts from zero). */
const carried = { bytesUp: 0, bytesDown: 0 };
let extraDown = 0;
let globalStep = 0;
let assignment: Assignment | null = null;
/** Losses of this round are read back every this many steps (the runtime's lossEvery). */
let roundLossEvery = 1;
let calibration: Calibration | null = null;
/** Test hooks (debug-delays). */
const delays: DebugDelays = { stepMs: 0, syncMs: 0, uploadMs: 0, waitMs: 0 };
let runtimeStatus = 'idle';
let reconnectAt: number | null = null;
/** Why the island cannot go on (shown as the 'error' phase), or null. */
let fatal: string | null = null;
/** A lost GPU device is being rebuilt / the supervisor waits to restart the runtime. */
let deviceRecovering = false;
let backingOff = false;
/** Butterfly mixing: the page's data channels (null: the page has no RTCPeerConnection) and what the member did. */
let peers: RelayPeerNet | null = null;
const mixStats: MixMemberStats = { mixed: 0, direct: 0, piecesOk: 0, piecesRefetched: 0 };

// ---------------------------------------------------------------- view

let viewTimer: ReturnType<typeof setTimeout> | null = null;
let lastPost = 0;
/** Posts the view at most ~8 times a second. */
function publish(now = false): void {
  if (now || performance.now() - lastPost > 125) {
    if (viewTimer) {
      clearTimeout(viewTimer);
      viewTimer = null;
    }
    lastPost = performance.now();
    refreshView();
    post({ type: 'view', view });
    return;
  }
  viewTimer ??= setTimeout(() => {
    viewTimer = null;
    publish(true);
  }, 125);
}

function refreshView(): void {
  const p = runtime?.progress;
  view.bytesUp = carried.bytesUp + (p?.bytesUp ?? 0);
  view.bytesDown = carried.bytesDown + (p?.bytesDown ?? 0) + extraDown;
  if (p && p.version >= 0) view.globalVersion = Math.max(view.globalVersion ?? -1, p.version);
  view.pauseReasons = [...pauseReasons];
  view.paused = pauseReasons.size > 0;
  view.dutyCycle = engine?.dutyCycle ?? opts?.dutyCycle ?? 1;
  view.effectiveDutyCycle = engine?.effectiveDutyCycle ?? view.dutyCycle;
  view.busy = engine?.busy ?? false;
  view.stepMs = engine?.medianStepMs ?? calibration?.stepMs ?? null;
  // MFU of the compute itself (rests excluded), where the engine knows its device's peak
  const peak = engine?.peakFlops;
  const a = assignment;
  view.mfu =
    peak && a && view.stepMs
      ? mfu(engine!.config, (1000 * a.batchSize * a.seqLen) / view.stepMs, peak, a.seqLen)
      : null;
  view.calibration = calibration;
  view.roundsMixed = mixStats.mixed;
  view.roundsDirect = mixStats.direct;
  view.phase = currentPhase();
  view.reconnectInSec = reconnectAt != null ? Math.max(0, (reconnectAt - performance.now()) / 1000) : null;
  if (view.round) {
    // the steps left at the usage cap in force (compute, then its rest); none while paused
    const left = view.round.total - view.round.step;
    const stepMs = engine?.lastStepMs != null && engine.busy ? engine.lastStepMs : view.stepMs;
    view.round.etaSec = stepMs != null && !view.paused ? (left * stepMs) / view.effectiveDutyCycle / 1000 : null;
  }
}

function currentPhase(): Phase {
  if (fatal !== null) view.detail = fatal;
  return phaseOf({
    fatal: fatal !== null,
    recovering: deviceRecovering || backingOff,
    started: opts !== null,
    runtimeStatus,
    pausing: pauseReasons.size > 0,
  });
}

function stopWith(reason: string): void {
  fatal = reason;
  publish(true);
}

// ---------------------------------------------------------------- engine

async function openEngine(
  kind: EngineKind,
  shape: ModelShape,
  onLog = true,
  precision: 'f32' | 'f16' = 'f32',
): Promise<ResilientEngine> {
  const open = async (): Promise<EngineHandle> => {
    const h = await openEngineHandle(kind, shape, opts?.autotune !== false, precision);
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
          `The GPU seems busy with something else (a step took ${(b.stepMs / 1000).toFixed(1)} s, usually ` +
            `${(b.medianMs / 1000).toFixed(1)} s): backing off to ${pct(b.dutyCycle)} until steps are quick again.`,
        );
      else
        log(
          'info',
          `Steps are quick again (${(b.stepMs / 1000).toFixed(1)} s): back to the ${pct(b.dutyCycle)} usage cap.`,
        );
      publish(true);
    },
    onLoss: (i) => {
      if (!onLog) return; // the sampler's own device: rebuilt quietly on the next sample
      log(
        'warn',
        `The GPU device was lost (${i.reason}${i.message ? `: ${i.message}` : ''}); opening a new one and resuming ` +
          `from the last synced model.`,
      );
      deviceRecovering = true;
      view.detail = 'The GPU device was lost; rebuilding it and replaying this round’s steps.';
      publish(true);
    },
    onRecovered: (r) => {
      if (!onLog) return;
      log(
        'info',
        `GPU device rebuilt (${r.device}); replayed ${r.replayedSteps} step(s) of the round in ` +
          `${Math.round(r.ms)} ms. Nothing was lost.`,
      );
      deviceRecovering = false;
      view.detail = '';
      view.device = r.device;
      publish(true);
    },
  });
}

// ---------------------------------------------------------------- data

async function fetchBytes(url: string): Promise<Uint8Array> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`E_HTTP_${res.status}: GET ${url} answered ${res.status}`);
  const b = new Uint8Array(await res.arrayBuffer());
  extraDown += b.byteLength;
  return b;
}

// ---------------------------------------------------------------- the island

async function start(o: StartOptions): Promise<void> {
  opts = o;
  view = initialView(o.dutyCycle);
  view.engine = o.engine;
  publish(true);
  const t0 = performance.now();
  try {
    // a fixed ?precision=, or the choice saved with this device's calibration (checked against its key later)
    engine = await openEngine(
      o.engine,
      o.shape,
      true,
      o.precision === 'auto' ? (o.calibration?.numerics ?? 'f32') : o.precision,
    );
  } catch (e) {
    log('error', `Could not start the ${o.engine === 'cpu' ? 'CPU' : 'WebGPU'} engine: ${(e as Error).message}`);
    stopWith(`Could not start the engine: ${(e as Error).message}`);
    return;
  }
  engine.dutyCycle = o.dutyCycle;
  engine.extraStepMs = delays.stepMs;
  if (o.engine === 'webgpu') {
    // the sampler's engine is built now, not while training runs (building it compiles pipelines)
    await samplers.get('webgpu', o.shape, engine, (s) => openEngine('webgpu', s, false)).catch(() => {});
  }
  view.device = o.engine === 'cpu' ? cpuName() : engine.device;
  log(
    'info',
    `Engine ready: ${view.device} (${((performance.now() - t0) / 1000).toFixed(1)} s to set ` +
      `up${o.engine === 'webgpu' ? ', mostly compiling the GPU kernels' : ''}).`,
  );
  publish(true);
  void supervise(o);
}

/** This device's speed: the saved measurement when it fits, else a few timed steps now. */
async function ensureCalibration(o: StartOptions, data: TokenArray): Promise<void> {
  if (calibration || !engine) return;
  // the precision setting is part of the key: ?precision=f32 never reuses an f16 choice
  const key = `${calibrationKey(o.engine, engine.device, o.shape)}|${o.precision}`;
  if (o.calibration?.key === key) {
    calibration = o.calibration;
    log(
      'info',
      `Speed measured earlier on this device: ` +
        `${Math.round(calibration.tokensPerSec).toLocaleString('en-US')} tokens/s (a step ` +
        `${(calibration.stepMs / 1000).toFixed(1)} s).`,
    );
    return;
  }
  view.detail = 'Measuring this device’s speed on a few training steps…';
  publish(true);
  calibration = {
    ...(await calibrate(engine.current, data, o.shape, key)),
    numerics: engine.numerics === 'f16' ? 'f16' : 'f32',
  };
  if (o.engine === 'webgpu' && o.precision === 'auto' && engine.numerics !== 'f16') await tryF16(o, data, key);
  view.detail = '';
  if (!calibration) return;
  post({ type: 'calibrated', calibration });
  const c = calibration;
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
  if (!engine || !calibration) return;
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
  view.detail = 'Timing f16 storage against f32 on a few training steps…';
  publish(true);
  const c16 = await calibrate(f16.current, data, o.shape, key);
  const pick = pickNumerics(calibration, c16);
  log('info', pick.line);
  if (pick.numerics === 'f16') {
    engine.destroy();
    engine = f16;
    engine.dutyCycle = o.dutyCycle;
    engine.extraStepMs = delays.stepMs;
    calibration = { ...c16, numerics: 'f16', f16Speedup: pick.speedup };
    view.device = engine.device;
  } else {
    f16.destroy();
    calibration = { ...calibration, f16Speedup: pick.speedup };
  }
}

/**
 * An estimated speed is replaced by the real steps' median once a full-batch round is accepted, so
 * the cost card and a reload's first round use what this device really does.
 */
function refineCalibration(a: Assignment): void {
  const c = calibration,
    med = engine?.medianStepMs;
  const full = opts && fullBatch(opts.shape);
  if (!c?.estimated || med == null || !full || a.batchSize !== full.B || a.seqLen !== full.T) return;
  calibration = {
    ...c,
    stepMs: med,
    tokensPerSec: (1000 * a.batchSize * a.seqLen) / med,
    estimated: false,
    at: Date.now(),
  };
  post({ type: 'calibrated', calibration });
  log(
    'info',
    `A full step takes ${(med / 1000).toFixed(1)} s here (estimated ${(c.stepMs / 1000).toFixed(1)} s): ` +
      `saved for the next visit.`,
  );
}

/** The name on the leaderboard: the display name, or a stable anonymous one from the contributor id. */
function islandName(o: StartOptions): string {
  return (o.displayName || `volunteer-${o.contributorId.replace(/[^a-zA-Z0-9]/g, '').slice(0, 8)}`).slice(0, 64);
}

/** Runs the island; restarts it after a transport failure, with exponential backoff. */
async function supervise(o: StartOptions): Promise<void> {
  let failures = 0;
  for (;;) {
    try {
      train ??= await fetchBytes(new URL('/api/data/train', o.serverUrl).href);
    } catch (e) {
      await waitToRetry(++failures, `Could not download the training data (${(e as Error).message}).`);
      continue;
    }
    try {
      await ensureCalibration(o, train);
    } catch (e) {
      // the round is then sized from the first delta instead
      log('warn', `Could not measure this device’s speed (${(e as Error).message}).`);
    }
    view.connection = 'connecting';
    link = connectTransport(
      o.serverUrl,
      {
        onConnection: (c) => {
          view.connection = c;
          publish(true);
        },
        log,
      },
      { peers, paramCount: numParams(o.shape.config), stats: mixStats },
    );
    runtimeOpts = {
      engine: engine!,
      train,
      transport: delayedTransport(link.transport, () => delays),
      caps: {
        name: islandName(o),
        contributorId: o.contributorId.replace(/[^A-Za-z0-9_-]/g, '').slice(0, 64),
        maxBatch: o.shape.maxBatch,
        // the speed at the usage cap: what a round's wall time will see
        ...(calibration ? { tokensPerSec: calibration.tokensPerSec * engine!.effectiveDutyCycle } : {}),
      },
      // the usage cap is applied by the engine wrapper, at every step (see ResilientEngine.dutyCycle)
      dutyCycle: 1,
      lossEvery: 1,
      // a restarted runtime counts its sequence numbers from 1 again, so it joins as a new island
      resumeIslandId: undefined,
    };
    const rt = new IslandRuntime(runtimeOpts);
    runtime = rt;
    const off = rt.on((e) =>
      onEvent(e, () => {
        failures = 0;
      }),
    );
    if (pauseReasons.size > 0) rt.pause();
    const summary = await rt.start();
    off();
    carried.bytesUp += rt.progress.bytesUp;
    carried.bytesDown += rt.progress.bytesDown;
    runtime = null;
    link = null;
    if (summary.reason === 'done') {
      view.connection = 'offline';
      log('info', 'The server says the run is done.');
      stopWith('The run has reached its goal: thank you! There is nothing left to train.');
      return;
    }
    if (summary.reason === 'stopped') return;
    if (/E_DEVICE_LOST|E_NO_ADAPTER|E_NO_WEBGPU/.test(lastError)) {
      deviceRecovering = false;
      stopWith(
        `The GPU is not usable any more (${lastError}). Reload the page to try again, or contribute with the CPU.`,
      );
      return;
    }
    await waitToRetry(++failures, `The island stopped (${summary.reason}: ${lastError || 'no detail'}).`);
  }
}

let lastError = '';

async function waitToRetry(failures: number, why: string): Promise<void> {
  const delay = backoff(failures - 1, 1000, 30_000, 0.2);
  log('warn', `${why} Reconnecting in ${Math.round(delay / 1000)} s.`);
  view.connection = 'reconnecting';
  reconnectAt = performance.now() + delay;
  backingOff = true;
  view.detail = why;
  publish(true);
  const tick = setInterval(() => publish(true), 1000);
  await new Promise((r) => setTimeout(r, delay));
  clearInterval(tick);
  reconnectAt = null;
  backingOff = false;
  view.detail = '';
  publish(true);
}

function onEvent(e: IslandEvent, healthy: () => void): void {
  switch (e.type) {
    case 'status': {
      runtimeStatus = e.status;
      if (e.status !== 'connecting' && e.status !== 'error' && e.status !== 'stopped') {
        view.connection = link?.connected() === false ? 'reconnecting' : 'connected';
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
      assignment = a;
      // losses are read back every few steps on a fast GPU (a readback drains the queue), about
      // every 250 ms; every step on a slow one. The first round reads every step.
      const p = runtime?.progress;
      const stepMs = p && p.tokensPerSec > 0 ? (1000 * a.batchSize * a.seqLen) / p.tokensPerSec : Infinity;
      roundLossEvery = Math.max(1, Math.min(32, Math.ceil(250 / stepMs)));
      if (runtimeOpts) runtimeOpts.lossEvery = roundLossEvery;
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
      globalStep += 1;
      if (view.round) view.round.step = e.step;
      view.lastLoss = e.loss;
      view.tokensPerSec = e.tokensPerSec;
      const a = assignment;
      if (a) view.tokensTrained += a.batchSize * a.seqLen;
      view.stepsDone = globalStep;
      if (e.step % roundLossEvery === 0 || e.step === e.of) {
        const point: LossPoint = {
          step: globalStep,
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
        if (assignment) refineCalibration(assignment);
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
      lastError = `${e.error.code}: ${e.error.message}`;
      if (e.error.code === ErrorCode.HASH_MISMATCH) view.hashMismatches += 1;
      log(e.error.code === 'E_DONE' ? 'info' : 'warn', lastError);
      if (e.error.code === 'E_TRANSPORT') view.connection = 'reconnecting';
      publish(true);
      break;
    }
  }
}

const capitalize = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);

// ---------------------------------------------------------------- pause / resume

function pause(reason: PauseReason): void {
  pauseReasons.add(reason);
  runtime?.pause();
  engine?.interruptRest();
  log('info', reason === 'hidden' ? 'Tab hidden: pausing after the current step.' : 'Pausing after the current step.');
  publish(true);
}

function resume(reason: PauseReason): void {
  if (!pauseReasons.delete(reason)) return;
  if (pauseReasons.size === 0) {
    runtime?.resume();
    log('info', 'Resumed.');
  }
  publish(true);
}

// ---------------------------------------------------------------- samples

const samplers = new SamplerEngines();

/** The page's 'sample' request (sampler.ts), with what it needs of this worker's state. */
function sample(m: Extract<ToWorker, { type: 'sample' }>): Promise<void> {
  return answerSample(samplers, m, {
    kind: opts?.engine ?? m.engine,
    training: () => engine,
    replica: runtime,
    modelUrl: () => new URL('/api/model', opts?.serverUrl ?? self.location.origin).href,
    fetchBytes,
    openOwn: (s) => openEngine('webgpu', s, false),
    post,
  });
}

// ---------------------------------------------------------------- messages

self.addEventListener('message', (ev: Event) => {
  const m = (ev as MessageEvent<ToWorker>).data;
  switch (m.type) {
    case 'probe':
      void probeGpu(m.shape).then((probe) => post({ type: 'probe', probe }));
      break;
    case 'start':
      if (opts) break;
      if (m.peers) peers = new RelayPeerNet(m.peers);
      void start(m.opts);
      break;
    case 'pause':
      pause(m.reason);
      break;
    case 'resume':
      resume(m.reason);
      break;
    case 'set-duty-cycle':
      if (engine) engine.dutyCycle = m.dutyCycle;
      if (opts) opts.dutyCycle = m.dutyCycle;
      log('info', `GPU usage cap set to ${Math.round(m.dutyCycle * 100)}%.`);
      publish(true);
      break;
    case 'set-display-name':
      if (!opts) break; // sent in the first hello
      opts.displayName = m.displayName;
      if (runtimeOpts?.caps) runtimeOpts.caps.name = islandName(opts);
      void link?.rename(islandName(opts));
      break;
    case 'sample':
      void sample(m);
      break;
    case 'debug-delays':
      Object.assign(delays, m.delays);
      if (engine) engine.extraStepMs = delays.stepMs;
      break;
    case 'debug-lose-device':
      if (engine?.kind === 'webgpu') {
        log('warn', 'Test hook: losing the GPU device on purpose.');
        engine.simulateLoss();
      }
      break;
  }
});
