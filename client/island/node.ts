// A headless island in Node: the shared IslandRuntime with the socket.io transport and a CPU or
// WebGPU (Dawn) engine. `atoll island` runs it; tests and the bench run it in-process or as a child.

import { type Calibration, calibrate, calibrationKey } from './calibrate.ts';
import { IslandRuntime, type IslandEvent, type IslandRunSummary } from './runtime.ts';
import { type GPTConfig, numParams } from '../../core/model/config.ts';
import type { CpuEngineName } from '../../core/engine/cpu.ts';
import type { EngineKind } from '../../core/protocol.ts';
import { createEngine } from './engine/node-engines.ts';
import { SocketIoTransport } from './transport-socketio.ts';
import type { MixMemberStats } from './mix-member.ts';
import { mixingTransport } from './mix-socketio.ts';
import { type RtcPeerConstructor, type SignalPort, WebRtcPeerNet } from './mix-webrtc.ts';
import { backoff } from '../../core/random.ts';
import type { DataRange } from '../../core/server-messages.ts';
import { openRangeSource } from './range-fetch.ts';

export interface NodeIslandOptions {
  /** Server URL, or several gateways of one run comma-separated (failover between them). */
  server: string;
  engine: EngineKind | CpuEngineName;
  /** WebGPU: tune the matmuls at start (default true; `--no-autotune`). */
  autotune?: boolean;
  name?: string;
  /** WebGPU: storage precision (default f32). */
  precision?: 'f32' | 'f16';
  /** WebGPU: devices training data-parallel as this one island (default 1). */
  devices?: number;
  /** CPU (Wasm): threads of this process the step runs on (default 1). */
  threads?: number;
  /** Micro-batch each device runs (default: the run's); the island's batch is this × devices. */
  batch?: number;
  /** Fraction of time spent computing (default 1). */
  dutyCycle?: number;
  /**
   * Times a few real steps before joining, as the volunteer page does, so the server sizes even the
   * first round to the run's target round time (default true; `--no-calibrate`).
   */
  calibrate?: boolean;
  /** Give up after the server has been unreachable this long (default 10 min). */
  maxOutageMs?: number;
  /** Progress line on stderr: 'tty' rewrites one line, 'lines' prints one per round, 'none'. */
  progress?: 'tty' | 'lines' | 'none';
  /** Sees every runtime event (tests record acks here). */
  onEvent?: (e: IslandEvent, transport: SocketIoTransport) => void;
  /** Installs SIGINT/SIGTERM handlers: first stops cleanly, second exits (default false). */
  handleSignals?: boolean;
  /** Butterfly mixing over WebRTC (node-datachannel) when the server mixes (default true; `--no-mix`). */
  mix?: boolean;
}

export interface NodeIsland {
  runtime: IslandRuntime;
  /** The speed measured before joining (null with calibrate: false). */
  calibration: Calibration | null;
  transport: SocketIoTransport;
  done: Promise<IslandRunSummary>;
  /** Stops after the current step; an in-flight delta still gets its ack. */
  stop(): void;
  /** True once stop() or a signal asked the island to stop. */
  readonly stopRequested: boolean;
  /** What butterfly mixing did (null: `mix: false`). */
  mix: MixMemberStats | null;
  /** A shard run: its data bytes fetched (the index and its ranges); null: a corpus run. */
  readonly dataBytes: number | null;
}

interface RunInfoLite {
  model: GPTConfig;
  batch: number;
  seqLen: number;
  name: string;
  /** A shard run: its shard count (GET /api/data/index). */
  data?: { shards?: number };
}

export async function getJson(url: string): Promise<unknown> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`GET ${url} answered ${res.status}`);
  return res.json();
}

export async function getBytes(url: string): Promise<Uint8Array> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`GET ${url} answered ${res.status}`);
  return new Uint8Array(await res.arrayBuffer());
}

/** Retries `f` with backoff until it succeeds or `maxMs` have passed. */
async function retry<T>(what: string, maxMs: number, f: () => Promise<T>, say: (s: string) => void): Promise<T> {
  const t0 = Date.now();
  for (let attempt = 0; ; attempt++) {
    try {
      return await f();
    } catch (e) {
      if (Date.now() - t0 > maxMs)
        throw Object.assign(new Error(`${what}: ${(e as Error).message}`), { code: 'E_UNREACHABLE' });
      if (attempt === 0) say(`${what}: ${(e as Error).message}; retrying`);
      await new Promise((r) => setTimeout(r, backoff(attempt, 500, 10_000, 0.5)));
    }
  }
}

