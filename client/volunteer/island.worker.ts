// The volunteer's island, in a dedicated module worker: WebGPU (or CPU) engine,
// socket.io transport and the shared IslandRuntime. The page sends commands
// (messages.ts) and renders the IslandView snapshots posted from here (worker-view.ts;
// the state they read in worker-state.ts, the runtime's events in worker-events.ts).
//
// Supervision: the runtime is restarted with exponential backoff whenever it stops
// on a transport error (server restart, network loss); a lost GPU device is
// rebuilt underneath it by ResilientEngine, without losing the round.

import { IslandRuntime } from '../island/index.ts';
import { backoff } from '../../core/random.ts';
import { numParams } from '../../core/model/config.ts';
import { connectTransport, delayedTransport } from './connect.ts';
import { RelayPeerNet } from '../island/mix-relay.ts';
import type { PauseReason, StartOptions, ToWorker } from './messages.ts';
import { initialView } from './messages.ts';
import { answerSample, SamplerEngines } from './sampler.ts';
import { cpuName, probeGpu } from './worker-gpu.ts';
import { ensureCalibration } from './worker-calibration.ts';
import { openEngine } from './worker-engine.ts';
import { onEvent } from './worker-events.ts';
import { log, post, state } from './worker-state.ts';
import { publish, stopWith } from './worker-view.ts';
import { openRangeSource } from '../island/range-fetch.ts';
import { cachedRangeSource } from './range-cache.ts';
import type { DataRange } from '../../core/server-messages.ts';
import { formatBytes } from '../ui/format.ts';
import { openThetaCache, replicaSaver, seedFromCache } from './theta-cache.ts';

const s = state;

// ---------------------------------------------------------------- data

async function fetchBytes(url: string, isData = false): Promise<Uint8Array> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`E_HTTP_${res.status}: GET ${url} answered ${res.status}`);
  const b = new Uint8Array(await res.arrayBuffer());
  if (isData) s.dataDown += b.byteLength;
  else s.extraDown += b.byteLength;
  return b;
}

/**
 * The training data: on a shard run (serve --data DIR) the index, then each round's range by HTTP Range
 * (cached in this browser); else the whole train split once. A corpus run is told by the run info, and
 * by a 404 on the index should the run have changed since the page loaded.
 */
async function openData(o: StartOptions): Promise<void> {
  const src = o.shardRun ? await openRangeSource(o.serverUrl) : null;
  if (!src) {
    s.train = await fetchBytes(new URL('/api/data/train', o.serverUrl).href, true);
    return;
  }
  s.ranges = await cachedRangeSource(src, o.serverUrl, log);
  // calibration's steps time the engine only (lr 0): a dummy sequence, as the Node island's
  s.train = new Uint8Array((o.shape.maxT ?? o.shape.config.blockSize) + 2);
  const cached = s.ranges.cache ? `, kept in this browser up to ${formatBytes(s.ranges.cache.capBytes)}` : '';
  log('info', `Training data: ${src.index.shards.length} shards; each round's range comes by HTTP Range${cached}.`);
}

// ---------------------------------------------------------------- the island

