// `atoll serve --mode async --codec sparse` end to end: two Node islands send sparse frames
// (SPARSE_UPLINK: half of each chunk strided, 1-bit values) over socket.io, the merge window applies them, and each
// delta costs a small fraction of an int8 one on the wire.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { frameBytes } from '../core/codec/index.ts';
import { SPARSE_UPLINK } from '../core/coord/index.ts';
import { type IslandProc, type TestServer, getJson, spawnIsland, startTestServer, waitFor } from './helpers/server.ts';

interface Status {
  version: number;
  accepted: number;
  bytesIn: number;
  rejected: Record<string, number>;
}

describe('async server with sparse deltas', () => {
  let ts: TestServer;
  const islands: IslandProc[] = [];

  beforeAll(async () => {
    ts = await startTestServer({
      flags: { mode: 'async', codec: 'sparse' },
      file: { coordinator: { innerSteps: 4, minInnerSteps: 2, maxInnerSteps: 4 } },
    });
    for (const name of ['north', 'south']) islands.push(spawnIsland(ts.url, name));
  });

  afterAll(async () => {
    await Promise.all(islands.map((i) => i.kill9()));
    await ts?.close();
  });

  it('applies sparse frames, and each costs under a fifth of an int8 frame', async () => {
    const s = (await waitFor(
      '3 accepted sparse deltas',
      async () => {
        const st = await getJson<Status>(`${ts.url}/api/status`);
        return st.accepted >= 3 ? st : null;
      },
      90_000,
      250,
    )) as Status;
    const run = await getJson<{ codec: { encoding: string }; params: number }>(`${ts.url}/api/run`);
    expect(run.codec).toMatchObject(SPARSE_UPLINK); // --codec sparse: the measured setting (strided, 1-bit values)
    expect(s.version).toBeGreaterThanOrEqual(1);
    const int8 = frameBytes(run.params, { encoding: 'int8', blockSize: 64 });
    // bytesIn counts every delta received (accepted or not) plus its metadata
    const received = s.accepted + Object.values(s.rejected).reduce((a, b) => a + b, 0);
    expect(s.bytesIn / received).toBeLessThan(int8 / 5);
  });
});
