// The delta that ends a run is acknowledged to its island, which counts it and ends with 'done': on a
// quiet connection, and when the connection drops while that ack is on its way (a server that held its
// event loop past the ping timeout while it made the version durable: docs/studies/fleet.md). Then the
// island reconnects, resumes its identity although the run is done, resends the delta and gets the
// ack recorded for its seq; its next assignment says E_DONE.

import { afterAll, describe, expect, it } from 'vitest';
import { startNodeIsland } from '../client/island/node.ts';
import { type TestServer, startTestServer } from './helpers/server.ts';

const servers: TestServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.close();
});

/** A tiny async run whose budget is one delta (2 steps × batch 2 × 16 tokens). */
async function oneDeltaRun(): Promise<TestServer> {
  const ts = await startTestServer({
    flags: { mode: 'async' },
    file: {
      coordinator: {
        ...{ batchSize: 2, seqLen: 16, innerSteps: 2, minInnerSteps: 2, maxInnerSteps: 2 },
        ...{ dylu: false, targetRoundMs: 0, totalTokens: 64 },
      },
    },
  });
  servers.push(ts);
  return ts;
}

async function runIsland(ts: TestServer, name: string) {
  const isl = await startNodeIsland({ server: ts.url, engine: 'cpu', calibrate: false, mix: false, name });
  return { isl, summary: await isl.done };
}

describe('the delta that ends the run', () => {
  it('is acknowledged: the island counts it and ends with done', async () => {
    const ts = await oneDeltaRun();
    const { summary } = await runIsland(ts, 'last');
    expect(summary.reason).toBe('done');
    expect(summary.progress.accepted).toBe(1);
    expect(ts.server.run.version).toBe(1);
  }, 60_000);

  it('is acknowledged when the connection drops before its ack arrives: the resend gets the recorded ack', async () => {
    const ts = await oneDeltaRun();
    const islands = ts.server.run.islands;
    const submit = islands.submit.bind(islands);
    let cut = 0;
    // the ack is made (the version is durable, the run is done), then the connection closes before it goes out
    islands.submit = async (meta, frame, mixed) => {
      const ack = await submit(meta, frame, mixed);
      if (ack.status === 'applied' && cut++ === 0)
        for (const s of ts.server.gateway.islands.sockets.values()) s.conn.close();
      return ack;
    };
    const { isl, summary } = await runIsland(ts, 'cut');
    expect(cut).toBe(2); // the delta, then its resend (answered from the record, not applied again)
    expect(isl.transport.stats.reconnects).toBeGreaterThanOrEqual(1);
    expect(summary.reason).toBe('done');
    expect(summary.progress.accepted).toBe(1);
    expect(summary.progress.rejected).toEqual({});
    expect(ts.server.run.version).toBe(1);
  }, 60_000);
});
