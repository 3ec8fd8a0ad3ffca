// A shard run's data for an island (`serve --data DIR`): the index once, then each round's token
// range by HTTP Range (from the server, or the static URL the index names), checked against the index
// before a step trains on it. A range's bytes cannot be held to the shard's SHA-256 (that covers the
// whole file): what is checked is the answer's
// status (206), its Content-Range (exactly the bytes asked, of the file size the index says), its
// length, and every id below the index's vocabulary.

import type { DataIndex } from '../../core/api.ts';
import type { DataRange } from '../../core/server-messages.ts';

export class RangeFetchError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

export interface RangeSource {
  index: DataIndex;
  /** The range's tokens, checked. */
  fetch(range: DataRange): Promise<Uint16Array>;
  /** Data bytes fetched so far: the index and every range. */
  readonly bytes: number;
}

/** The shard index of the run at `base`, or null for a corpus run (404 E_NOT_SHARD_RUN). */
export async function openRangeSource(base: string): Promise<RangeSource | null> {
  const res = await fetch(`${base}/api/data/index`);
  if (res.status === 404) return null;
  if (!res.ok) throw new RangeFetchError('E_TRANSPORT', `GET /api/data/index answered ${res.status}`);
  const text = await res.text();
  const index = JSON.parse(text) as DataIndex;
  let bytes = text.length;
  return {
    index,
    get bytes() {
      return bytes;
    },
    async fetch(r: DataRange): Promise<Uint16Array> {
      const e = trainShard(index, r);
      const start = e.headerBytes + 2 * r.offset,
        end = start + 2 * r.length - 1;
      // the operator's bucket or CDN (serve --data-url), else this server
      const from = index.url ? `${index.url}/` : `${base}/api/data/shards/`;
      const res = await fetch(`${from}${encodeURIComponent(e.name)}`, {
        headers: { range: `bytes=${start}-${end}` },
      });
      const body = new Uint8Array(await res.arrayBuffer());
      bytes += body.length;
      const want = `bytes ${start}-${end}/${e.bytes}`;
      if (res.status !== 206 || res.headers.get('content-range') !== want || body.length !== 2 * r.length)
        throw new RangeFetchError(
          'E_BAD_RANGE',
          `'${e.name}' ${want}: answered ${res.status}, ${res.headers.get('content-range')}, ${body.length} bytes`,
        );
      return decodeRange(index, r, body);
    },
  };
}

/** The index's entry for the range's shard: a train shard (not the held-out one) that holds the range. */
export function trainShard(index: DataIndex, r: DataRange): DataIndex['shards'][number] {
  const e = index.shards.find((s) => s.name === r.shard);
  if (!e || e.name === index.heldOut)
    throw new RangeFetchError('E_BAD_RANGE', `shard '${r.shard}' is not a train shard of the index`);
  if (!(r.offset >= 0 && r.length > 0 && r.offset + r.length <= e.tokens))
    throw new RangeFetchError('E_BAD_RANGE', `tokens ${r.offset}+${r.length} are past '${e.name}''s ${e.tokens}`);
  return e;
}

/** A range's bytes (2 a token, little-endian) as tokens, each id checked below the index's vocabulary. */
export function decodeRange(index: DataIndex, r: DataRange, body: Uint8Array): Uint16Array {
  if (body.length !== 2 * r.length)
    throw new RangeFetchError('E_BAD_RANGE', `'${r.shard}' ${r.offset}+${r.length}: ${body.length} bytes`);
  const v = new DataView(body.buffer, body.byteOffset, body.length);
  const out = new Uint16Array(r.length);
  for (let i = 0; i < r.length; i++) {
    out[i] = v.getUint16(2 * i, true);
    if (out[i] >= index.vocabSize)
      throw new RangeFetchError('E_BAD_RANGE', `'${r.shard}' token ${r.offset + i} is id ${out[i]}`);
  }
  return out;
}
