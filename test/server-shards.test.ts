// `serve --data DIR` on byte-tokenized shards (`atoll data prepare --tokenizer byte`): a real server
// in-process and two Node islands in-process (CPU engine, tiny model). Each island fetches the index
// and only its assigned ranges (HTTP Range); the server's range ledger (GET /api/data) trains no
// range twice in an epoch and covers the epoch; a stopped island's range is trained by the other;
// the eval loss on the held-out shard falls. The shard route answers 206 and 416; a bad shard is
// refused before the server listens.

import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataIndex, DataStatus } from '../core/api.ts';
import type { Assignment } from '../core/protocol.ts';
import type { DataRange } from '../core/server-messages.ts';
import { type NodeIsland, startNodeIsland } from '../client/island/node.ts';
import { startNodeValidator } from '../client/island/node-validator.ts';
import { openRangeSource } from '../client/island/range-fetch.ts';
import { IslandRuntime } from '../client/island/runtime.ts';
import { SocketIoTransport } from '../client/island/transport-socketio.ts';
import { JsEngine } from '../core/engine/js.ts';
import { PRESETS } from '../core/model/config.ts';
import type { Result } from '../core/result.ts';
import { prepare } from '../instruments/commands/data-prepare.ts';
import { prepareMobyShards } from './helpers/shards.ts';
import { type TestServer, getJson, sleep, spawnIsland, startTestServer, tempDir, waitFor } from './helpers/server.ts';

const root = tempDir('atoll-shards-');
const shardsDir = join(root, 'shards');
const B = 8,
  T = 32,
  UNIT = B * (T + 1);

const coordinator = { mode: 'async', innerSteps: 4, minInnerSteps: 4, maxInnerSteps: 4, dylu: false } as const;
const serveShards = (data: string, evaluate = false, dir?: string) =>
  startTestServer({
    flags: { data, codec: 'int8' },
    evaluate,
    dir,
    file: {
      eval: { batches: 4, batchSize: 8 },
      coordinator: { ...coordinator, innerLr: { maxLr: 3e-3, minLr: 1e-3 } },
    },
  });

