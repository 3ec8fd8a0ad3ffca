// Audits by assignment and bans that reach back (issue 23, items 1 and 2), through a real Run:
// a Δ on a base older than its assignment's is refused; a stale Δ (on its assignment's older base)
// is sampled and its job carries θ of that base; a ban revokes credit and lists the island's
// deltas; the revert call rebuilds θ to the bits of a run that never had the banned Δs.

import { readdirSync, statSync } from 'node:fs';
import { join as joinPath } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeDelta } from '../core/codec/index.ts';
import { Coordinator, hashParams } from '../core/coord/index.ts';
import { type Assignment, type DeltaMeta, ErrorCode } from '../core/protocol.ts';
import { gaussian, mulberry32 } from '../core/random.ts';
import type { Run } from '../server/run/run.ts';
import { type TestServer, startTestServer } from './helpers/server.ts';

const servers: TestServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.close();
});

function vec(n: number, seed: number, scale: number): Float32Array {
  const r = gaussian(mulberry32(seed));
  return new Float32Array(n).map(() => scale * r());
}

/** The honest shape of a delta's meta for assignment `a`. */
function metaFor(a: Assignment, seq: number, o: Partial<DeltaMeta> = {}): DeltaMeta {
  return {
    islandId: a.islandId,
    roundId: a.roundId,
    baseVersion: a.baseVersion,
    seq,
    steps: a.innerSteps,
    tokens: a.innerSteps * a.batchSize * a.seqLen,
    lossFirst: 3,
    lossLast: 2,
    lossMean: 2.5,
    elapsedMs: 1000,
    ...o,
  };
}

async function join(run: Run, name: string): Promise<Assignment> {
  const j = await run.islands.join({ caps: { engine: 'cpu', name } });
  if (!j.ok || !j.value.assignment) throw new Error(`join ${name}: ${JSON.stringify(j)}`);
  return j.value.assignment;
}

async function next(run: Run, id: string): Promise<Assignment> {
  const r = await run.islands.nextAssignment(id);
  if (!r.ok) throw new Error(`next ${id}: ${r.error.message}`);
  return r.value;
}

describe('audits by assignment', () => {
  it("a base other than the assignment's, or another codec, is E_BAD_CLAIM (sync)", () => {
    const n = 256;
    const c = new Coordinator({
      params: vec(n, 1, 0.02),
      config: { mode: 'sync', quorum: 1, uplink: { encoding: 'int8', blockSize: 64 }, dylu: false, innerSteps: 4 },
    });
    const j1 = c.join({ caps: { engine: 'cpu' } }, 0);
    if (!j1.ok || !j1.value.assignment) throw new Error('join');
    let a = j1.value.assignment;
    expect(c.submit({ meta: metaFor(a, 1), frame: encodeDelta(vec(n, 2, 1e-3), a.codec) }, 10).ok).toBe(true);
    const r = c.nextAssignment(a.islandId, 20);
    if (!r.ok || !r.value) throw new Error('next');
    a = r.value;
    expect(a.baseVersion).toBe(1);
    const frame = encodeDelta(vec(n, 3, 1e-3), a.codec);
    const code = (x: ReturnType<Coordinator['submit']>) => (x.ok ? 'accepted' : x.error.code);
    // the dodge of issue 23: one version below the assignment's base, with the current round
    expect(code(c.submit({ meta: metaFor(a, 2, { baseVersion: 0 }), frame }, 30))).toBe(ErrorCode.BAD_CLAIM);
    expect(code(c.submit({ meta: metaFor(a, 3), frame: encodeDelta(vec(n, 3, 1e-3), { encoding: 'f32' }) }, 30))).toBe(
      ErrorCode.BAD_CLAIM,
    );
    // a round the island was never given
    expect(code(c.submit({ meta: metaFor(a, 4, { roundId: 7 }), frame }, 30))).toBe(ErrorCode.BAD_CLAIM);
    expect(c.version).toBe(1);
    expect(code(c.submit({ meta: metaFor(a, 5), frame }, 30))).toBe('accepted');
  });

  it("a stale Δ on its assignment's base is sampled at --audit-rate 1, with θ of that base; an older base is refused", async () => {
    const ts = await startTestServer({
      file: {
        coordinator: {
          mode: 'async',
          uplink: { encoding: 'int8', blockSize: 64 },
          asyncWindow: { fraction: 0, floorMs: 0, capMs: 0 },
          dylu: false,
          innerSteps: 4,
          normBound: { factor: 0, window: 32, minHistory: 3 },
        },
      },
      audit: { token: 'v-token', rate: 1, banAfter: 0, maxJobs: 64 },
      outerWorkers: 0,
    });
    servers.push(ts);
    const run = ts.server.run;
    const n = run.paramCount;
    const v0 = { version: run.coord.version, hash: run.coord.hash };
    const a = await join(run, 'a');
    const b = await join(run, 'b');
    expect(a.freshOptimizer && b.freshOptimizer).toBe(true);
    expect((await run.islands.submit(metaFor(a, 1), encodeDelta(vec(n, 10, 1e-3), a.codec))).status).toBe('applied');
    expect(run.version).toBe(1);
    // b's delta is one version stale: accepted, and audited from θ at version 0
    const ackB = await run.islands.submit(metaFor(b, 1), encodeDelta(vec(n, 11, 1e-3), b.codec));
    expect(ackB.status).toBe('applied');
    const jobs = [run.audits!.take(), run.audits!.take()];
    const jobB = jobs.find((j) => j?.islandId === b.islandId)!;
    expect(jobB).toBeTruthy();
    expect(jobB.baseVersion).toBe(0);
    expect(jobB.baseHash).toBe(v0.hash);
    expect(hashParams(new Float32Array(jobB.params.slice().buffer))).toBe(v0.hash);
    // b's next assignment is on version 2: a Δ claiming version 1 is refused, and nothing moves
    const b2 = await next(run, b.islandId);
    expect(b2.baseVersion).toBe(2);
    const before = run.coord.hash;
    const lie = await run.islands.submit(metaFor(b2, 2, { baseVersion: 1 }), encodeDelta(vec(n, 12, 1e-3), b2.codec));
    expect(lie.status).toBe('rejected');
    expect(lie.error?.code).toBe(ErrorCode.BAD_CLAIM);
    expect(run.coord.hash).toBe(before);
    expect(run.audits!.take()).toBeNull();
  }, 30_000);
});

