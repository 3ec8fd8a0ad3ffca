// θ chunk by chunk (client/island/model-download.ts) against a real server's GET /api/model/manifest and
// ranges of GET /api/model: a download cut off halfway goes on from the chunks kept and fetches only the
// rest; a chunk that fails its CRC-32 is refused and not kept; a 412 (θ moved on) starts again from a new
// manifest, keeping what still belongs to it; a store holding another θ is emptied first. The bytes equal
// the whole file. IslandRuntime.seedReplica takes a θ only with its own hash.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelManifest } from '../core/api.ts';
import { initParams } from '../core/model/gpt.ts';
import { getPreset } from '../core/model/config.ts';
import { hashParams } from '../core/coord/hash.ts';
import { type ChunkStore, downloadModel } from '../client/island/model-download.ts';
import { IslandRuntime } from '../client/island/runtime.ts';
import { SocketIoTransport } from '../client/island/transport-socketio.ts';
import { createCpuEngine } from '../core/engine/cpu.ts';
import { type TestServer, startTestServer } from './helpers/server.ts';

const CHUNK = 4096;

/** A ChunkStore in memory, as the page's Cache API one behaves. */
function memoryStore(): ChunkStore & { chunks: Map<string, Uint8Array>; manifest: ModelManifest | null } {
  const chunks = new Map<string, Uint8Array>();
  return {
    chunks,
    manifest: null,
    async get(hash, i) {
      return chunks.get(`${hash}/${i}`) ?? null;
    },
    async put(hash, i, b) {
      chunks.set(`${hash}/${i}`, b.slice());
    },
    async begin(m) {
      for (const k of [...chunks.keys()]) if (!k.startsWith(`${m.hash}/`)) chunks.delete(k);
      this.manifest = m;
    },
  };
}

/** fetch, counting the θ chunks asked; `f` may answer a request instead (null: the real one). */
function countingFetch(f: (n: number, url: string) => Response | null = () => null) {
  const c = { manifests: 0, chunks: 0 };
  const fn = (async (input: string | URL | Request, init?: RequestInit) => {
    const url = String(input);
    if (url.endsWith('/api/model/manifest')) c.manifests++;
    else if (url.endsWith('/api/model')) {
      c.chunks++;
      const answer = f(c.chunks, url);
      if (answer) return answer;
    }
    return fetch(input, init);
  }) as typeof fetch;
  return { fn, c };
}

describe('θ downloaded in chunks', () => {
  let ts: TestServer;
  let whole: Uint8Array;
  let n: number;
  beforeAll(async () => {
    ts = await startTestServer({ file: { limits: { modelChunkBytes: CHUNK } } });
    whole = new Uint8Array(await (await fetch(`${ts.url}/api/model`)).arrayBuffer());
    n = Math.ceil(whole.length / CHUNK);
    expect(n).toBeGreaterThan(20);
  });
  afterAll(() => ts?.close());

  it('cut off halfway, goes on from the chunks kept and fetches only the rest', async () => {
    const store = memoryStore();
    const cut = countingFetch((k) => {
      if (k > 10) throw new TypeError('network error: the tab was closed');
      return null;
    });
    await expect(downloadModel(ts.url, cut.fn, store)).rejects.toThrow(/network error/);
    expect(store.chunks.size).toBe(10);
    const rest = countingFetch();
    const d = await downloadModel(ts.url, rest.fn, store);
    expect(rest.c).toEqual({ manifests: 1, chunks: n - 10 });
    expect(d.bytes).toEqual(whole);
    expect(d.reused).toBe(10 * CHUNK);
    expect(d.fetched).toBeGreaterThan(whole.length - 10 * CHUNK);
    expect(d.fetched).toBeLessThan(whole.length - 10 * CHUNK + 4096); // the chunks and the manifest
    // all kept: a third download fetches no chunk
    const again = countingFetch();
    expect((await downloadModel(ts.url, again.fn, store)).bytes).toEqual(whole);
    expect(again.c.chunks).toBe(0);
  });

  it('refuses a chunk that fails its CRC-32 and keeps none of it', async () => {
    const store = memoryStore();
    const bad = countingFetch((k) => (k === 3 ? new Response(new Uint8Array(CHUNK), { status: 206 }) : null));
    await expect(downloadModel(ts.url, bad.fn, store)).rejects.toThrow(/^E_MODEL_CHUNK: θ chunk 2 /);
    expect(store.chunks.size).toBe(2);
  });

  it('a 412 (θ moved on) starts again from a new manifest; a store of another θ is emptied first', async () => {
    const store = memoryStore();
    await store.put('another-theta', 0, new Uint8Array(8));
    const moved = countingFetch((k) => (k === 5 ? new Response('{}', { status: 412 }) : null));
    const d = await downloadModel(ts.url, moved.fn, store);
    expect(d.bytes).toEqual(whole);
    expect(moved.c.manifests).toBe(2);
    expect(moved.c.chunks).toBe(n + 1); // the 412 asked once more; the 4 before it kept (same θ here)
    expect(d.reused).toBe(4 * CHUNK);
    expect([...store.chunks.keys()].some((k) => k.startsWith('another-theta/'))).toBe(false);
    expect(store.manifest!.hash).toBe(d.manifest!.hash);
  });

  it('seedReplica takes a θ only with its own hash', async () => {
    const config = getPreset('tiny');
    const engine = await createCpuEngine('cpu', { config, maxBatch: 1, maxT: 8 });
    const transport = new SocketIoTransport({ url: ts.url });
    const rt = new IslandRuntime({
      engine,
      transport,
      train: new Uint8Array(64),
      caps: { engine: 'cpu' },
    });
    const params = initParams(config, 1);
    expect(rt.seedReplica(3, 'not-its-hash', params)).toBe(false);
    expect(rt.replicaState).toBeNull();
    expect(rt.seedReplica(3, hashParams(params), params)).toBe(true);
    expect(rt.replicaState).toEqual({ version: 3, hash: hashParams(params) });
    engine.destroy();
    await transport.close('done');
  });
});
