// Butterfly mixing with volunteer pages in the group: the embedded server with --mix-group 4, two
// headless Chromium pages (the real page, its island in a Web Worker on the CPU engine, its peer
// connections on the main thread: the native RTCPeerConnection, relayed to the worker) and two Node
// islands (node-datachannel) form groups over real data channels on loopback: page ↔ page and
// page ↔ Node links. The pages' Δs go up as fragments and are applied; every island's θ hash, the
// pages' too, agrees with the server's at every update it applied; the loss goes down; every
// applied token is counted once. The gateway's wire counters hold more than the frames.

import { afterAll, describe, expect, it } from 'vitest';
import type { IslandEvent } from '../client/island/runtime.ts';
import type { RunStatus } from '../core/api.ts';
import { startNodeIsland } from '../client/island/node.ts';
import { byLabel } from '../instruments/fleet/traffic.ts';
import { ensureClientBuild, launchChromium, type LaunchedBrowser } from './helpers/browser.ts';
import { type TestServer, getJson, startTestServer, waitFor } from './helpers/server.ts';
import { openVolunteerPage, pageLog, pageView, type PageView } from './helpers/volunteer-page.ts';

const ROUND_TOKENS = 10 * 8 * 32; // tiny: 10 inner steps × batch 8 × seqLen 32
const BUDGET = 12 * ROUND_TOKENS;

type MixView = PageView & { hashChecks: number; hashMismatches: number; roundsMixed: number; roundsDirect: number };
interface Trained {
  synced: Array<{ version: number; hash: string }>;
  appliedTokens: number;
  rejected: string[];
  id: string;
  mixed: number;
}

let server: TestServer | null = null;
const browsers: LaunchedBrowser[] = [];
afterAll(async () => {
  for (const b of browsers) await b.close();
  await server?.close();
});

