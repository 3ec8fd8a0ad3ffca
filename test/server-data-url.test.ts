// `serve --data DIR --data-url URL`: the shards are also published at a static URL (a bucket or CDN;
// here @fastify/static on another origin, test/helpers/bucket.ts), and the islands fetch their ranges
// there by HTTP Range, not from the server. The index names the URL, the pages' CSP allows its origin,
// a Node island trains (its Δs accepted) while the server sends no shard byte, and the bucket answered
// only 206 ranges within what was assigned. A --data-url on a text, or not an http(s) URL, is refused.

import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataIndex, DataStatus } from '../core/api.ts';
import { type NodeIsland, startNodeIsland } from '../client/island/node.ts';
import { buildRunConfig } from '../server/run/config.ts';
import { type Bucket, startBucket } from './helpers/bucket.ts';
import { prepareMobyShards } from './helpers/shards.ts';
import { type TestServer, getJson, startTestServer, tempDir, waitFor } from './helpers/server.ts';

const root = tempDir('atoll-data-url-');
const shardsDir = join(root, 'shards');
const coordinator = { mode: 'async', innerSteps: 4, minInnerSteps: 4, maxInnerSteps: 4, dylu: false } as const;

describe('serve --data-url (ranges from a static bucket)', () => {
  let bucket: Bucket;
  let ts: TestServer;
  let island: NodeIsland | null = null;
  beforeAll(async () => {
    await prepareMobyShards(root, shardsDir);
    bucket = await startBucket(shardsDir);
    ts = await startTestServer({
      flags: { data: shardsDir, dataUrl: bucket.url, codec: 'int8' },
      file: { coordinator },
    });
  });
  afterAll(async () => {
    island?.stop();
    await island?.done;
    await ts?.close();
    await bucket?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('names the URL in the index and the CSP; the island fetches its ranges there, the server none', async () => {
    const index = await getJson<DataIndex>(`${ts.url}/api/data/index`);
    expect(index.url).toBe(bucket.url);
    const csp = (await fetch(`${ts.url}/api/status`)).headers.get('content-security-policy')!;
    expect(csp).toMatch(new RegExp(`connect-src [^;]*${new URL(bucket.url).origin.replace(/\./g, '\\.')}`));

    const ranges: number[] = [];
    let applied = 0;
    island = await startNodeIsland({
      server: ts.url,
      engine: 'cpu',
      calibrate: false,
      mix: false,
      name: 'bucketed',
      onEvent: (e) => {
        if (e.type === 'assignment' && e.assignment.data.range) ranges.push(e.assignment.data.range.length);
        if (e.type === 'submitted' && e.ack.status === 'applied') applied++;
      },
    });
    await waitFor('three applied Δs', () => applied >= 3, 60_000);
    island.stop();
    await island.done;
    const data = await getJson<DataStatus>(`${ts.url}/api/data`);
    expect(data.bytesServed).toBe(0); // no shard byte from the server
    expect(data.recent.length).toBeGreaterThanOrEqual(3);
    const gets = bucket.served;
    expect(gets.length).toBeGreaterThanOrEqual(3);
    for (const g of gets) expect(g.status, g.path).toBe(206);
    for (const g of gets) expect(index.shards.map((s) => `/shards/${s.name}`)).toContain(g.path);
    const fetched = gets.reduce((a, g) => a + g.bytes, 0);
    expect(fetched).toBeLessThanOrEqual(2 * ranges.reduce((a, n) => a + n, 0));
    expect(island.dataBytes!).toBeLessThanOrEqual(JSON.stringify(index).length + fetched + 64);
  });

  it('refuses a --data-url on a text, or one that is not an http(s) URL', async () => {
    const refused = (flags: Record<string, string>) =>
      startTestServer({ flags }).then(
        async (t) => {
          await t.close();
          return 'listened';
        },
        (e: Error & { code?: string }) => `${e.code} ${e.message}`,
      );
    expect(await refused({ data: 'moby-dick', dataUrl: bucket.url })).toMatch(/^E_BAD_CONFIG .*is a text, not shards/);
    expect(() => buildRunConfig(null, { data: shardsDir, dataUrl: 'ftp://example.com/shards' })).toThrow(
      /dataUrl must be an http\(s\) URL without a query, fragment or trailing \//,
    );
    expect(() => buildRunConfig(null, { data: shardsDir, dataUrl: 'https://cdn.example.com/shards/' })).toThrow(
      /dataUrl/,
    );
  });
});
