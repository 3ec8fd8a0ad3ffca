// `atoll island --server URL1,URL2`: two gateways in front of one run (here two fault proxies in
// front of one server). The gateway the island uses dies (refuses and resets every connection):
// the island fails over to the other, resumes the same identity there and goes on training.

import { afterAll, describe, expect, it } from 'vitest';
import { FaultProxy } from '../server/cluster/proxy.ts';
import { type IslandProc, type TestServer, getJson, spawnIsland, startTestServer, waitFor } from './helpers/server.ts';

describe('island failover between gateways', () => {
  let srv: TestServer | null = null;
  let island: IslandProc | null = null;
  const proxies: FaultProxy[] = [];

  afterAll(async () => {
    await island?.kill9();
    for (const p of proxies) await p.close();
    await srv?.close();
  });

  it('moves to the next gateway with its identity and keeps getting deltas applied', async () => {
    srv = await startTestServer({ flags: { innerSteps: 2 } });
    const port = Number(new URL(srv.url).port);
    const [a, b] = [new FaultProxy({ host: '127.0.0.1', port }), new FaultProxy({ host: '127.0.0.1', port })];
    proxies.push(a, b);
    const urls = [await a.listen(), await b.listen()];
    island = spawnIsland(urls.join(','), 'roamer');
    const applied = () => island!.report.acks.filter((x) => x.status === 'applied').length;
    await waitFor('an applied delta through gateway A', () => applied() >= 1, 90_000, 100);
    expect(b.stats.connections).toBe(0);
    const id = island.report.islandId;

    a.refuse = true; // gateway A dies
    a.dropAll();
    const before = applied();
    await waitFor('2 more applied deltas through gateway B', () => applied() >= before + 2, 90_000, 100);
    expect(b.stats.connections).toBeGreaterThan(0);
    expect(island.report.islandId).toBe(id);
    expect(island.report.resumes).toBeGreaterThan(0);
    const { islands } = await getJson<{ islands: Array<{ id: string }> }>(`${srv.url}/api/islands`);
    expect(islands.map((i) => i.id)).toEqual([id]);
  });
});
