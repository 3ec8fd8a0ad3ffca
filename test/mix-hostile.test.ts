// Butterfly mixing's messages against hostile clients, over real socket.io on the embedded server
// (--mix-group 2): every malformed or out-of-place `mix:*` message gets a clear error code and
// changes nothing; signalling reaches only the other member of the sender's group; a member whose
// fragment fails to decode and who cannot replay its commitment is refused (E_MIX_MISMATCH) and
// banned, while its honest partner's Δ is applied; a member whose exchange failed regroups once; a
// member that stalls its group uploads directly for a while; a member whose connection drops while
// its group settles, and who then uploads its Δ directly, gets the group's ack (counted once, its
// bytes counted as a resend).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeDelta, encodeDelta } from '../core/codec/index.ts';
import { canonicalFragment, mixWeights } from '../core/mix/butterfly.ts';
import type { MixPlanMsg } from '../core/protocol.ts';
import { PROTOCOL_VERSION } from '../core/protocol.ts';
import { ask, code, type RawIsland, rawIslands } from './helpers/mix-clients.ts';
import { type TestServer, getJson, startTestServer } from './helpers/server.ts';

let ts: TestServer;
const clients = rawIslands(() => ts);
const connect = () => clients.connect();

beforeAll(async () => {
  // every delta its own outer step (no merge window): an ack does not wait for the other islands
  ts = await startTestServer({
    flags: { mode: 'async', codec: 'int8' },
    file: { coordinator: { asyncWindow: { fraction: 0, floorMs: 0, capMs: 0 } } },
    gateway: { messagesPerSecond: 10_000, violationBudget: 100 },
    mix: { k: 2, formWaitMs: 60_000, exchangeTimeoutMs: 1_500 },
    outerWorkers: 0,
  });
});
afterAll(async () => {
  clients.closeAll();
  await ts?.close();
});

/** Member j's honest fragment: its range of the token-weighted mean of the members' committed Δs (members in index order). */
function honestFragment(plan: MixPlanMsg, members: RawIsland[], j: number, n: number): Uint8Array {
  const xs = members.map((x) => {
    const d = decodeDelta(x.frame, n);
    if (!d.ok) throw new Error(d.error.message);
    return d.value.slice();
  });
  return encodeDelta(
    canonicalFragment(xs, mixWeights(plan.members.map((m) => m.tokens)), plan.ranges[j]),
    members[j].a.codec,
  );
}

/** A joined island of the --mix-group 2 server. */
async function island(name: string) {
  const x = await clients.island(name);
  expect(x.mixGroup).toBe(2);
  return x;
}