describe('butterfly mixing with a page (Chromium RTCPeerConnection ↔ node-datachannel)', () => {
  it("two pages and two Node islands mix over data channels: the pages' fragments are applied, θ agrees, loss falls", async () => {
    ensureClientBuild();
    server = await startTestServer({
      flags: { mode: 'async', codec: 'sparse', innerSteps: 10 },
      file: { coordinator: { totalTokens: BUDGET } },
      evaluate: true,
      mix: { k: 4 },
      pages: true,
    });
    // localhost: the page is a secure context; the page serves from the real client build
    const url = server.url.replace('127.0.0.1', 'localhost');
    await Promise.all(
      [0, 1].map(async () => {
        const b = await launchChromium({ webgpu: false });
        browsers.push(b);
        await openVolunteerPage(b, `${url}/`);
        await b.page.locator('#use-cpu').check();
        await b.page.click('#start');
      }),
    );
    // the Node islands start once the pages train, so the four are ready together from the pages' second round on
    await waitFor(
      "the pages' first rounds",
      async () => {
        const vs = await Promise.all(browsers.map((b) => pageView(b)));
        for (const v of vs) if (v.phase === 'error') throw new Error(`page error: ${JSON.stringify(v)}`);
        return vs.every((v) => v.round !== null);
      },
      30_000,
      100,
    );
    const nodes = await Promise.all(
      Array.from({ length: 2 }, async (_, i) => {
        const t: Trained = { synced: [], appliedTokens: 0, rejected: [], id: '', mixed: 0 };
        const isl = await startNodeIsland({
          server: server!.url,
          engine: 'cpu',
          calibrate: false,
          name: `node-${i}`,
          onEvent: (e: IslandEvent) => {
            if (e.type === 'synced') t.synced.push({ version: e.version, hash: e.hash });
            if (e.type !== 'submitted') return;
            t.id = e.meta.islandId;
            if (e.ack.status === 'applied') t.appliedTokens += e.meta.tokens;
            else t.rejected.push(e.ack.error?.code ?? '?');
          },
        });
        await isl.done;
        t.mixed = isl.mix?.mixed ?? 0;
        return t;
      }),
    );
    const st = await getJson<RunStatus>(`${server.url}/api/status`);
    expect(st.done).toBe(true);
    // the run is done once its last update is durable; a page counts its tokens when that ack reaches it
    type Rows = { islands: Array<{ id: string; tokens: number }> };
    server.server.run.views.invalidate(); // /api/islands may serve a copy from before the last update
    const rows = await getJson<Rows>(`${server.url}/api/islands`);
    let views: MixView[] = [];
    await waitFor(
      "the pages' last acks",
      async () => {
        views = (await Promise.all(browsers.map((b) => pageView(b)))) as MixView[];
        return views.every((v) => rows.islands.find((r) => r.id === v.islandId)?.tokens === v.tokensContributed);
      },
      15_000,
      100,
    ).catch(() => undefined); // the assertions below say which page differs
    const c = server.server.mix!.counters;
    console.log(
      `mix-page: ${c.mixedGroups}/${c.groups} groups mixed, ${c.fallbacks} fell back, ${c.expired} waits expired, pairs signalled ${c.linksSignalled}, reused ${c.linksReused}, lost ${c.linksLost}; pages mixed ${views.map((v) => v.roundsMixed).join('/')} direct ${views.map((v) => v.roundsDirect).join('/')} accepted ${views.map((v) => v.roundsAccepted).join('/')}, hash checks ${views.map((v) => v.hashChecks).join('/')}; Node islands mixed ${nodes.map((n) => n.mixed).join('/')}; signalling ${c.controlBytes} B`,
    );
    for (const [i, v] of views.entries())
      if (v.roundsMixed === 0) console.log((await pageLog(browsers[i])).slice(-20).join('\n'));
    expect(c.mixedGroups).toBeGreaterThanOrEqual(1);
    // signalling paid once per pair (6 pairs among 4 islands), again only for a pair reported lost
    expect(c.linksSignalled).toBeLessThanOrEqual(6 + c.linksLost);
    const hashes = new Map<number, string>();
    for (const e of server.server.run.store.readEvents() as Array<{ type: string; version?: number; hash?: string }>) {
      if ((e.type === 'update' || e.type === 'start') && e.version !== undefined && e.hash)
        hashes.set(e.version, e.hash);
    }
    for (const n of nodes)
      for (const s of n.synced) expect(s.hash, `${n.id} at v${s.version}`).toBe(hashes.get(s.version));
    for (const n of nodes) {
      expect(n.rejected.filter((code) => code !== 'E_DONE')).toEqual([]);
      expect(rows.islands.find((r) => r.id === n.id)?.tokens).toBe(n.appliedTokens);
    }
    for (const v of views) {
      // each page mixed: its Δ went up as fragments of a group's mean and was applied
      expect(v.roundsMixed).toBeGreaterThanOrEqual(1);
      // θ: every update the page applied had the server's hash
      expect(v.hashChecks).toBeGreaterThan(0);
      expect(v.hashMismatches).toBe(0);
      // every applied token counted once: the server's tokens are the islands' applied work, the pages' included
      expect(rows.islands.find((r) => r.id === v.islandId)?.tokens).toBe(v.tokensContributed);
    }
    expect(
      nodes.reduce(
        (t, n) => t + n.appliedTokens,
        views.reduce((t, v) => t + v.tokensContributed, 0),
      ),
    ).toBe(st.tokensTotal);
    // the gateway's wire counters: the frames plus the JSON, signalling and pings around them
    const metrics = await fetch(`${server.url}/metrics`).then((r) => r.text());
    const wire = (dir: string) => byLabel(metrics, `atoll_wire_bytes_${dir}_total`);
    const total = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);
    expect(total(wire('in'))).toBeGreaterThan(st.bytesIn);
    // by message: the fragments (binary attachments count with their event), and the pieces of the updates
    expect(wire('in')['mix:fragment']).toBeGreaterThan(0);
    expect(wire('out')['mix:piece']).toBeGreaterThan(0);
    expect(wire('out')['ack:nextAssignment']).toBeGreaterThan(0);
    // frames sent by kind: θ to each joining island, and update pieces to the rings
    const sent = byLabel(metrics, 'atoll_bytes_out_total');
    expect(sent.model).toBeGreaterThanOrEqual(4 * 4 * server!.server.run.paramCount);
    expect(sent.piece).toBeGreaterThan(0);
    // loss goes down
    const points = (await waitFor(
      'the last eval',
      async () => {
        const { points: p } = await getJson<{ points: Array<{ evalLoss: number | null }> }>(
          `${server!.url}/api/history`,
        );
        return p.at(-1)?.evalLoss != null ? p : null;
      },
      30_000,
      200,
    )) as Array<{ evalLoss: number | null }>;
    const first = points.find((p) => p.evalLoss !== null)!;
    expect(points.at(-1)!.evalLoss!).toBeLessThan(first.evalLoss! - 0.05);
  }, 90_000);
});
