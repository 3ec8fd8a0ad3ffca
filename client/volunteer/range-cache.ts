// A page's cache of the token ranges it fetched on a shard run (`serve --data DIR`), in the Cache API:
// a range trained again (a later epoch, a reload, a round retried) costs no network bytes. At most
// RANGE_CACHE_CAP_BYTES are kept; the oldest ranges go first beyond it. A cached range is checked as
// a fetched one is (its length, every id below the vocabulary: range-fetch.ts decodeRange), and a
// range that fails the check is dropped and fetched again. Without the Cache API (an insecure
// context, a browser that refuses storage) every range comes from the network, and the log says so.

import type { DataRange } from '../../core/server-messages.ts';
import { decodeRange, type RangeSource, trainShard } from '../island/range-fetch.ts';
import type { LogLevel, RangeCacheStats } from './messages.ts';

/** The most bytes of ranges this browser keeps (the page's cost card states it). */
export const RANGE_CACHE_CAP_BYTES = 64 * 1024 * 1024;
/** Bumped when what an entry holds changes. */
const CACHE_NAME = 'atoll-ranges-v1';
/** Cache keys are URLs on the page's origin under this path; nothing is ever fetched from them. */
const KEY_PATH = '/atoll-range-cache/';

export interface CachedRangeSource extends RangeSource {
  /** Null: no Cache API here, every range comes from the network. */
  readonly cache: RangeCacheStats | null;
}

type Log = (level: LogLevel, text: string) => void;

/** The key of a range: shard name, the shard's checksum from the index (its size without one), offset, length. */
export function rangeKey(base: string, src: RangeSource, r: DataRange): string {
  const e = trainShard(src.index, r);
  const sum = e.sha256 ?? `${e.bytes}-bytes`;
  return new URL(`${KEY_PATH}${encodeURIComponent(e.name)}/${sum}/${r.offset}+${r.length}`, base).href;
}

/** A key's bytes: 2 a token of its length. */
const keyBytes = (url: string) => 2 * Number(/\+(\d+)$/.exec(url)?.[1] ?? 0);

/** `src` behind the Cache API of `base`'s origin (no cache where it is unavailable, said in the log). */
export async function cachedRangeSource(
  src: RangeSource,
  base: string,
  log: Log,
  capBytes = RANGE_CACHE_CAP_BYTES,
  cacheName = CACHE_NAME,
): Promise<CachedRangeSource> {
  const cache = await openCache(cacheName, log);
  if (!cache)
    return {
      index: src.index,
      cache: null,
      get bytes() {
        return src.bytes;
      },
      fetch: (r) => src.fetch(r),
    };
  const stats: RangeCacheStats = { capBytes, hits: 0, misses: 0, storedBytes: 0 };
  let storeFailed = false;
  return {
    index: src.index,
    cache: stats,
    get bytes() {
      return src.bytes;
    },
    async fetch(r: DataRange): Promise<Uint16Array> {
      const key = rangeKey(base, src, r);
      const hit = await cache.match(key).catch(() => undefined);
      if (hit) {
        try {
          const tokens = decodeRange(src.index, r, new Uint8Array(await hit.arrayBuffer()));
          stats.hits++;
          return tokens;
        } catch (e) {
          log('warn', `A cached training range failed its check (${(e as Error).message}): fetching it again.`);
          await cache.delete(key).catch(() => false);
        }
      }
      const tokens = await src.fetch(r);
      try {
        await store(cache, key, tokens, capBytes, stats);
      } catch (e) {
        // the range still trains; only the next visit pays for it again
        if (!storeFailed)
          log('warn', `E_RANGE_CACHE: could not keep a training range in this browser (${(e as Error).message}).`);
        storeFailed = true;
      }
      stats.misses++;
      return tokens;
    },
  };
}

async function openCache(name: string, log: Log): Promise<Cache | null> {
  const why = 'each round’s training range comes from the server, none is kept in this browser';
  if (typeof caches === 'undefined') {
    log('warn', `E_RANGE_CACHE: this browser offers no Cache API here (not a secure context?): ${why}.`);
    return null;
  }
  try {
    return await caches.open(name);
  } catch (e) {
    log('warn', `E_RANGE_CACHE: the Cache API refused to open (${(e as Error).message}): ${why}.`);
    return null;
  }
}

/** Stores the range (2 bytes a token, little-endian), then evicts the oldest entries beyond the cap. */
async function store(cache: Cache, key: string, tokens: Uint16Array, capBytes: number, stats: RangeCacheStats) {
  if (2 * tokens.length > capBytes) return;
  const body = new Uint8Array(2 * tokens.length);
  const v = new DataView(body.buffer);
  for (let i = 0; i < tokens.length; i++) v.setUint16(2 * i, tokens[i], true);
  await cache.put(key, new Response(body, { headers: { 'content-type': 'application/octet-stream' } }));
  // keys() lists entries in the order they were put (the Cache API's request-response list): oldest first
  const keys = await cache.keys();
  let total = keys.reduce((a, k) => a + keyBytes(k.url), 0);
  for (const k of keys) {
    if (total <= capBytes) break;
    if (await cache.delete(k)) total -= keyBytes(k.url);
  }
  stats.storedBytes = total;
}