export async function startNodeIsland(o: NodeIslandOptions): Promise<NodeIsland> {
  // several gateways of one run, comma-separated: the first fetches try each in turn, the transport fails over
  const gateways = o.server
    .split(',')
    .map((u) => u.trim().replace(/\/+$/, ''))
    .filter(Boolean);
  let at = 0;
  const onGateway =
    <T>(f: (base: string) => Promise<T>) =>
    () =>
      f(gateways[at % gateways.length]).catch((e: unknown) => {
        at++;
        throw e;
      });
  const mode = o.progress ?? 'none';
  const say = (s: string) => {
    if (mode !== 'none') process.stderr.write(`${mode === 'tty' ? '\r\x1b[K' : ''}${s}\n`);
  };
  const maxOutageMs = o.maxOutageMs ?? 600_000;
  const info = (await retry(
    'cannot reach the server',
    maxOutageMs,
    onGateway((b) => getJson(`${b}/api/run`)),
    say,
  )) as RunInfoLite;
  // a shard run (serve --data DIR): the index, then each round's range only; else the whole train split
  const shards = info.data?.shards
    ? await retry('cannot reach the server', maxOutageMs, onGateway(openRangeSource), say)
    : null;
  const train = shards
    ? new Uint8Array(info.seqLen + 2) // calibration's steps time the engine only (lr 0)
    : await retry(
        'cannot download the training data',
        maxOutageMs,
        onGateway((b) => getBytes(`${b}/api/data/train`)),
        say,
      );
  const devices = o.devices ?? 1;
  const batch = (o.batch ?? info.batch ?? 8) * devices;
  const engine = await createEngine(
    o.engine,
    { config: info.model, maxBatch: batch },
    { autotune: o.autotune, precision: o.precision, devices, threads: o.threads },
  );
  const data = shards
    ? `${shards.index.shards.length} shards by range`
    : `${train.length.toLocaleString()} training bytes`;
  say(
    `atoll island: run '${info.name}', engine ${engine.kind} on ${engine.device}, ${engine.numerics ?? 'f32'}, batch ` +
      `${batch}, ${data}`,
  );
  // the speed at the duty cycle: what a round's wall time will see (calibrate leaves AdamW fresh)
  const duty = Math.min(1, Math.max(0.01, o.dutyCycle ?? 1));
  const shape = { config: info.model, maxBatch: batch, maxT: info.seqLen };
  const calibration =
    o.calibrate === false
      ? null
      : await calibrate(engine, train, shape, calibrationKey(engine.kind, engine.device, shape));
  if (calibration)
    say(
      `atoll island: measured ${Math.round(calibration.tokensPerSec).toLocaleString()} tokens/s (a step ` +
        `${(calibration.stepMs / 1000).toFixed(2)} s` +
        `${calibration.estimated ? ', estimated from batches 1 and 2' : ''}) ` +
        `in ${(calibration.ms / 1000).toFixed(1)} s`,
    );

  const transport = new SocketIoTransport({
    url: gateways.join(','),
    maxOutageMs,
    onConnection: (state, detail) => {
      if (state !== 'connected') say(`connection ${state}: ${detail}`);
    },
  });
  const stats: MixMemberStats = { mixed: 0, direct: 0, piecesOk: 0, piecesRefetched: 0 };
  let rtcUsed = false;
  const makeNet = async (signal: SignalPort) => {
    rtcUsed = true;
    const RTC = await webRtc(say);
    return RTC && new WebRtcPeerNet(RTC, signal, [], 15_000);
  };
  const runtime = new IslandRuntime({
    engine,
    train,
    ...(shards ? { fetchRange: (r: DataRange) => shards.fetch(r) } : {}),
    transport: o.mix === false ? transport : mixingTransport(transport, makeNet, numParams(info.model), stats),
    caps: {
      name: o.name,
      maxBatch: batch,
      batchSize: batch,
      ...(calibration ? { tokensPerSec: calibration.tokensPerSec * duty } : {}),
    },
    dutyCycle: o.dutyCycle,
    // a transport failure is only reported after a long outage: retry a few of those too
    maxRetries: 3,
    // pings answered while the CPU engine steps (a round on its thread outlived the ping timeout)
    yieldEveryMs: 100,
  });

  let lastLine = 0;
  let acked = 0;
  let rejected = 0;
  const line = (force = false) => {
    if (mode === 'none') return;
    const now = Date.now();
    if (!force && mode === 'tty' && now - lastLine < 200) return;
    if (!force && mode === 'lines') return;
    lastLine = now;
    const p = runtime.progress;
    const mb = (transport.stats.bytesSent / 1e6).toFixed(2);
    const text =
      `${p.islandId ?? '…'} | ${p.status} | round ${p.roundId ?? '-'} step ${p.step}/${p.of} | loss ` +
      `${Number.isFinite(p.loss) ? p.loss.toFixed(3) : '-'} | ${p.tokensPerSec.toFixed(0)} tok/s | v${p.version} | ` +
      `sent ${mb} MB | acks ${acked} ok, ${rejected} rejected`;
    process.stderr.write(mode === 'tty' ? `\r\x1b[K${text}` : `${text}\n`);
  };
  runtime.on((e) => {
    if (e.type === 'submitted') {
      if (e.ack.status === 'applied') acked++;
      else rejected++;
      line(true);
    } else if (e.type === 'step') line();
    else if (e.type === 'error') say(`island: ${e.error.code}: ${e.error.message}`);
    o.onEvent?.(e, transport);
  });

  let stops = 0;
  const onSignal = () => {
    stops++;
    if (stops === 1) {
      const p = runtime.progress;
      say(
        p.status === 'training'
          ? `stopping after this step: round ${p.roundId} is dropped unsent (${p.step} of ${p.of} steps done, ` +
              'its tokens not counted); Ctrl-C again to quit now'
          : 'stopping after this step (an in-flight delta still gets its ack); Ctrl-C again to quit now',
      );
      runtime.stop();
      // Waiting for a sync round to close holds no work: leave now instead of after the round.
      if (runtime.progress.status === 'waiting') void transport.close('stopped');
    } else {
      say('quitting now: the current round is abandoned (nothing acknowledged is lost)');
      process.exit(130);
    }
  };
  if (o.handleSignals) {
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  }
  const done = runtime.start().then((summary) => {
    if (o.handleSignals) {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    }
    line(true);
    if (mode === 'tty') process.stderr.write('\n');
    engine.destroy();
    if (rtcUsed) void webRtcDone();
    return summary;
  });
  return {
    runtime,
    transport,
    done,
    calibration,
    stop: () => {
      stops++;
      runtime.stop();
      if (runtime.progress.status === 'waiting') void transport.close('stopped');
    },
    get stopRequested() {
      return stops > 0;
    },
    mix: o.mix === false ? null : stats,
    get dataBytes() {
      return shards ? shards.bytes : null;
    },
  };
}