describe('butterfly mixing against hostile clients', () => {
  it('refuses malformed and out-of-place mix messages with a code, relays only within a group, and settles a liar', async () => {
    const stranger = await connect();
    expect(code(await ask(stranger, 'mix:ready', {}))).toBe('E_NO_HELLO');
    const A = await island('mix-a');
    const B = await island('mix-b');
    const C = await island('mix-c');
    // malformed: schema errors before any work
    for (const bad of [
      null,
      1,
      'x',
      [],
      {},
      { meta: A.meta },
      { meta: A.meta, frameHash: 'zz' },
      { meta: { ...A.meta, seq: -1 }, frameHash: A.hash },
      { meta: A.meta, frameHash: A.hash, extra: 1 },
    ]) {
      expect(code(await ask(A.s, 'mix:ready', bad)), JSON.stringify(bad)).toBe('E_BAD_REQUEST');
    }
    for (const bad of [{}, { groupId: -1, frame: null }, { groupId: 1, frame: 'x' }, { groupId: 1.5, frame: null }])
      expect(code(await ask(A.s, 'mix:fragment', bad))).toBe('E_BAD_REQUEST');
    for (const bad of [
      {},
      { groupId: 1, to: 0, kind: 'hack', data: '' },
      { groupId: 1, to: 0, kind: 'offer', data: 'x'.repeat(20_000) },
    ])
      expect(code(await ask(A.s, 'mix:signal', bad))).toBe('E_BAD_REQUEST');
    // someone else's Δ, and a claim that fits no assignment (this one uploads directly: null)
    expect(code(await ask(C.s, 'mix:ready', { meta: A.meta, frameHash: A.hash }))).toBe('E_BAD_REQUEST');
    const lie = await ask<MixPlanMsg | null>(C.s, 'mix:ready', {
      meta: { ...C.meta, tokens: C.meta.tokens * 2 },
      frameHash: C.hash,
    });
    expect(lie).toEqual({ ok: true, value: null });

    // A and B form group g: each is told the other's commitment and its server-derived weight (B,
    // as our islands do, leaves its tokens out: the server derives them from B's assignment)
    const { tokens: _bTokens, ...bMeta } = B.meta;
    const [pa, pb] = await Promise.all([
      ask<MixPlanMsg>(A.s, 'mix:ready', { meta: A.meta, frameHash: A.hash }),
      ask<MixPlanMsg>(B.s, 'mix:ready', { meta: bMeta, frameHash: B.hash }),
    ]);
    if (!pa.ok || !pb.ok) throw new Error(JSON.stringify([pa, pb]));
    const g = pa.value.groupId;
    expect(pb.value.groupId).toBe(g);
    expect(pa.value.members.map((m) => m.frameHash)).toEqual([A.hash, B.hash]);
    expect(pa.value.members.map((m) => m.tokens)).toEqual([A.meta.tokens, B.meta.tokens]);
    const [ia, ib] = [pa.value.index, pb.value.index];

    // signalling: only between members of g, to the other member, relayed with the sender's index
    const got = new Promise<unknown>((resolve) => B.s.once('mix:signal', resolve));
    expect(code(await ask(A.s, 'mix:signal', { groupId: g, to: ib, kind: 'offer', data: 'v=0' }))).toBe('ok');
    expect(await got).toEqual({ groupId: g, from: ia, kind: 'offer', data: 'v=0' });
    expect(code(await ask(A.s, 'mix:signal', { groupId: g, to: ia, kind: 'offer', data: 'v=0' }))).toBe(
      'E_BAD_REQUEST',
    );
    expect(code(await ask(A.s, 'mix:signal', { groupId: g, to: 7, kind: 'offer', data: 'v=0' }))).toBe('E_BAD_REQUEST');
    expect(code(await ask(C.s, 'mix:signal', { groupId: g, to: 0, kind: 'offer', data: 'v=0' }))).toBe('E_BAD_REQUEST');
    expect(code(await ask(C.s, 'mix:fragment', { groupId: g, frame: null }))).toBe('E_BAD_REQUEST');
    expect(
      code(await ask(A.s, 'mix:fragment', { groupId: g, frame: new Uint8Array(ts.server.run.maxFrameBytes + 1) })),
    ).toBe('E_OVERSIZE');
    expect(code(await ask(A.s, 'mix:ready', { meta: A.meta, frameHash: A.hash }))).toBe('E_BAD_REQUEST'); // in g's exchange

    // A is honest (replays its commitment); B uploads garbage and replays a Δ it never committed to
    A.s.on('mix:replay', (m: { groupId: number }, ack: (a: unknown) => void) =>
      ack({ groupId: m.groupId, frame: A.frame }),
    );
    B.s.on('mix:replay', (m: { groupId: number }, ack: (a: unknown) => void) =>
      ack({ groupId: m.groupId, frame: A.frame }),
    );
    const banned = new Promise<unknown>((resolve) => B.s.once('banned', resolve));
    const fragA = honestFragment(pa.value, ia === 0 ? [A, B] : [B, A], ia, ts.server.run.paramCount);
    const [va, vb] = await Promise.all([
      ask<{ status: string; version: number }>(A.s, 'mix:fragment', { groupId: g, frame: fragA }),
      ask<{ status: string; error?: { code: string } }>(B.s, 'mix:fragment', {
        groupId: g,
        frame: Uint8Array.of(1, 2, 3),
      }),
    ]);
    expect(code(await ask(A.s, 'mix:fragment', { groupId: g, frame: fragA }))).toBe('E_BAD_REQUEST'); // twice
    if (!va.ok || !vb.ok) throw new Error(JSON.stringify([va, vb]));
    expect(vb.value.status).toBe('rejected');
    expect(vb.value.error?.code).toBe('E_MIX_MISMATCH');
    expect(va.value.status).toBe('applied');
    await banned;
    expect(ts.server.run.coord.island(B.id)?.status).toBe('banned');
    expect(ts.server.run.coord.island(A.id)?.tokensContributed).toBe(A.meta.tokens);
    expect(ts.server.run.coord.island(B.id)?.tokensContributed ?? 0).toBe(0);
    const c = ts.server.mix!.counters;
    expect(A.hash).not.toBe(B.hash);
    expect(c.audits).toBe(1);
    expect(c.implicated).toBe(1);
  }, 60_000);

  it('a member whose exchange failed regroups once, then uploads directly', async () => {
    const D = await island('mix-d');
    const E = await island('mix-e');
    const ready = (x: typeof D) => ask<MixPlanMsg>(x.s, 'mix:ready', { meta: x.meta, frameHash: x.hash });
    const [pd, pe] = await Promise.all([ready(D), ready(E)]);
    if (!pd.ok || !pe.ok) throw new Error(JSON.stringify([pd, pe]));
    const aborted = new Promise<unknown>((resolve) => E.s.once('mix:abort', resolve));
    // D's exchange failed: the group is called off at once, E is told to stop and both regroup
    expect(await ask(D.s, 'mix:fragment', { groupId: pd.value.groupId, frame: null })).toEqual({
      ok: true,
      value: 'regroup',
    });
    expect(await aborted).toEqual({ groupId: pd.value.groupId });
    expect(await ask(E.s, 'mix:fragment', { groupId: pe.value.groupId, frame: null })).toEqual({
      ok: true,
      value: 'regroup',
    });
    const [pd2, pe2] = await Promise.all([ready(D), ready(E)]);
    if (!pd2.ok || !pe2.ok) throw new Error(JSON.stringify([pd2, pe2]));
    expect(pd2.value.groupId).not.toBe(pd.value.groupId);
    // the pair's link was signalled in the first group and nobody reported it lost: the plan lists it, to reuse
    expect(pd2.value.linked).toEqual([1 - pd2.value.index]);
    expect(pe2.value.linked).toEqual([1 - pe2.value.index]);
    // mix:lost: malformed is refused; a report about a pair the reporter is not in, or about a link
    // older than the pair's, changes nothing; the member's own report forgets the pair (a re-signal, no more)
    const mix = ts.server.mix!;
    for (const bad of [
      {},
      { peer: E.id },
      { peer: 'a b', groupId: 1 },
      { peer: E.id, groupId: -1 },
      { peer: E.id, groupId: 1, x: 1 },
    ])
      expect(code(await ask(D.s, 'mix:lost', bad)), JSON.stringify(bad)).toBe('E_BAD_REQUEST');
    const F = await island('mix-lost-f');
    expect(code(await ask(F.s, 'mix:lost', { peer: E.id, groupId: pd2.value.groupId }))).toBe('ok');
    expect(code(await ask(D.s, 'mix:lost', { peer: E.id, groupId: pd.value.groupId - 1 }))).toBe('ok');
    expect(mix.links.has(D.id, E.id)).toBe(true);
    expect(code(await ask(D.s, 'mix:lost', { peer: E.id, groupId: pd.value.groupId }))).toBe('ok');
    expect(mix.links.has(D.id, E.id)).toBe(false);
    expect(mix.links.has(E.id, D.id)).toBe(false);
    // a second failure of the same Δ: upload it directly
    expect(await ask(E.s, 'mix:fragment', { groupId: pe2.value.groupId, frame: null })).toEqual({
      ok: true,
      value: 'direct',
    });
    expect(await ask(D.s, 'mix:fragment', { groupId: pd2.value.groupId, frame: null })).toEqual({
      ok: true,
      value: 'direct',
    });
    expect(ts.server.run.coord.island(D.id)?.tokensContributed ?? 0).toBe(0); // nothing counted
  }, 30_000);

  it('a member that stalls its group (connected, no fragment) uploads directly for a while', async () => {
    const F = await island('mix-f');
    const G = await island('mix-g');
    const ready = (x: typeof F) => ask<MixPlanMsg | null>(x.s, 'mix:ready', { meta: x.meta, frameHash: x.hash });
    const [pf, pg] = await Promise.all([ready(F), ready(G)]);
    if (!pf.ok || !pg.ok || !pf.value || !pg.value) throw new Error(JSON.stringify([pf, pg]));
    // G uploads its fragment; F says nothing: at the deadline G is told to regroup and F is benched
    const range = pg.value.ranges[pg.value.index];
    const fragG = encodeDelta(new Float32Array(range[1] - range[0]), G.a.codec);
    expect(await ask(G.s, 'mix:fragment', { groupId: pg.value.groupId, frame: fragG })).toEqual({
      ok: true,
      value: 'regroup',
    });
    expect(await ready(F)).toEqual({ ok: true, value: null }); // benched: send delta
  }, 30_000);
});

