// The downlink's rings on the live server (server/gateway/mix-rings.ts), over real socket.io with raw
// clients (--mix-group 2): a version goes as pieces to a ring of islands linked by an earlier
// group, and whole to an island that does not mix; a member that asks for a version it got a piece
// of (its ring's exchange failed) takes its ring out of the rings for a while (whole updates);
// islands the links cannot ring go in a fresh ring whose pieces carry `linked`, and `mix:signal`
// naming that ring reaches its partner only; a pair reported lost is not signalled again.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeDelta, encodeDelta } from '../core/codec/index.ts';
import { canonicalFragment, mixWeights } from '../core/mix/butterfly.ts';
import { sha256Hex } from '../core/mix/commit.ts';
import type { Assignment, MixPieceMsg, MixPlanMsg, UpdateMsg } from '../core/protocol.ts';
import { ask, code, rawIslands } from './helpers/mix-clients.ts';
import { type TestServer, startTestServer } from './helpers/server.ts';

let ts: TestServer;
const clients = rawIslands(() => ts);

beforeAll(async () => {
  ts = await startTestServer({
    flags: { mode: 'async', codec: 'int8' },
    file: { coordinator: { asyncWindow: { fraction: 0, floorMs: 0, capMs: 0 } } },
    gateway: { messagesPerSecond: 10_000, violationBudget: 100 },
    mix: { k: 2, formWaitMs: 60_000, exchangeTimeoutMs: 5_000 },
    outerWorkers: 0,
  });
});
afterAll(async () => {
  clients.closeAll();
  await ts?.close();
});

/** A joined island, and what the server pushed it. */
async function island(name: string) {
  const pieces: MixPieceMsg[] = [],
    updates: UpdateMsg[] = [];
  const x = await clients.island(name, (s) => {
    s.on('mix:piece', (p: MixPieceMsg) => pieces.push(p));
    s.on('update', (u: UpdateMsg) => updates.push(u));
  });
  return { ...x, pieces, updates };
}
type Island = Awaited<ReturnType<typeof island>>;

/** A direct Δ from a non-mixing island: one more version. */
async function version(x: Island, seq: number): Promise<number> {
  const next = await ask<Assignment>(x.s, 'nextAssignment', {});
  if (!next.ok) throw new Error(JSON.stringify(next));
  const a = next.value;
  const meta = {
    ...x.meta,
    roundId: a.roundId,
    baseVersion: a.baseVersion,
    seq,
    steps: a.innerSteps,
    tokens: a.innerSteps * a.batchSize * a.seqLen,
  };
  const ack = await ask<{ status: string; version: number }>(x.s, 'delta', { meta, frame: x.frame });
  if (!ack.ok || ack.value.status !== 'applied') throw new Error(JSON.stringify(ack));
  return ack.value.version;
}

const until = async (what: string, ok: () => boolean) => {
  for (let t = 0; t < 200 && !ok(); t++) await new Promise((r) => setTimeout(r, 25));
  if (!ok()) throw new Error(`timed out waiting for ${what}`);
};