async function start(o: StartOptions): Promise<void> {
  s.opts = o;
  s.view = initialView(o.dutyCycle);
  s.view.engine = o.engine;
  publish(true);
  const t0 = performance.now();
  try {
    // a fixed ?precision=, or the choice saved with this device's calibration (checked against its key later)
    s.engine = await openEngine(
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
  s.engine.dutyCycle = o.dutyCycle;
  s.engine.extraStepMs = s.delays.stepMs;
  if (o.engine === 'webgpu') {
    // the sampler's engine is built now, not while training runs (building it compiles pipelines)
    await samplers.get('webgpu', o.shape, s.engine, (sh) => openEngine('webgpu', sh, false)).catch(() => {});
  }
  s.view.device = o.engine === 'cpu' ? cpuName() : s.engine.device;
  log(
    'info',
    `Engine ready: ${s.view.device} (${((performance.now() - t0) / 1000).toFixed(1)} s to set ` +
      `up${o.engine === 'webgpu' ? ', mostly compiling the GPU kernels' : ''}).`,
  );
  publish(true);
  void supervise(o);
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
      if (!s.train) await openData(o);
    } catch (e) {
      await waitToRetry(++failures, `Could not download the training data (${(e as Error).message}).`);
      continue;
    }
    const train = s.train!;
    const ranges = s.ranges;
    try {
      await ensureCalibration(o, train);
    } catch (e) {
      // the round is then sized from the first delta instead
      log('warn', `Could not measure this device’s speed (${(e as Error).message}).`);
    }
    s.view.connection = 'connecting';
    if (s.thetaCache === undefined) s.thetaCache = await openThetaCache(new URL(o.serverUrl).origin, log);
    const link = connectTransport(
      o.serverUrl,
      {
        onConnection: (c) => {
          s.view.connection = c;
          publish(true);
        },
        log,
      },
      { peers: s.peers, paramCount: numParams(o.shape.config), stats: s.mixStats },
      s.thetaCache ?? undefined,
    );
    s.link = link;
    s.runtimeOpts = {
      engine: s.engine!,
      train,
      ...(ranges ? { fetchRange: (r: DataRange) => ranges.fetch(r) } : {}),
      transport: delayedTransport(link.transport, () => s.delays),
      caps: {
        name: islandName(o),
        contributorId: o.contributorId.replace(/[^A-Za-z0-9_-]/g, '').slice(0, 64),
        maxBatch: o.shape.maxBatch,
        // the speed at the usage cap: what a round's wall time will see
        ...(s.calibration ? { tokensPerSec: s.calibration.tokensPerSec * s.engine!.effectiveDutyCycle } : {}),
      },
      // the usage cap is applied by the engine wrapper, at every step (see ResilientEngine.dutyCycle)
      dutyCycle: 1,
      lossEvery: 1,
      // a restarted runtime counts its sequence numbers from 1 again, so it joins as a new island
      resumeIslandId: undefined,
    };
    const rt = new IslandRuntime(s.runtimeOpts);
    s.runtime = rt;
    if (s.thetaCache) {
      const st = await fetch(new URL('/api/status', o.serverUrl))
        .then((r) => (r.ok ? (r.json() as Promise<{ version: number; hash: string }>) : null))
        .catch(() => null);
      await seedFromCache(s.thetaCache, (v, h, p) => rt.seedReplica(v, h, p), st, log);
      const save = replicaSaver(s.thetaCache, () => {
        const rep = rt.replicaState;
        const params = rt.replicaParams();
        return rep && params && { ...rep, params };
      });
      rt.on((e) => e.type === 'synced' && save(e.via));
    }
    const off = rt.on((e) =>
      onEvent(e, () => {
        failures = 0;
      }),
    );
    if (s.pauseReasons.size > 0) rt.pause();
    const summary = await rt.start();
    off();
    s.carried.bytesUp += rt.progress.bytesUp;
    s.carried.bytesDown += rt.progress.bytesDown;
    s.runtime = null;
    s.link = null;
    if (summary.reason === 'done') {
      s.view.connection = 'offline';
      log('info', 'The server says the run is done.');
      stopWith('The run has reached its goal: thank you! There is nothing left to train.');
      return;
    }
    if (summary.reason === 'stopped') return;
    if (/E_DEVICE_LOST|E_NO_ADAPTER|E_NO_WEBGPU/.test(s.lastError)) {
      s.deviceRecovering = false;
      stopWith(
        `The GPU is not usable any more (${s.lastError}). Reload the page to try again, or contribute with the CPU.`,
      );
      return;
    }
    await waitToRetry(++failures, `The island stopped (${summary.reason}: ${s.lastError || 'no detail'}).`);
  }
}

