// `atoll island`: a headless island joining a server, until the run is done or Ctrl-C.

import { startNodeIsland } from '../../client/island/node.ts';
import type { CpuEngineName } from '../../core/engine/cpu.ts';
import type { EngineKind } from '../../core/protocol.ts';

export interface IslandCliOptions {
  server: string;
  engine: EngineKind | CpuEngineName;
  autotune?: boolean;
  precision?: 'f32' | 'f16';
  devices?: number;
  /** CPU (Wasm): threads the step runs on. */
  threads?: number;
  /** Time a few steps before joining (default true; `--no-calibrate`). */
  calibrate?: boolean;
  name?: string;
  batch?: number;
  duty?: number;
  json?: boolean;
  /** Audit other islands' work instead of training (needs the run's validator token). */
  validator?: boolean;
  validatorToken?: string;
  /** Butterfly mixing over WebRTC when the server mixes (default true; `--no-mix`). */
  mix?: boolean;
}

export async function island(o: IslandCliOptions): Promise<number> {
  if (o.validator) return validator(o);
  const isl = await startNodeIsland({
    server: o.server,
    engine: o.engine,
    autotune: o.autotune,
    precision: o.precision,
    devices: o.devices,
    threads: o.threads,
    calibrate: o.calibrate,
    name: o.name,
    batch: o.batch,
    dutyCycle: o.duty,
    progress: o.json ? 'none' : process.stderr.isTTY ? 'tty' : 'lines',
    handleSignals: true,
    mix: o.mix,
  });
  const s = await isl.done;
  const p = s.progress;
  if (o.json) {
    process.stdout.write(
      JSON.stringify({
        islandId: s.islandId,
        reason: s.reason,
        rounds: p.rounds,
        tokens: p.tokens,
        accepted: p.accepted,
        rejected: p.rejected,
        version: p.version,
        bytesSent: isl.transport.stats.bytesSent,
        bytesReceived: isl.transport.stats.bytesReceived,
        mix: isl.mix,
      }) + '\n',
    );
  } else {
    process.stderr.write(
      `atoll island: ${s.reason} after ${p.rounds} rounds (${p.accepted} applied), ` +
        `${p.tokens.toLocaleString()} tokens, at version ${p.version}\n`,
    );
  }
  return s.reason === 'stopped' || s.reason === 'done' || isl.stopRequested ? 0 : 1;
}

/** `--validator`: audits until Ctrl-C; exit 1 when the server refuses the token or the link fails. */
async function validator(o: IslandCliOptions): Promise<number> {
  const token = o.validatorToken ?? process.env.ATOLL_VALIDATOR_TOKEN?.trim();
  if (!token) {
    process.stderr.write(
      "atoll island --validator: give the run's validator token (--validator-token or $ATOLL_VALIDATOR_TOKEN)\n",
    );
    return 1;
  }
  const { startNodeValidator } = await import('../../client/island/node-validator.ts');
  const say = (s: string) => process.stderr.write(s + '\n');
  const v = await startNodeValidator({ server: o.server, token, engine: o.engine, say: o.json ? undefined : say });
  let stopping = false;
  const onSignal = () => {
    if (stopping) process.exit(1);
    stopping = true;
    v.stop();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const r = await v.done;
  if (o.json) process.stdout.write(JSON.stringify(r.ok ? { verdicts: r.value } : { error: r.error }) + '\n');
  else
    say(
      r.ok
        ? `atoll island --validator: stopped after ${r.value} verdicts`
        : `atoll island --validator: ${r.error.code}: ${r.error.message}`,
    );
  return r.ok ? 0 : 1;
}