/** Islands of this process using node-datachannel (libdatachannel's threads keep a process alive until cleanup). */
let rtcIslands = 0;

/** An island done with WebRTC; the last one lets the process exit (node-datachannel's cleanup). */
async function webRtcDone(): Promise<void> {
  if (--rtcIslands > 0) return;
  try {
    (await import('node-datachannel')).cleanup();
  } catch {
    /* never loaded */
  }
}

/** node-datachannel's RTCPeerConnection (libdatachannel); null where its native part does not load: direct uploads. */
async function webRtc(say: (s: string) => void): Promise<RtcPeerConstructor | null> {
  rtcIslands++;
  try {
    const m = await import('node-datachannel/polyfill');
    // The first connection initializes libdatachannel (its certificate, its threads): done here, once,
    // because connections a group opens at once while it initializes were seen closing by themselves.
    const pc = new m.RTCPeerConnection({ iceServers: [] });
    pc.createDataChannel('warm-up');
    await pc.setLocalDescription(await pc.createOffer());
    await new Promise<void>((done) => {
      const t = setTimeout(done, 2000);
      const check = () => {
        if (pc.iceGatheringState === 'complete') {
          clearTimeout(t);
          done();
        }
      };
      pc.addEventListener('icegatheringstatechange', check);
      check();
    });
    pc.close();
    return m.RTCPeerConnection as unknown as RtcPeerConstructor;
  } catch (e) {
    say(`atoll island: no WebRTC (node-datachannel: ${(e as Error).message}): deltas go to the server directly`);
    return null;
  }
}
