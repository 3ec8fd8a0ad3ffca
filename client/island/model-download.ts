// θ downloaded chunk by chunk: GET /api/model/manifest (the file's size, its chunks and a CRC-32 each),
// then each chunk by Range with `If-Match: "<hash>"`, checked against its CRC-32 and kept in a
// ChunkStore as it arrives. A download that stops (a reload, a lost connection) goes on from the
// chunks kept; a page keeps the whole file across visits (client/volunteer/theta-cache.ts). A version
// that moves on mid-download (412 E_MODEL_MOVED) starts again from a new manifest: chunks of two
// versions never mix. A server without the manifest (404) is read whole.

import type { ModelManifest } from '../../core/api.ts';
import { crc32 } from '../../core/codec/crc32.ts';

/** Where θ's chunks are kept, by θ's hash and chunk index. */
export interface ChunkStore {
  get(hash: string, index: number): Promise<Uint8Array | null>;
  put(hash: string, index: number, bytes: Uint8Array): Promise<void>;
  /** A download of `m` begins: the chunks of every other θ go (one θ is kept), and its manifest is kept. */
  begin(m: ModelManifest): Promise<void>;
}

export interface ModelDownload {
  /** θ's safetensors file. */
  bytes: Uint8Array;
  /** Bytes fetched over the network (the manifest included), and bytes taken from the store. */
  fetched: number;
  reused: number;
  /** Null: the server has no manifest and the file came whole. */
  manifest: ModelManifest | null;
}

export class ModelDownloadError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

/** At most this many manifests a download starts from (θ moving on each time: the run is faster than the link). */
const MAX_RESTARTS = 8;

export async function downloadModel(
  base: string,
  fetchFn: typeof fetch,
  store: ChunkStore | null,
): Promise<ModelDownload> {
  let fetched = 0;
  for (let restart = 0; restart < MAX_RESTARTS; restart++) {
    const res = await fetchFn(`${base}/api/model/manifest`, { cache: 'no-store' });
    if (res.status === 404) return whole(base, fetchFn);
    if (!res.ok) throw new ModelDownloadError('E_TRANSPORT', `GET /api/model/manifest answered ${res.status}`);
    const text = await res.text();
    fetched += text.length;
    const m = JSON.parse(text) as ModelManifest;
    await store?.begin(m);
    const out = new Uint8Array(m.bytes);
    let reused = 0;
    let moved = false;
    for (let i = 0; i < m.crc32.length && !moved; i++) {
      const start = i * m.chunkBytes;
      const end = Math.min(m.bytes, start + m.chunkBytes);
      const kept = await store?.get(m.hash, i);
      if (kept && kept.length === end - start && crc32(kept) === m.crc32[i]) {
        out.set(kept, start);
        reused += kept.length;
        continue;
      }
      const r = await fetchFn(`${base}/api/model`, {
        cache: 'no-store',
        headers: { range: `bytes=${start}-${end - 1}`, 'if-match': `"${m.hash}"` },
      });
      if (r.status === 412) {
        moved = true; // θ moved on: a new manifest
        await r.arrayBuffer().catch(() => null);
        break;
      }
      const chunk = new Uint8Array(await r.arrayBuffer());
      fetched += chunk.length;
      if (r.status !== 206 || chunk.length !== end - start || crc32(chunk) !== m.crc32[i])
        throw new ModelDownloadError(
          'E_MODEL_CHUNK',
          `θ chunk ${i} (bytes ${start}-${end - 1}): answered ${r.status}, ${chunk.length} bytes, ` +
            'not the manifest’s CRC-32',
        );
      out.set(chunk, start);
      await store?.put(m.hash, i, chunk);
    }
    if (!moved) return { bytes: out, fetched, reused, manifest: m };
  }
  throw new ModelDownloadError('E_MODEL_MOVED', `θ moved on during ${MAX_RESTARTS} downloads in a row`);
}

async function whole(base: string, fetchFn: typeof fetch): Promise<ModelDownload> {
  const res = await fetchFn(`${base}/api/model`, { cache: 'no-store' });
  if (!res.ok) throw new ModelDownloadError('E_TRANSPORT', `GET /api/model answered ${res.status}`);
  const bytes = new Uint8Array(await res.arrayBuffer());
  return { bytes, fetched: bytes.length, reused: 0, manifest: null };
}
