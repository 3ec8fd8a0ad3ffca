// One Node island of `atoll fleet`, as its own process: the headless island (client/island/node.ts)
// reporting on stdout, one JSON line per event, what the fleet needs for its report and its twin:
//
//   {"kind":"assignment","island":"…","t":ms}                                  a round began
//   {"kind":"step","counters":{…}}                                                a step
//   {"kind":"submitted","island":"…","seq":n,"status":"applied","code":null,"tokens":n,"t":ms,"counters":{…}}
//   {"kind":"exit","counters":{…}}
//
// counters (ChildCounters, the fields of the fleet's LiveIsland they set): bytesUp, bytesDown,
// reconnects; hashChecks (updates applied to the island's replica whose θ hash matched the
// server's) and hashMismatches (updates that did not: the island refetched θ); stepSpeed (the
// runtime's tokens/s over the last round's steps, at its duty); roundsMixed (deltas that went up
// mixed in a group); dataBytes (the index and ranges fetched) and rangeBytes (2 × its assigned ranges'
// tokens); and:
// stepTokens: every step's tokens (work lost to a kill included up to the last line).
// computeMs/computeTokens: the time between consecutive steps of one round and the tokens of those
// steps (duty-cycle sleeps and CPU contention included, the round's download and upload not): the
// speed the twin gives this island. `t` is ms since the process's start time given on the command line.
//
//   node --import bin/register.js instruments/fleet/island-child.ts <json options>

import { type EngineKind, ErrorCode } from '../../core/protocol.ts';
import type { ChildCounters, ChildLine } from './types.ts';
import { startNodeIsland } from '../../client/island/node.ts';

export interface IslandChildOptions {
  server: string;
  name: string;
  engine: EngineKind;
  precision?: 'f32' | 'f16';
  devices?: number;
  batch?: number;
  duty?: number;
  /** Date.now() of the fleet's start: `t` in every line counts from here. */
  t0: number;
}

async function main(o: IslandChildOptions): Promise<void> {
  const out = (m: ChildLine) => process.stdout.write(JSON.stringify(m) + '\n');
  let computeMs = 0,
    computeTokens = 0,
    stepTokens = 0;
  let lastStep = { round: -1, step: -1, at: 0 };
  let round = -1,
    tokensPerStep = 0,
    hashChecks = 0,
    hashMismatches = 0,
    stepSpeed = 0,
    rangeBytes = 0;
  let exitStats = null as (() => ChildCounters) | null;
  let mixed = () => 0;
  let dataBytes = () => 0;
  const isl = await startNodeIsland({
    server: o.server,
    engine: o.engine,
    precision: o.precision,
    devices: o.devices,
    name: o.name,
    batch: o.batch,
    dutyCycle: o.duty,
    progress: 'none',
    maxOutageMs: 120_000,
    handleSignals: true,
    onEvent: (e, transport) => {
      const now = performance.now();
      const stats = (): ChildCounters => ({
        bytesUp: transport.stats.bytesSent,
        bytesDown: transport.stats.bytesReceived,
        computeMs: Math.round(computeMs),
        computeTokens,
        stepTokens,
        reconnects: transport.stats.reconnects,
        hashChecks,
        hashMismatches,
        stepSpeed,
        roundsMixed: mixed(),
        dataBytes: dataBytes(),
        rangeBytes,
      });
      if (e.type === 'synced' && e.via === 'update') hashChecks++;
      else if (e.type === 'error' && e.error.code === ErrorCode.HASH_MISMATCH) hashMismatches++;
      if (e.type === 'assignment') {
        round = e.assignment.roundId;
        tokensPerStep = e.assignment.batchSize * e.assignment.seqLen;
        rangeBytes += 2 * (e.assignment.data.range?.length ?? 0);
        out({ kind: 'assignment', island: e.assignment.islandId, t: Date.now() - o.t0 });
      } else if (e.type === 'step') {
        stepTokens += tokensPerStep;
        // the runtime's figure over the round's steps, at its duty (a 1-step round has no pair to time)
        stepSpeed = e.tokensPerSec * Math.min(1, o.duty ?? 1);
        if (lastStep.round === round && e.step === lastStep.step + 1) {
          computeMs += now - lastStep.at;
          computeTokens += tokensPerStep;
        }
        lastStep = { round, step: e.step, at: now };
        out({ kind: 'step', counters: stats() });
      } else if (e.type === 'submitted') {
        out({
          kind: 'submitted',
          island: e.meta.islandId,
          seq: e.meta.seq,
          status: e.ack.status,
          code: e.ack.error?.code ?? null,
          tokens: e.meta.tokens,
          t: Date.now() - o.t0,
          counters: stats(),
        });
      }
      exitStats = stats;
    },
  });
  mixed = () => isl.mix?.mixed ?? 0;
  dataBytes = () => isl.dataBytes ?? 0;
  await isl.done;
  if (exitStats) out({ kind: 'exit', counters: exitStats() });
  process.exit(0);
}

void main(JSON.parse(process.argv[2]) as IslandChildOptions).catch((e: unknown) => {
  process.stderr.write(`fleet island: ${(e as Error).stack ?? String(e)}\n`);
  process.exit(1);
});