describe('bans that reach back', () => {
  /** Three sync rounds; `liar` (when given) sends its own Δ beside the honest one in each. */
  async function rounds(run: Run, withLiar: boolean): Promise<{ honest: string; liar: string | null }> {
    const n = run.paramCount;
    let h = await join(run, 'honest');
    let l = withLiar ? await join(run, 'liar') : null;
    for (let k = 0; k < 3; k++) {
      const acks = [run.islands.submit(metaFor(h, k + 1), encodeDelta(vec(n, 100 + k, 2e-3), h.codec))];
      if (l) acks.push(run.islands.submit(metaFor(l, k + 1), encodeDelta(vec(n, 200 + k, 2e-3), l.codec)));
      for (const ack of await Promise.all(acks)) expect(ack.status).toBe('applied');
      h = await next(run, h.islandId);
      if (l) l = await next(run, l.islandId);
    }
    return { honest: h.islandId, liar: l?.islandId ?? null };
  }
  const coordinator = {
    mode: 'sync' as const,
    uplink: { encoding: 'int8' as const, blockSize: 64 },
    quorum: 1,
    minContributors: 1,
    soloPlainStep: false,
    dylu: false,
    innerSteps: 4,
  };

  it('a ban revokes credit and lists the deltas; the revert call gives θ the hash of a run without them', async () => {
    // the reference: the honest island alone, same deltas, outer step on the event loop
    const ref = await startTestServer({ file: { coordinator }, outerWorkers: 0 });
    servers.push(ref);
    await rounds(ref.server.run, false);
    // the run with the liar, outer step in worker threads (serve's default)
    const ts = await startTestServer({ file: { coordinator }, outerWorkers: 2 });
    servers.push(ts);
    const run = ts.server.run;
    const ids = await rounds(run, true);
    expect(run.version).toBe(3);
    expect(run.coord.hash).not.toBe(ref.server.run.coord.hash);
    const liarTokens = run.coord.island(ids.liar!)!.tokensContributed;
    expect(liarTokens).toBeGreaterThan(0);

    const auth = { authorization: 'Bearer test-admin-token', 'content-type': 'application/json' };
    const ban = await ts.server.app.inject({
      method: 'POST',
      url: `/api/admin/islands/${ids.liar}/ban`,
      headers: auth,
      payload: '{}',
    });
    expect(ban.statusCode).toBe(200);
    const banBody = ban.json() as { revokedTokens: number; deltas: Array<{ version: number; seq: number }> };
    expect(banBody.revokedTokens).toBe(liarTokens);
    expect(banBody.deltas.map((d) => [d.version, d.seq])).toEqual([
      [1, 1],
      [2, 2],
      [3, 3],
    ]);
    expect(run.coord.island(ids.liar!)!.tokensContributed).toBe(0);
    const credit = (await ts.server.app.inject({ url: '/api/islands' })).json() as {
      islands: Array<{ id: string; tokens: number }>;
    };
    expect(credit.islands.find((i) => i.id === ids.liar)!.tokens).toBe(0);

    const listed = await ts.server.app.inject({ url: `/api/admin/islands/${ids.liar}/deltas`, headers: auth });
    expect((listed.json() as { deltas: unknown[] }).deltas).toHaveLength(3);

    const rev = await ts.server.app.inject({
      method: 'POST',
      url: `/api/admin/islands/${ids.liar}/revert`,
      headers: auth,
      payload: '{}',
    });
    expect(rev.statusCode, rev.body).toBe(200);
    const body = rev.json() as { hash: string; version: number; fromCheckpoint: number; replayed: number; ms: number };
    const refRun = ref.server.run;
    expect(body.hash).toBe(refRun.coord.hash);
    expect(run.coord.hash).toBe(refRun.coord.hash);
    expect(hashParams(run.durableParams().params)).toBe(refRun.coord.hash);
    expect(body).toMatchObject({ fromCheckpoint: 0, replayed: 3, version: 4 });
    expect(run.coord.totals().tokensApplied).toBe(refRun.coord.totals().tokensApplied);
    // durable: the checkpoint of the new version holds the rebuilt θ
    expect(run.store.listCheckpoints()[0].version).toBe(4);
    const bytes = readdirSync(joinPath(ts.dir, 'deltas')).reduce(
      (a, f) => a + statSync(joinPath(ts.dir, 'deltas', f)).size,
      0,
    );
    console.log(
      `revert: ${body.ms.toFixed(1)} ms for ${body.replayed} versions; deltas kept on disk ${bytes} bytes for 6 int8 deltas of ${run.paramCount} params`,
    );
    // training goes on from the rebuilt θ
    const h = await next(run, ids.honest);
    expect(h.baseVersion).toBe(4);
    const after = await run.islands.submit(metaFor(h, 10), encodeDelta(vec(run.paramCount, 9, 1e-3), h.codec));
    expect(after.status, JSON.stringify(after.error)).toBe('applied');
  }, 60_000);
});
