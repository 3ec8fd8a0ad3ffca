// The page's θ in the Cache API, two ways:
//   - the download's chunks as they arrive (client/island/model-download.ts checks each against the
//     manifest's CRC-32 first): a reload halfway goes on from the chunks kept;
//   - the island's replica (version, hash, θ), saved when a download completes and, as updates come,
//     at most every REPLICA_SAVE_MS_PER_MB of θ (2 s at least): a returning volunteer starts from it and
//     fetches only the updates since (the whole θ again only if the server no longer keeps them).
// One θ of each is kept, up to THETA_CACHE_CAP_BYTES; "Forget the saved model" on the page clears both.
// Without the Cache API (an insecure context) nothing is kept, said once in the log.

import type { ModelManifest } from '../../core/api.ts';
import type { ChunkStore } from '../island/model-download.ts';

/** GPT-2 small's θ in f32 is 498 MB: it fits, with room. */
export const THETA_CACHE_CAP_BYTES = 1 << 30;
/** After an update the replica is saved again at most every this many ms per MB of θ (2 s at least). */
export const REPLICA_SAVE_MS_PER_MB = 10_000;
const CACHE_NAME = 'atoll-theta-v1';

type Log = (level: 'info' | 'warn', text: string) => void;

export interface SavedReplica {
  version: number;
  hash: string;
  params: Float32Array;
}

export interface ThetaCache extends ChunkStore {
  saveReplica(r: SavedReplica): Promise<void>;
  savedReplica(): Promise<SavedReplica | null>;
  clear(): Promise<void>;
}

const keyOf = (origin: string, what: string) => `${origin}/__atoll/theta/${what}`;

/** The cache of `origin` (keys are URLs there), or null where the Cache API is missing. */
export async function openThetaCache(
  origin: string,
  log: Log,
  capBytes = THETA_CACHE_CAP_BYTES,
): Promise<ThetaCache | null> {
  let cache: Cache;
  try {
    cache = await caches.open(CACHE_NAME);
  } catch (e) {
    log('warn', `E_THETA_CACHE: no Cache API here (${(e as Error).message}): the model is downloaded each visit.`);
    return null;
  }
  const key = (what: string) => keyOf(origin, what);
  let skip = false; // a θ above the cap is not kept
  const dropChunks = async () => {
    for (const req of await cache.keys()) if (req.url.startsWith(key('chunks/'))) await cache.delete(req);
  };
  return {
    async get(hash, i) {
      const r = await cache.match(key(`chunks/${hash}/${i}`));
      return r ? new Uint8Array(await r.arrayBuffer()) : null;
    },
    async put(hash, i, bytes) {
      // the downloader hands over a chunk it keeps no more: stored as it is
      if (!skip) await cache.put(key(`chunks/${hash}/${i}`), new Response(bytes as Uint8Array<ArrayBuffer>));
    },
    async begin(m) {
      skip = m.bytes > capBytes;
      if (skip) log('info', `The model (${m.bytes} bytes) is above this page's cache cap: it is not kept.`);
      const old = await manifestIn(cache, origin);
      if (old?.hash === m.hash && !skip) return;
      await dropChunks();
      if (!skip) await cache.put(key('manifest'), new Response(JSON.stringify(m)));
    },
    async saveReplica(r) {
      if (r.params.byteLength > capBytes) return;
      const headers = {
        'x-atoll-version': String(r.version),
        'x-atoll-hash': r.hash,
        'x-atoll-bytes': String(r.params.byteLength),
      };
      await cache.put(key('replica'), new Response(r.params as Float32Array<ArrayBuffer>, { headers }));
      // a whole θ is kept: the download's chunks are of no more use
      await dropChunks();
      await cache.delete(key('manifest'));
    },
    async savedReplica() {
      const r = await cache.match(key('replica'));
      if (!r) return null;
      const version = Number(r.headers.get('x-atoll-version'));
      const hash = r.headers.get('x-atoll-hash') ?? '';
      return { version, hash, params: new Float32Array(await r.arrayBuffer()) };
    },
    async clear() {
      for (const req of await cache.keys()) await cache.delete(req);
    },
  };
}

async function manifestIn(cache: Cache, origin: string): Promise<ModelManifest | null> {
  const r = await cache.match(keyOf(origin, 'manifest'));
  return r ? ((await r.json()) as ModelManifest) : null;
}

/** What the page shows before Start: a saved replica's version and size, or a download's chunks kept. */
export type SavedModel =
  | { kind: 'replica'; version: number; bytes: number }
  | { kind: 'partial'; version: number; chunks: number; of: number };

export async function savedModel(origin: string): Promise<SavedModel | null> {
  if (typeof caches === 'undefined' || !(await caches.has(CACHE_NAME))) return null;
  const cache = await caches.open(CACHE_NAME);
  const rep = await cache.match(keyOf(origin, 'replica'));
  if (rep) {
    // its size from a header: the page reads no θ to say how large it is
    const bytes = Number(rep.headers.get('x-atoll-bytes'));
    return { kind: 'replica', version: Number(rep.headers.get('x-atoll-version')), bytes };
  }
  const m = await manifestIn(cache, origin).catch(() => null);
  if (!m) return null;
  const mine = keyOf(origin, `chunks/${m.hash}/`);
  const chunks = (await cache.keys()).filter((r) => r.url.startsWith(mine)).length;
  return { kind: 'partial', version: m.version, chunks, of: m.crc32.length };
}

/** The page's "Forget the saved model". */
export async function forgetSavedModel(): Promise<void> {
  if (typeof caches !== 'undefined') await caches.delete(CACHE_NAME);
}

/**
 * The saved replica as the island's starting θ, said in the log. It must be of the server's line: not past
 * its version, its hash at the same version (older: each update's hash checks it). False: not seeded.
 */
export async function seedFromCache(
  cache: ThetaCache,
  seed: (version: number, hash: string, params: Float32Array) => boolean,
  server: { version: number; hash: string } | null,
  log: Log,
): Promise<boolean> {
  const r = await cache.savedReplica().catch(() => null);
  if (!r || !server) return false;
  const other = r.version > server.version || (r.version === server.version && r.hash !== server.hash);
  if (other || !seed(r.version, r.hash, r.params)) {
    await cache.clear();
    log('warn', 'The model kept in this browser did not check out: it was dropped and is downloaded again.');
    return false;
  }
  log('info', `Starting from model v${r.version} kept in this browser: only the updates since are fetched.`);
  return true;
}

/** Saves the replica after a sync: at once after a download, else at most every REPLICA_SAVE_MS_PER_MB per MB. */
export function replicaSaver(cache: ThetaCache, replica: () => SavedReplica | null): (via: string) => void {
  // from now: a θ seeded from this cache is not written back at once (a download is, whatever the time)
  let last = performance.now();
  let busy = false;
  let size = 0;
  return (via) => {
    const now = performance.now();
    const every = Math.max(2000, (REPLICA_SAVE_MS_PER_MB * size) / 1e6);
    if (busy || (via !== 'snapshot' && now - last < every)) return;
    const r = replica();
    if (!r) return;
    size = r.params.byteLength;
    busy = true;
    last = now;
    void cache
      .saveReplica(r)
      .catch(() => {})
      .finally(() => {
        busy = false;
      });
  };
}
