// `atoll island`: a headless island joining a server, until the run is done or Ctrl-C.

import { startNodeIsland } from '../island-node.ts';
import type { EngineKind } from '../../core/protocol.ts';

export interface IslandCliOptions {
  server: string;
  engine: EngineKind;
  autotune?: boolean;
  name?: string;
  batch?: number;
  duty?: number;
  json?: boolean;
}

export async function island(o: IslandCliOptions): Promise<number> {
  const isl = await startNodeIsland({
    server: o.server,
    engine: o.engine,
    autotune: o.autotune,
    name: o.name,
    batch: o.batch,
    dutyCycle: o.duty,
    progress: o.json ? 'none' : process.stderr.isTTY ? 'tty' : 'lines',
    handleSignals: true,
  });
  const s = await isl.done;
  const p = s.progress;
  if (o.json) {
    process.stdout.write(JSON.stringify({ islandId: s.islandId, reason: s.reason, rounds: p.rounds, tokens: p.tokens, accepted: p.accepted, rejected: p.rejected, version: p.version, bytesSent: isl.transport.stats.bytesSent, bytesReceived: isl.transport.stats.bytesReceived }) + '\n');
  } else {
    process.stderr.write(`atoll island: ${s.reason} after ${p.rounds} rounds (${p.accepted} applied), ${p.tokens.toLocaleString()} tokens, at version ${p.version}\n`);
  }
  return s.reason === 'stopped' || s.reason === 'done' || isl.stopRequested ? 0 : 1;
}