describe('a member whose connection drops while its group settles', () => {
  let tq: TestServer;
  const raw = rawIslands(() => tq);
  beforeAll(async () => {
    // no spot checks: the dropped member could not answer one
    tq = await startTestServer({
      flags: { mode: 'async', codec: 'int8' },
      file: { coordinator: { asyncWindow: { fraction: 0, floorMs: 0, capMs: 0 } } },
      gateway: { messagesPerSecond: 10_000, violationBudget: 100 },
      mix: { k: 2, formWaitMs: 60_000, exchangeTimeoutMs: 10_000, spotRate: 0 },
      outerWorkers: 0,
    });
  });
  afterAll(async () => {
    raw.closeAll();
    await tq?.close();
  });

  it("uploads its Δ directly on its return and gets the group's ack: counted once, its bytes counted as a resend", async () => {
    const H = await raw.island('drop-h');
    const I = await raw.island('drop-i');
    const [ph, pi] = await Promise.all(
      [H, I].map((x) => ask<MixPlanMsg>(x.s, 'mix:ready', { meta: x.meta, frameHash: x.hash })),
    );
    if (!ph.ok || !pi.ok) throw new Error(JSON.stringify([ph, pi]));
    const g = ph.value.groupId;
    const byIndex = ph.value.index === 0 ? [H, I] : [I, H];
    const n = tq.server.run.paramCount;
    const mix = tq.server.mix!;
    const bytesIn = async () => (await getJson<{ bytesIn: number }>(`${tq.url}/api/status`)).bytesIn;
    const resent = async () =>
      Number(/^atoll_deltas_resent_total (\S+)$/m.exec(await (await fetch(`${tq.url}/metrics`)).text())?.[1]);
    const in0 = await bytesIn();
    // H's fragment is in; then its connection drops, before the group's verdict
    const fragH = honestFragment(ph.value, byIndex, ph.value.index, n);
    H.s.emit('mix:fragment', { groupId: g, frame: fragH }, () => {});
    for (let t = 0; mix.counters.fragmentBytes < fragH.length; t++) {
      if (t > 200) throw new Error("the server never got H's fragment");
      await new Promise((r) => setTimeout(r, 10));
    }
    H.s.disconnect();
    // I's fragment completes the group: both Δs go in through it
    const fragI = honestFragment(pi.value, byIndex, pi.value.index, n);
    const vi = await ask<{ status: string; version: number }>(I.s, 'mix:fragment', { groupId: g, frame: fragI });
    if (!vi.ok) throw new Error(JSON.stringify(vi));
    expect(vi.value.status).toBe('applied');
    expect(mix.counters.mixedMembers).toBe(2);
    const coord = tq.server.run.coord;
    const tokens = coord.island(H.id)?.tokensContributed;
    expect(tokens).toBe(H.meta.tokens);
    const version = coord.version;
    // H comes back under its identity; its verdict lost, it uploads its Δ directly
    const s2 = await raw.connect();
    const back = await ask<{ islandId: string }>(s2, 'hello', {
      protocolVersion: PROTOCOL_VERSION,
      caps: { engine: 'cpu', name: 'drop-h' },
      resumeIslandId: H.id,
      resumeToken: H.resumeToken,
    });
    expect(back.ok && back.value.islandId).toBe(H.id);
    const resent0 = await resent();
    const again = await ask<{ status: string; seq: number; version: number }>(s2, 'delta', {
      meta: H.meta,
      frame: H.frame,
    });
    // the group's ack: nothing counted twice, θ unchanged; the frame's bytes came in all the same
    // (each member's share is its own outer step here: H's ack names the version before or at I's)
    expect(again).toMatchObject({ ok: true, value: { status: 'applied', seq: H.meta.seq } });
    expect(again.ok && again.value.version).toBeGreaterThanOrEqual(vi.value.version - 1);
    expect(again.ok && again.value.version).toBeLessThanOrEqual(vi.value.version);
    expect(coord.island(H.id)?.tokensContributed).toBe(tokens);
    expect(coord.version).toBe(version);
    expect(await resent()).toBe(resent0 + 1);
    expect(await bytesIn()).toBe(in0 + fragH.length + fragI.length + H.frame.length);
  }, 30_000);
});