beforeAll(async () => {
  await prepareMobyShards(root, shardsDir);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

const overlaps = (a: { shard: string; offset: number; length: number }, b: typeof a) =>
  a.shard === b.shard && a.offset < b.offset + b.length && b.offset < a.offset + a.length;

describe('serve --data DIR (token shards, ranges by HTTP Range)', () => {
  let ts: TestServer;
  const islands: NodeIsland[] = [];
  const assigned: Map<string, DataRange>[] = [new Map(), new Map()];

  beforeAll(async () => {
    ts = await serveShards(shardsDir, true);
  });
  afterAll(async () => {
    for (const i of islands) i.stop();
    await Promise.allSettled(islands.map((i) => i.done));
    await ts?.close();
  });

  it('publishes the index and serves ranges: 206 with Content-Range, 416 past the end, only indexed names', async () => {
    const index = await getJson<DataIndex>(`${ts.url}/api/data/index`);
    expect(index.tokenizer).toBe('byte');
    const s = index.shards.find((x) => x.name !== index.heldOut)!;
    expect(s.headerBytes).toBe(1024);
    const r = await fetch(`${ts.url}/api/data/shards/${s.name}`, { headers: { range: 'bytes=1024-1033' } });
    expect(r.status).toBe(206);
    expect(r.headers.get('content-range')).toBe(`bytes 1024-1033/${s.bytes}`);
    expect((await r.arrayBuffer()).byteLength).toBe(10);
    const past = await fetch(`${ts.url}/api/data/shards/${s.name}`, { headers: { range: `bytes=${s.bytes}-` } });
    expect(past.status).toBe(416);
    expect(past.headers.get('content-range')).toBe(`bytes */${s.bytes}`);
    expect(((await past.json()) as { error: { code: string } }).error.code).toBe('E_RANGE_NOT_SATISFIABLE');
    const other = await fetch(`${ts.url}/api/data/shards/index.json`);
    expect(other.status).toBe(404);
    expect((await fetch(`${ts.url}/api/data/train`)).status).toBe(404);
  });

  it('two islands fetch only their ranges; no range trained twice in an epoch; a stopped island’s range is retrained', async () => {
    const indexBytes = (await (await fetch(`${ts.url}/api/data/index`)).text()).length;
    let stoppedRange: DataRange | null = null;
    let noRange = 0;
    let stoppedId = '';
    for (const [k, name] of ['one', 'two'].entries()) {
      const isl: NodeIsland = await startNodeIsland({
        server: ts.url,
        engine: 'cpu',
        calibrate: false,
        mix: false,
        name,
        onEvent: (e) => {
          if (e.type !== 'assignment') return;
          const a: Assignment = e.assignment;
          if (!a.data.range) noRange++;
          else assigned[k].set(`${a.roundId}`, a.data.range);
          // island two stops inside its third round: that range goes back to the pool
          if (k === 1 && assigned[1].size === 3) {
            stoppedRange = a.data.range!;
            stoppedId = a.islandId;
            isl.stop();
          }
        },
      });
      islands.push(isl);
    }
    const data: DataStatus = await waitFor<DataStatus>(
      'an epoch trained, and the stopped range retrained',
      async () => {
        const d = await getJson<DataStatus>(`${ts.url}/api/data`);
        const retrained = stoppedRange && d.recent.some((r) => r.islandId !== stoppedId && overlaps(r, stoppedRange!));
        return (d.epochsDone >= 1 && retrained ? d : null) as DataStatus;
      },
      90_000,
    );
    for (const i of islands) i.stop();
    await Promise.all(islands.map((i) => i.done));
    expect(noRange).toBe(0);
    // every island fetched at most its assigned ranges plus the index
    for (const [k, isl] of islands.entries()) {
      const ranges = [...assigned[k].values()].reduce((a, r) => a + 2 * r.length, 0);
      expect(isl.dataBytes).toBeGreaterThan(indexBytes);
      expect(isl.dataBytes!).toBeLessThanOrEqual(indexBytes + ranges);
    }
    // the server's record: within an epoch no two trained ranges overlap, and epoch 0 covers the train tokens
    expect(data.recent.length).toBeLessThan(256);
    for (const [i, a] of data.recent.entries())
      for (const b of data.recent.slice(i + 1)) if (a.epoch === b.epoch) expect(overlaps(a, b)).toBe(false);
    const epoch0 = data.recent.filter((r) => r.epoch === 0).reduce((a, r) => a + r.length, 0);
    if (data.epochsDone === 1) expect(epoch0 + data.skipped).toBe(data.trainTokens);
    expect(data.skipped).toBeLessThan(data.shards.length * UNIT);
    expect(data.shards.reduce((a, s) => a + s.trained, 0)).toBe(data.recent.reduce((a, r) => a + r.length, 0));
    // the eval loss on the held-out shard falls
    const pts = await waitFor<{ evalLoss: number | null }[]>(
      'evals',
      async () => {
        const h = await getJson<{ points: { evalLoss: number | null }[] }>(`${ts.url}/api/history`);
        const e = h.points.filter((p) => p.evalLoss !== null);
        return (e.length >= 3 ? e : null) as typeof e;
      },
      60_000,
    );
    expect(pts.at(-1)!.evalLoss!).toBeLessThan(pts[0].evalLoss!);
  }, 180_000);
});

describe('a killed island', () => {
  it('its range in flight (frozen by SIGSTOP, then kill -9) is trained later by another island', async () => {
    const ts = await serveShards(shardsDir);
    const child = spawnIsland(ts.url, 'doomed');
    let other: NodeIsland | null = null;
    try {
      await waitFor('the child training', () => child.report.acks.length >= 1, 60_000);
      // frozen while it holds a range (not between an ack and its next assignment)
      const held = await waitFor(
        'its range in flight',
        async () => {
          child.child.kill('SIGCONT');
          await sleep(30 + Math.random() * 100);
          child.child.kill('SIGSTOP');
          await sleep(200);
          const d = await getJson<DataStatus>(`${ts.url}/api/data`);
          return d.inFlight.find((r) => r.islandId === child.report.islandId && !r.submitted) ?? null;
        },
        30_000,
      );
      if (!held) throw new Error('unreachable');
      await child.kill9();
      other = await startNodeIsland({ server: ts.url, engine: 'cpu', calibrate: false, mix: false, name: 'heir' });
      const heir = other;
      await waitFor(
        'the killed range trained by the heir',
        async () => {
          const d = await getJson<DataStatus>(`${ts.url}/api/data`);
          return d.recent.some((r) => r.islandId !== held.islandId && r.epoch === held.epoch && overlaps(r, held));
        },
        60_000,
      );
      const d = await getJson<DataStatus>(`${ts.url}/api/data`);
      expect(d.inFlight.some((r) => r.islandId === held.islandId)).toBe(false);
      expect(d.recent.some((r) => r.islandId === held.islandId && r.epoch === held.epoch && overlaps(r, held))).toBe(
        false,
      );
      heir.stop();
      await heir.done;
    } finally {
      await child.kill9();
      await ts.close();
    }
  }, 120_000);
});

/** An island that trains 2,000 tokens off the range it was assigned (plausible, fake work). */
async function shiftedRangeIsland(url: string): Promise<IslandRuntime> {
  const src = (await openRangeSource(url))!;
  const transport = new SocketIoTransport({ url });
  const lie = (a: Assignment | null) => {
    const r = a?.data.range;
    if (!a || !r) return a;
    const shard = src.index.shards.find((x) => x.name === r.shard)!;
    const offset = r.offset + r.length + 2000 <= shard.tokens ? r.offset + 2000 : r.offset - 2000;
    return { ...a, data: { ...a.data, range: { ...r, offset } } };
  };
  const hello = transport.hello.bind(transport),
    next = transport.nextAssignment.bind(transport);
  transport.hello = async (m) => {
    const r = await hello(m);
    return r.ok ? { ok: true, value: { ...r.value, assignment: lie(r.value.assignment) } } : r;
  };
  transport.nextAssignment = async () => {
    const r: Result<Assignment> = await next();
    return r.ok ? { ok: true, value: lie(r.value)! } : r;
  };
  return new IslandRuntime({
    engine: new JsEngine({ config: PRESETS.tiny, maxBatch: B }),
    train: new Uint8Array(0),
    fetchRange: (r) => src.fetch(r),
    transport,
    caps: { name: 'liar', batchSize: B, maxBatch: B },
  });
}

describe('audits of a shard run', () => {
  it('a validator replays each audited assignment on its own range: honest passes, another range is banned', async () => {
    const ts = await startTestServer({
      flags: { data: shardsDir, mode: 'sync', codec: 'int8', innerSteps: 4, quorum: 1 },
      audit: { token: 'validator-secret', rate: 1, banAfter: 2 },
    });
    const honest = await startNodeIsland({ server: ts.url, engine: 'cpu', calibrate: false, mix: false, name: 'h' });
    const liar = await shiftedRangeIsland(ts.url);
    void liar.start();
    const verdicts: { islandId: string; passed: boolean | null; banned: boolean; cosine: number | null }[] = [];
    const v = await startNodeValidator({
      server: ts.url,
      token: 'validator-secret',
      idleMs: 100,
      onVerdict: (job, m, passed, banned) =>
        verdicts.push({ islandId: job.islandId, passed, banned, cosine: m.cosine }),
    });
    try {
      await waitFor('the liar banned', () => verdicts.some((x) => x.banned), 60_000);
      const honestId = honest.runtime.progress.islandId!;
      await waitFor('2 honest verdicts', () => verdicts.filter((x) => x.islandId === honestId).length >= 2, 60_000);
      expect(verdicts.filter((x) => x.islandId === honestId).every((x) => x.passed === true)).toBe(true);
      expect(verdicts.filter((x) => x.islandId === liar.progress.islandId).map((x) => x.passed)).toEqual([
        false,
        false,
      ]);
    } finally {
      liar.stop();
      v.stop();
      honest.stop();
      await Promise.allSettled([v.done, honest.done]);
      await ts.close();
    }
  }, 90_000);
});

describe('a shard run resumed', () => {
  it('keeps its range ledger (in the checkpoint); ranges in flight at the stop go back to the pool', async () => {
    const dir = join(root, 'run');
    let ts = await serveShards(shardsDir, false, dir);
    const isl = await startNodeIsland({ server: ts.url, engine: 'cpu', calibrate: false, mix: false, name: 'r' });
    await waitFor('3 ranges trained', async () => (await getJson<DataStatus>(`${ts.url}/api/data`)).recent.length >= 3);
    isl.stop();
    await isl.done;
    const before = await getJson<DataStatus>(`${ts.url}/api/data`);
    await ts.close();
    ts = await serveShards(shardsDir, false, dir);
    try {
      const after = await getJson<DataStatus>(`${ts.url}/api/data`);
      expect(after.inFlight).toEqual([]);
      expect(after.recent).toEqual(before.recent);
      expect(after.shards).toEqual(before.shards);
      expect(after.epochsDone).toBe(before.epochsDone);
    } finally {
      await ts.close();
    }
  }, 60_000);
});

describe('serve --data DIR refuses bad shards before it listens', () => {
  it('a shard whose bytes changed since prepare: E_BAD_SHARD', async () => {
    const bad = join(root, 'bad');
    cpSync(shardsDir, bad, { recursive: true });
    const index = JSON.parse(readFileSync(join(bad, 'index.json'), 'utf8')) as DataIndex;
    const f = join(bad, index.shards[1].name);
    const bytes = readFileSync(f);
    bytes[2000] ^= 1;
    writeFileSync(f, bytes);
    await expect(serveShards(bad)).rejects.toThrow(/E_BAD_SHARD/);
  });

  it('no train shard holds one step (batch × (seqLen + 1) tokens): E_DATA_TOO_SMALL', async () => {
    const small = join(root, 'small');
    await prepare({
      tokenizer: 'byte',
      out: small,
      inputs: [join(root, 'in')],
      shardTokens: 200,
      heldOutTokens: 23_000,
    });
    await expect(serveShards(small)).rejects.toThrow(/E_DATA_TOO_SMALL/);
  });

  it('shards of another tokenizer: E_TOKENIZER_MISMATCH', async () => {
    const other = join(root, 'gpt2');
    cpSync(shardsDir, other, { recursive: true });
    const p = join(other, 'index.json');
    writeFileSync(
      p,
      readFileSync(p, 'utf8').replace('"byte"', '"gpt2"').replace('"vocabSize": 256', '"vocabSize": 50257'),
    );
    await expect(serveShards(other)).rejects.toThrow(/E_TOKENIZER_MISMATCH/);
  });
});