describe("the downlink's rings on the live server", () => {
  it('pieces to a ring of linked islands; a failed ring gets whole updates; a fresh ring signals its new link only between its members', async () => {
    const plain = await island('ring-plain');
    const [H, I] = [await island('ring-h'), await island('ring-i')];
    // H and I mix once (their group links them), honestly
    const [ph, pi] = await Promise.all(
      [H, I].map((x) => ask<MixPlanMsg>(x.s, 'mix:ready', { meta: x.meta, frameHash: x.hash })),
    );
    if (!ph.ok || !pi.ok) throw new Error(JSON.stringify([ph, pi]));
    const n = ts.server.run.paramCount;
    const byIndex = (ph.value.index === 0 ? [H, I] : [I, H]).map((x) => {
      const d = decodeDelta(x.frame, n);
      if (!d.ok) throw new Error(d.error.message);
      return d.value.slice();
    });
    const w = mixWeights(ph.value.members.map((m) => m.tokens));
    const acks = await Promise.all(
      [[H, ph.value] as const, [I, pi.value] as const].map(([x, p]) =>
        ask<{ status: string }>(x.s, 'mix:fragment', {
          groupId: p.groupId,
          frame: encodeDelta(canonicalFragment(byIndex, w, p.ranges[p.index]), x.a.codec),
        }),
      ),
    );
    expect(acks.map((a) => a.ok && a.value.status)).toEqual(['applied', 'applied']);

    // a version from elsewhere: the ring [H, I] gets it as two pieces (no `linked`: the pair is linked); the plain island whole
    const v1 = await version(plain, 1);
    await until(
      'the pieces',
      () => H.pieces.some((p) => p.update.version === v1) && I.pieces.some((p) => p.update.version === v1),
    );
    const [hp, ip] = [H, I].map((x) => x.pieces.find((p) => p.update.version === v1)!);
    expect(hp.groupId).toBe(ip.groupId);
    expect(hp.groupId).not.toBe(ph.value.groupId); // a ring, not the group
    expect(hp.linked).toBeUndefined();
    expect(sha256Hex(Uint8Array.from(hp.index === 0 ? [...hp.piece, ...ip.piece] : [...ip.piece, ...hp.piece]))).toBe(
      hp.frameHash,
    );
    await until('the whole update', () => plain.updates.some((u) => u.version === v1));
    expect(H.updates.some((u) => u.version === v1)).toBe(false);

    // I asks for v1 after all (its ring's exchange failed): the next version goes whole to both
    const failed = ts.server.mix!.counters.ringsFailed;
    expect(code(await ask(I.s, 'updates', { fromVersion: v1 - 1 }))).toBe('ok');
    expect(ts.server.mix!.counters.ringsFailed).toBe(failed + 1);
    const v2 = await version(plain, 2);
    await until(
      'whole updates',
      () => H.updates.some((u) => u.version === v2) && I.updates.some((u) => u.version === v2),
    );
    expect([...H.pieces, ...I.pieces].some((p) => p.update.version === v2)).toBe(false);

    // K-L and M-N mixed (their groups called off), then K-L and M-N reported lost: no ring over links;
    // a fresh ring pairs L with M (K-L is not signalled again so soon), its pieces say `linked: []`
    const [K, L, M, N] = [
      await island('ring-k'),
      await island('ring-l'),
      await island('ring-m'),
      await island('ring-n'),
    ];
    for (const [x, y] of [
      [K, L],
      [M, N],
    ]) {
      const [px, py] = await Promise.all(
        [x, y].map((z) => ask<MixPlanMsg>(z.s, 'mix:ready', { meta: z.meta, frameHash: z.hash })),
      );
      if (!px.ok || !py.ok) throw new Error(JSON.stringify([px, py]));
      expect(await ask(x.s, 'mix:fragment', { groupId: px.value.groupId, frame: null })).toEqual({
        ok: true,
        value: 'regroup',
      });
      expect(await ask(y.s, 'mix:fragment', { groupId: py.value.groupId, frame: null })).toEqual({
        ok: true,
        value: 'regroup',
      });
      expect(code(await ask(x.s, 'mix:lost', { peer: y.id, groupId: px.value.groupId }))).toBe('ok');
    }
    const v3 = await version(plain, 3);
    await until(
      'the fresh ring',
      () => L.pieces.some((p) => p.update.version === v3) && M.pieces.some((p) => p.update.version === v3),
    );
    const [lp, mp] = [L, M].map((x) => x.pieces.find((p) => p.update.version === v3)!);
    expect(lp.groupId).toBe(mp.groupId);
    expect([lp.linked, mp.linked]).toEqual([[], []]);
    expect(new Set(lp.members)).toEqual(new Set([L.id, M.id]));
    // K and N: no ring (their only partners are lost lately or taken): whole
    await until(
      'K and N whole',
      () => K.updates.some((u) => u.version === v3) && N.updates.some((u) => u.version === v3),
    );
    // signalling for the ring: L to M, relayed with L's index; K is not in it
    const got = new Promise<unknown>((resolve) => M.s.once('mix:signal', resolve));
    expect(code(await ask(L.s, 'mix:signal', { groupId: lp.groupId, to: mp.index, kind: 'offer', data: 'v=0' }))).toBe(
      'ok',
    );
    expect(await got).toEqual({ groupId: lp.groupId, from: lp.index, kind: 'offer', data: 'v=0' });
    expect(code(await ask(K.s, 'mix:signal', { groupId: lp.groupId, to: 0, kind: 'offer', data: 'v=0' }))).toBe(
      'E_BAD_REQUEST',
    );
    expect(code(await ask(L.s, 'mix:signal', { groupId: lp.groupId, to: lp.index, kind: 'offer', data: 'v=0' }))).toBe(
      'E_BAD_REQUEST',
    );
    // the next version: L-M now linked, so the same pair rings without `linked`
    const v4 = await version(plain, 4);
    await until('the ring again', () => L.pieces.some((p) => p.update.version === v4));
    expect(L.pieces.find((p) => p.update.version === v4)!.linked).toBeUndefined();
  }, 60_000);
});
