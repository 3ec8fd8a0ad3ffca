// The delta stream between gateways and the aggregator.
//
//   gateway     append(island, seq, meta, frame): one script, idempotent by island+seq. The islands
//               hash keeps each island's latest `seq|state`; a seq already seen is a duplicate
//               (its state tells whether it is pending, durable in version N, or rejected) and
//               an older one is stale. Only a new seq is XADDed.
//   aggregator  readPending / readNew (fenced XREADGROUP, one consumer name shared by every
//               aggregator, so a standby that takes over finds its predecessor's unsettled
//               deltas in the pending list and applies them again from the last checkpoint);
//               settle (fenced: XACK + XDEL the settled entries, record their state, optionally
//               the new durable version, and PUBLISH it all on the durable channel in one step).
//               publishUpdate (fenced PUBLISH of an update broadcast).

import type { Redis } from 'ioredis';
import { FENCE_CHECK } from './lease.ts';
import type { RunKeys } from './keys.ts';

const APPEND = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local s, st = string.match(cur, '^(%d+)|(.*)$')
  local have, want = tonumber(s), tonumber(ARGV[2])
  if have == want then return {'duplicate', st} end
  if have > want then return {'stale', s} end
end
local id = redis.call('XADD', KEYS[2], '*', 'island', ARGV[1], 'seq', ARGV[2], 'meta', ARGV[3], 'frame', ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. '|p')
return {'appended', id}`;

// KEYS: fence deltas; ARGV: token group id-cursor count
const READ =
  FENCE_CHECK +
  `
local r = redis.call('XREADGROUP', 'GROUP', ARGV[2], 'aggregator', 'COUNT', ARGV[4], 'STREAMS', KEYS[2], ARGV[3])
if r and r[1] and #r[1][2] > 0 then return {r[1][2], ''} end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
return {{}, (last[1] and last[1][1]) or '0-0'}`;

// KEYS: fence deltas islands durable; ARGV: token group durable-value('' = none) channel message n,
// then n × (id island seq state)
const SETTLE =
  FENCE_CHECK +
  `
local n = tonumber(ARGV[6])
for i = 0, n - 1 do
  local o = 7 + 4 * i
  redis.call('XACK', KEYS[2], ARGV[2], ARGV[o])
  redis.call('XDEL', KEYS[2], ARGV[o])
  local cur = redis.call('HGET', KEYS[3], ARGV[o + 1])
  if cur and string.match(cur, '^(%d+)|') == ARGV[o + 2] then
    redis.call('HSET', KEYS[3], ARGV[o + 1], ARGV[o + 2] .. '|' .. ARGV[o + 3])
  end
end
if ARGV[3] ~= '' then redis.call('SET', KEYS[4], ARGV[3]) end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return n`;

// KEYS: fence; ARGV: token channel payload
const PUBLISH =
  FENCE_CHECK +
  `