async function waitToRetry(failures: number, why: string): Promise<void> {
  const delay = backoff(failures - 1, 1000, 30_000, 0.2);
  log('warn', `${why} Reconnecting in ${Math.round(delay / 1000)} s.`);
  s.view.connection = 'reconnecting';
  s.reconnectAt = performance.now() + delay;
  s.backingOff = true;
  s.view.detail = why;
  publish(true);
  const tick = setInterval(() => publish(true), 1000);
  await new Promise((r) => setTimeout(r, delay));
  clearInterval(tick);
  s.reconnectAt = null;
  s.backingOff = false;
  s.view.detail = '';
  publish(true);
}

// ---------------------------------------------------------------- pause / resume

function pause(reason: PauseReason): void {
  s.pauseReasons.add(reason);
  s.runtime?.pause();
  s.engine?.interruptRest();
  log('info', reason === 'hidden' ? 'Tab hidden: pausing after the current step.' : 'Pausing after the current step.');
  publish(true);
}

function resume(reason: PauseReason): void {
  if (!s.pauseReasons.delete(reason)) return;
  if (s.pauseReasons.size === 0) {
    s.runtime?.resume();
    log('info', 'Resumed.');
  }
  publish(true);
}

// ---------------------------------------------------------------- samples

const samplers = new SamplerEngines();

/** The page's 'sample' request (sampler.ts), with what it needs of this worker's state. */
function sample(m: Extract<ToWorker, { type: 'sample' }>): Promise<void> {
  return answerSample(samplers, m, {
    kind: s.opts?.engine ?? m.engine,
    training: () => s.engine,
    replica: s.runtime,
    modelUrl: () => new URL('/api/model', s.opts?.serverUrl ?? self.location.origin).href,
    fetchBytes,
    openOwn: (sh) => openEngine('webgpu', sh, false),
    post,
  });
}

/** Test hook: one range through the round's source, with the network bytes it cost. */
async function debugFetchRange(id: number, range: DataRange): Promise<void> {
  const src = s.ranges;
  if (!src) return post({ type: 'debug-range', id, ok: false, message: 'E_NOT_SHARD_RUN: no range source' });
  const bytesBefore = src.bytes;
  try {
    const tokens = await src.fetch(range);
    post({ type: 'debug-range', id, ok: true, tokens, bytesBefore, bytesAfter: src.bytes });
  } catch (e) {
    post({ type: 'debug-range', id, ok: false, message: (e as Error).message });
  }
  publish(true);
}

// ---------------------------------------------------------------- messages

self.addEventListener('message', (ev: Event) => {
  const m = (ev as MessageEvent<ToWorker>).data;
  switch (m.type) {
    case 'probe':
      void probeGpu(m.shape).then((probe) => post({ type: 'probe', probe }));
      break;
    case 'start':
      if (s.opts) break;
      if (m.peers) s.peers = new RelayPeerNet(m.peers);
      void start(m.opts);
      break;
    case 'pause':
      pause(m.reason);
      break;
    case 'resume':
      resume(m.reason);
      break;
    case 'set-duty-cycle':
      if (s.engine) s.engine.dutyCycle = m.dutyCycle;
      if (s.opts) s.opts.dutyCycle = m.dutyCycle;
      log('info', `GPU usage cap set to ${Math.round(m.dutyCycle * 100)}%.`);
      publish(true);
      break;
    case 'set-display-name':
      if (!s.opts) break; // sent in the first hello
      s.opts.displayName = m.displayName;
      if (s.runtimeOpts?.caps) s.runtimeOpts.caps.name = islandName(s.opts);
      void s.link?.rename(islandName(s.opts));
      break;
    case 'sample':
      void sample(m);
      break;
    case 'debug-delays':
      Object.assign(s.delays, m.delays);
      if (s.engine) s.engine.extraStepMs = s.delays.stepMs;
      // the simulated busy GPU is free again: end the back-off's rest (3× the slow steps' time) now
      if (m.delays.stepMs === 0) s.engine?.interruptRest();
      break;
    case 'debug-fetch-range':
      void debugFetchRange(m.id, m.range);
      break;
    case 'debug-lose-device':
      if (s.engine?.kind === 'webgpu') {
        log('warn', 'Test hook: losing the GPU device on purpose.');
        s.engine.simulateLoss();
      }
      break;
  }
});