return redis.call('PUBLISH', ARGV[2], ARGV[3])`;

export type AppendResult =
  | { kind: 'appended'; id: string }
  /** Seen before: state p (pending), v:N (durable in version N) or r:CODE (rejected). */
  | { kind: 'duplicate'; state: string }
  | { kind: 'stale'; latestSeq: number };

/** Gateway side: appends validated deltas. */
export async function appendDelta(
  redis: Redis,
  keys: RunKeys,
  island: string,
  seq: number,
  meta: string,
  frame: Uint8Array,
): Promise<AppendResult> {
  const r = (await redis.call(
    'EVAL',
    APPEND,
    2,
    keys.islands,
    keys.deltas,
    island,
    seq,
    meta,
    Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength),
  )) as [string, string];
  if (r[0] === 'appended') return { kind: 'appended', id: r[1] };
  if (r[0] === 'duplicate') return { kind: 'duplicate', state: r[1] };
  return { kind: 'stale', latestSeq: Number(r[1]) };
}

export interface StreamDelta {
  id: string;
  island: string;
  seq: number;
  meta: string;
  frame: Uint8Array;
}

/** How a delta ended: `v:N` (in durable version N) or `r:CODE` (rejected). */
export interface Settled {
  id: string;
  island: string;
  seq: number;
  state: string;
}

/** What the durable channel carries. */
export interface SettleMessage {
  token: number;
  version?: number;
  hash?: string;
  settled: Array<[island: string, seq: number, state: string]>;
}

/**
 * Aggregator side: fenced reads, settles and publishes. Every method fails with E_FENCED once `token` is not the
 * latest.
 */
export class DeltaConsumer {
  private lastId = '0-0';
  private readonly blocker: Redis;

  constructor(
    private readonly redis: Redis,
    private readonly keys: RunKeys,
  ) {
    this.blocker = redis.duplicate();
    this.blocker.on('error', () => {});
  }

  /** Creates the stream and its consumer group if missing. */
  async ensureGroup(): Promise<void> {
    try {
      await this.redis.xgroup('CREATE', this.keys.deltas, this.keys.group, '0', 'MKSTREAM');
    } catch (e) {
      if (!/BUSYGROUP/.test((e as Error).message)) throw e;
    }
  }

  private async read(token: number, cursor: string, count: number): Promise<StreamDelta[]> {
    const r = (await this.redis.callBuffer(
      'EVAL',
      READ,
      2,
      this.keys.fence,
      this.keys.deltas,
      token,
      this.keys.group,
      cursor,
      count,
    )) as [Array<[Buffer, Buffer[]]>, Buffer];
    if (r[0].length === 0) {
      this.lastId = r[1].toString() || this.lastId;
      return [];
    }
    const out: StreamDelta[] = [];
    for (const [id, fields] of r[0]) {
      const f = new Map<string, Buffer>();
      for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i].toString(), fields[i + 1]);
      const frame = f.get('frame') ?? Buffer.alloc(0);
      out.push({
        id: id.toString(),
        island: String(f.get('island')),
        seq: Number(String(f.get('seq'))),
        meta: String(f.get('meta')),
        frame: new Uint8Array(frame.buffer, frame.byteOffset, frame.byteLength),
      });
    }
    if (cursor === '>') this.lastId = out[out.length - 1].id;
    return out;
  }

  /** Deltas delivered to an aggregator but never settled (a predecessor's, after a takeover), oldest first. */
  async readPending(token: number, count = 1000): Promise<StreamDelta[]> {
    const all: StreamDelta[] = [];
    let cursor = '0-0';
    for (;;) {
      const page = await this.read(token, cursor, count);
      if (page.length === 0) return all;
      all.push(...page);
      cursor = page[page.length - 1].id;
    }
  }

  /** New deltas; when there are none, waits up to `blockMs` for one to arrive (then returns what came). */
  async readNew(token: number, count: number, blockMs: number): Promise<StreamDelta[]> {
    const now = await this.read(token, '>', count);
    if (now.length > 0 || blockMs <= 0) return now;
    await this.blocker.xread('COUNT', 1, 'BLOCK', blockMs, 'STREAMS', this.keys.deltas, this.lastId);
    return this.read(token, '>', count);
  }

  /** Settles deltas (and makes `durable` the durable version, when given) in one fenced step, then announces it. */
  async settle(token: number, settled: Settled[], durable?: { version: number; hash: string }): Promise<void> {
    const msg: SettleMessage = { token, ...(durable ?? {}), settled: settled.map((s) => [s.island, s.seq, s.state]) };
    const args: Array<string | number> = [
      token,
      this.keys.group,
      durable ? `${durable.version}|${durable.hash}|${token}` : '',
      this.keys.durableChannel,
      JSON.stringify(msg),
      settled.length,
    ];
    for (const s of settled) args.push(s.id, s.island, s.seq, s.state);
    await this.redis.call(
      'EVAL',
      SETTLE,
      4,
      this.keys.fence,
      this.keys.deltas,
      this.keys.islands,
      this.keys.durable,
      ...args,
    );
  }

  /** Broadcasts an update to every gateway (fenced). */
  async publishUpdate(token: number, payload: Uint8Array): Promise<void> {
    await this.redis.call(
      'EVAL',
      PUBLISH,
      1,
      this.keys.fence,
      token,
      this.keys.updateChannel,
      Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength),
    );
  }

  close(): void {
    this.blocker.disconnect();
  }
}

/** The latest durable version recorded in Redis, or null before the first. */
export async function readDurable(
  redis: Redis,
  keys: RunKeys,
): Promise<{ version: number; hash: string; token: number } | null> {
  const v = await redis.get(keys.durable);
  if (!v) return null;
  const [version, hash, token] = v.split('|');
  return { version: Number(version), hash, token: Number(token) };
}
