// The outer step off the event loop (server/outer/offload.ts) is the coordinator's own step, bit for
// bit: two coordinators driven by the same islands, one stepping on its thread and one through the
// worker pool, emit the same update frames and hashes and end with the same θ, optimizer state and
// downlink residual, in sync rounds (int8 and int4 downlinks), async merge windows (shares of a
// step), a robust rule (g combined by the coordinator) and a lone island's plain step; each delta's
// cosine with g agrees to 6 digits. Frames decoded on a worker (ingest) are taken over as the
// pending deltas. While a step is in flight the coordinator refuses calls that change rounds.

import { afterAll, describe, expect, it } from 'vitest';
import { encodeDelta } from '../core/codec/index.ts';
import { Coordinator, type CoordinatorConfigPatch, type CoordinatorEvent } from '../core/coord/index.ts';
import type { Assignment } from '../core/protocol.ts';
import { gaussian, mulberry32 } from '../core/random.ts';
import { OuterOffloadHost } from '../server/outer/offload.ts';
import { type Socket, io } from 'socket.io-client';
import { PROTOCOL_VERSION } from '../core/protocol.ts';
import { startTestServer } from './helpers/server.ts';

const N = 3 * 4096 + 77; // fragments of 4096 (the pool's alignment here) and a ragged end
const vec = (seed: number, scale: number) => {
  const r = gaussian(mulberry32(seed));
  return new Float32Array(N).map(() => scale * r());
};

const hosts: OuterOffloadHost[] = [];
afterAll(async () => {
  for (const h of hosts) await h.close();
});

interface Trace {
  frames: string[];
  hashes: string[];
  rejected: string[];
  cosines: string[];
  /** Each version's trust-region gain (1: it did not act). */
  gains: number[];
}

/** `islands` islands for `rounds` rounds on `c`; with `host`, each pending step is taken through it. */
async function drive(c: Coordinator, host: OuterOffloadHost | null, islands: number, rounds: number): Promise<Trace> {
  const trace: Trace = { frames: [], hashes: [], rejected: [], cosines: [], gains: [] };
  const settle = async () => {
    if (host) await c.whenIdle();
    for (const e of c.drainEvents() as CoordinatorEvent[]) {
      if (e.type === 'update') {
        trace.frames.push(Buffer.from(e.update.frame).toString('base64'));
        trace.hashes.push(e.update.hash);
        trace.gains.push(e.stats.trustGain ?? 1);
        // the workers sum each delta's agreement per fragment: the same cosine to rounding
        for (const k of e.contributors) trace.cosines.push(`${k.islandId}:${(k.cosine ?? NaN).toFixed(6)}`);
      }
      if (e.type === 'rejected' || e.type === 'update')
        for (const r of e.rejected) trace.rejected.push(`${r.islandId}:${r.error.code}`);
    }
  };
  let now = 1000;
  const ids: string[] = [];
  const work = new Map<string, Assignment>();
  const seqs = new Map<string, number>();
  for (let k = 0; k < islands; k++) {
    const j = c.join({ caps: { engine: 'cpu', name: `i${k}`, batchSize: 2 + k } }, now);
    if (!j.ok || !j.value.assignment) throw new Error('join failed');
    ids.push(j.value.islandId);
    work.set(j.value.islandId, j.value.assignment);
    await settle();
  }
  for (let r = 0; r < rounds; r++) {
    for (const [k, id] of ids.entries()) {
      const a = work.get(id)!;
      now += 700;
      const seq = (seqs.get(id) ?? 0) + 1;
      seqs.set(id, seq);
      const steps = a.innerSteps;
      const meta = {
        islandId: id,
        roundId: a.roundId,
        baseVersion: a.baseVersion,
        seq,
        steps,
        tokens: steps * a.batchSize * a.seqLen,
        lossFirst: 3,
        lossLast: 2.5,
        lossMean: 2.7,
        elapsedMs: 600,
      };
      const frame = encodeDelta(vec(100 * r + k, 0.01 * (1 + k)), { encoding: 'f32' });
      // offloaded, the frame is decoded on a worker first (as Run.submit does), but for the first island
      const decoded = host && k > 0 ? await host.ingest(frame) : undefined;
      const res = c.submit({ meta, frame, decoded }, now);
      expect(res.ok).toBe(true);
      await settle();
    }
    now += 120_000; // past any merge window
    c.tick(now);
    await settle();
    for (const id of ids) {
      const next = c.nextAssignment(id, now);
      if (!next.ok || !next.value) throw new Error(`no assignment for ${id}`);
      work.set(id, next.value);
      await settle();
    }
  }
  return trace;
}

async function twins(config: CoordinatorConfigPatch, islands: number, rounds: number, workers: number) {
  const params = vec(1, 0.02);
  const here = new Coordinator({ params, config, now: 0 });
  const off = new Coordinator({ params, config, now: 0 });
  const host = await OuterOffloadHost.start(off, workers, 4096);
  hosts.push(host);
  const a = await drive(here, null, islands, rounds);
  const b = await drive(off, host, islands, rounds);
  expect(a.frames.length).toBeGreaterThanOrEqual(rounds);
  expect(b).toEqual(a);
  expect(host.buffers).toBeLessThanOrEqual(islands + 1); // delta buffers are reused round after round
  // the optimizer and downlink state stay in the workers until a snapshot asks for them
  expect(off.outerStateStale).toBeGreaterThan(0);
  expect(() => off.snapshot()).toThrow(/syncOuterState/);
  await host.syncState(off);
  expect(off.outerStateStale).toBe(0);
  expect(off.hash).toBe(here.hash);
  expect(
    Buffer.from(off.params().buffer, off.params().byteOffset, 4 * N).equals(
      Buffer.from(here.params().buffer, here.params().byteOffset, 4 * N),
    ),
  ).toBe(true);
  const [sa, sb] = [here.outerState(), off.outerState()];
  expect(Buffer.from(sb.momentum.buffer).equals(Buffer.from(sa.momentum.buffer))).toBe(true);
  expect(Buffer.from(sb.buffer.buffer).equals(Buffer.from(sa.buffer.buffer))).toBe(true);
  expect([sb.bufferCount, sb.steps]).toEqual([sa.bufferCount, sa.steps]);
  expect(Buffer.from(off.downlinkResidual().buffer).equals(Buffer.from(here.downlinkResidual().buffer))).toBe(true);
  // a snapshot of the offloaded one restores to the same state
  const back = Coordinator.restore(off.snapshot());
  if (!back.ok) throw new Error(back.error.message);
  expect(back.value.hash).toBe(here.hash);
  return a;
}

const base: CoordinatorConfigPatch = {
  uplink: { encoding: 'f32' },
  seqLen: 8,
  innerSteps: 4,
  dylu: false,
  normBound: { factor: 0, window: 32, minHistory: 3 },
};

describe('outer step off the event loop', () => {
  it('sync rounds of three islands: the same frames, hashes, θ and state as the coordinator’s own step (int8, int4, and a robust rule combined by the coordinator)', async () => {
    await twins({ ...base, mode: 'sync', downlink: { encoding: 'int8', blockSize: 64 } }, 3, 4, 2);
    await twins(
      {
        ...base,
        mode: 'sync',
        downlink: { encoding: 'int4', blockSize: 64 },
        outer: { kind: 'delayed-nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 2 },
      },
      3,
      3,
      3,
    );
    // a robust rule: the coordinator combines the deltas itself and the workers take the step from g
    await twins(
      {
        ...base,
        mode: 'sync',
        aggregation: 'trimmed-mean',
        trimFraction: 0.2,
        downlink: { encoding: 'int8', blockSize: 64 },
      },
      3,
      2,
      2,
    );
  });

  it('async merge windows (shares of a step) and a lone island’s plain step', async () => {
    const t = await twins({ ...base, mode: 'async', downlink: { encoding: 'int8', blockSize: 64 } }, 3, 4, 2);
    expect(t.frames.length).toBeGreaterThanOrEqual(4);
    await twins({ ...base, mode: 'sync', soloPlainStep: true, downlink: { encoding: 'f32', blockSize: 64 } }, 1, 3, 2);
  });

  it('the momentum anneals with the inner schedule on the workers as here (a budget the run nears)', async () => {
    // 3 islands × 4 rounds of 256 tokens against a cosine to 3,300 tokens: each step's decay takes η's fall
    const totalTokens = 3300;
    await twins({ ...base, mode: 'sync', totalTokens, downlink: { encoding: 'int8', blockSize: 64 } }, 3, 4, 2);
    await twins({ ...base, mode: 'async', totalTokens, downlink: { encoding: 'int4', blockSize: 64 } }, 3, 4, 2);
    await twins({ ...base, mode: 'sync', totalTokens, downlink: { encoding: 'f32', blockSize: 64 } }, 3, 3, 2);
  });

  it('the trust region clips the same steps by the same gain on the workers (fused int8, int4, a window)', async () => {
    // momentum grows ‖u‖ round after round: over 1.05 × the median of the last two, g takes a gain γ < 1
    const trustRegion = { factor: 1.05, window: 2 };
    const sync = await twins(
      { ...base, mode: 'sync', trustRegion, downlink: { encoding: 'int8', blockSize: 64 } },
      3,
      6,
      2,
    );
    const int4 = await twins(
      { ...base, mode: 'sync', trustRegion, downlink: { encoding: 'int4', blockSize: 64 } },
      2,
      6,
      3,
    );
    const win = await twins(
      { ...base, mode: 'async', trustRegion, downlink: { encoding: 'int8', blockSize: 64 } },
      3,
      6,
      2,
    );
    for (const t of [sync, int4, win]) {
      expect(t.gains.slice(0, 2)).toEqual([1, 1]); // the warm-up: no limit before `window` versions
      expect(t.gains.filter((g) => g < 1).length).toBeGreaterThan(0);
    }
  });

  it('refuses calls that change rounds while a step is in flight, and a rejected step moves nothing', async () => {
    const outer = { kind: 'nesterov' as const, lr: 5, momentum: 0.9, dnPeriod: 0 };
    const c = new Coordinator({
      params: vec(2, 0.02),
      config: { ...base, mode: 'sync', soloPlainStep: false, outer, downlink: { encoding: 'int8', blockSize: 64 } },
      now: 0,
    });
    const host = await OuterOffloadHost.start(c, 2, 4096);
    hosts.push(host);
    const j = c.join({ caps: { engine: 'cpu', name: 'solo' } }, 0);
    if (!j.ok || !j.value.assignment) throw new Error('join failed');
    const a = j.value.assignment;
    const meta = {
      islandId: j.value.islandId,
      roundId: a.roundId,
      baseVersion: 0,
      seq: 1,
      steps: a.innerSteps,
      tokens: a.innerSteps * a.batchSize * a.seqLen,
      lossFirst: 3,
      lossLast: 2,
      lossMean: 2.5,
      elapsedMs: 500,
    };
    const huge = vec(3, 1);
    huge[5] = 3e38; // lr 5 × 3e38 overflows f32: the step is rejected
    const hash0 = c.hash;
    expect(c.submit({ meta, frame: encodeDelta(huge, { encoding: 'f32' }) }, 1000).ok).toBe(true);
    expect(c.stepping).toBe(true);
    expect(c.tick(2000)).toMatchObject({ ok: false, error: { code: 'E_BUSY', message: /in flight/ } });
    expect(c.join({ caps: { engine: 'cpu' } }, 2000)).toMatchObject({ ok: false, error: { code: 'E_BUSY' } });
    expect(c.heartbeat(j.value.islandId, 2000).ok).toBe(true); // reads and heartbeats are fine
    await c.whenIdle();
    expect(c.stepping).toBe(false);
    expect(c.hash).toBe(hash0);
    expect(c.version).toBe(0);
    const rejected = c.drainEvents().flatMap((e) => (e.type === 'rejected' ? e.rejected.map((r) => r.error.code) : []));
    expect(rejected).toEqual(['E_NON_FINITE']);
    // a corrupt frame decoded on a worker is rejected with the decoder's code, its buffer given back
    const next = c.nextAssignment(j.value.islandId, 3000);
    if (!next.ok || !next.value) throw new Error('no assignment');
    const n2 = next.value;
    const bad = encodeDelta(vec(4, 0.01), n2.codec); // the assignment's codec: its claim fits, its bytes do not
    bad[200] ^= 0xff;
    const before = host.buffers;
    const decoded = await host.ingest(bad);
    expect(decoded.ok ? 'ok' : decoded.error.code).toBe('E_CRC');
    const r = c.submit(
      { meta: { ...meta, roundId: n2.roundId, baseVersion: n2.baseVersion, seq: 2 }, frame: bad, decoded },
      4000,
    );
    expect(r.ok ? 'ok' : r.error.code).toBe('E_CRC');
    expect(await host.ingest(encodeDelta(vec(5, 0.01), { encoding: 'f32' }))).toMatchObject({ ok: true });
    expect(host.buffers).toBe(before); // the corrupt frame's buffer was reused
  });

  it('bench server measures ingest and apply apart with the step in workers, as serve --outer-workers takes it', async () => {
    const { benchApply } = await import('../instruments/bench/server.ts');
    for (const workers of [2, 0]) {
      const r = await benchApply('int8', 1 << 16, 0.05, 'sync', 4, workers);
      for (const k of ['paramsPerSec', 'ingestParamsPerSec', 'applyParamsPerSec'] as const)
        expect(Number.isFinite(r[k]) && r[k] > 0, `${k} with ${workers} workers`).toBe(true);
    }
    // serve's --outer-workers is the run config's knob: its default is the default run's (2)
    const { buildProgram } = await import('../instruments/cli.ts');
    const serve = buildProgram().commands.find((c) => c.name() === 'serve')!;
    expect(serve.options.find((o) => o.long === '--outer-workers')).toBeDefined();
    const { defaultRunConfig } = await import('../server/run/config.ts');
    expect(defaultRunConfig().outerWorkers).toBe(2);
  });

  it("deltas submitted together (a mixed group's members) wait for the step one of them starts, instead of failing", async () => {
    const ts = await startTestServer({ flags: { mode: 'async', codec: 'int8' } });
    const sockets: Socket[] = [];
    try {
      const hello = async (name: string) => {
        const s = io(`${ts.url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
        sockets.push(s);
        const r = await new Promise<{ ok: boolean; value: { islandId: string; assignment: Assignment } }>((done) =>
          s.on('connect', () =>
            s.emit('hello', { protocolVersion: PROTOCOL_VERSION, caps: { engine: 'cpu', name } }, done),
          ),
        );
        const asg = r.value.assignment;
        const delta = new Float32Array(asg.paramCount).map((_, i) => 1e-3 * Math.sin(i + name.length));
        const meta = {
          islandId: r.value.islandId,
          roundId: asg.roundId,
          baseVersion: asg.baseVersion,
          seq: 1,
          steps: asg.innerSteps,
          tokens: asg.innerSteps * asg.batchSize * asg.seqLen,
          lossFirst: 3,
          lossLast: 2.5,
          lossMean: 2.7,
          elapsedMs: 1,
        };
        return {
          meta,
          frame: encodeDelta(delta, asg.codec),
          mixed: { delta, norm: Math.hypot(...delta.subarray(0, 4096)) },
        };
      };
      const [x, a, b] = [await hello('x'), await hello('a'), await hello('b')];
      expect(ts.server.run.outerWorkers).toBeGreaterThan(0);
      const islands = ts.server.run.islands;
      const px = islands.submit(x.meta, x.frame, x.mixed); // opens a merge window (a and b still work)
      for (let i = 0; i < 20; i++) await Promise.resolve();
      const until = Date.now() + 50;
      while (Date.now() < until) {
        /* the window's deadline passes before its timer can fire */
      }
      // a's submit closes the window and starts the step on the workers; b's comes right after it
      const [aa, ab, ax] = await Promise.all([
        islands.submit(a.meta, a.frame, a.mixed),
        islands.submit(b.meta, b.frame, b.mixed),
        px,
      ]);
      for (const ack of [aa, ab, ax]) expect(ack.status).toBe('applied');
      expect(ts.server.run.version).toBeGreaterThanOrEqual(2);
    } finally {
      for (const s of sockets) s.disconnect();
      await ts.close();
    }
  });

  it('a server whose ban closes a round takes that round’s step in the workers, then checkpoints', async () => {
    const ts = await startTestServer({ adminToken: 'tok', flags: { mode: 'sync', codec: 'int8' } }); // a dense codec: its downlink is not deflated, so the workers take the step
    const sockets: Socket[] = [];
    try {
      const hello = async (name: string) => {
        const s = io(`${ts.url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
        sockets.push(s);
        return {
          s,
          r: await new Promise<{ ok: boolean; value: { islandId: string; assignment: Assignment } }>((done) =>
            s.on('connect', () =>
              s.emit('hello', { protocolVersion: PROTOCOL_VERSION, caps: { engine: 'cpu', name } }, done),
            ),
          ),
        };
      };
      const a = await hello('a');
      const b = await hello('b');
      expect(ts.server.run.outerWorkers).toBeGreaterThan(0);
      const asg = a.r.value.assignment;
      const meta = {
        islandId: a.r.value.islandId,
        roundId: asg.roundId,
        baseVersion: asg.baseVersion,
        seq: 1,
        steps: asg.innerSteps,
        tokens: asg.innerSteps * asg.batchSize * asg.seqLen,
        lossFirst: 3,
        lossLast: 2.5,
        lossMean: 2.7,
        elapsedMs: 1,
      };
      const frame = encodeDelta(
        new Float32Array(asg.paramCount).map((_, i) => 1e-3 * Math.sin(i)),
        asg.codec,
      ); // the assignment's codec
      const ack = new Promise<{ ok: boolean; value: { status: string; version: number } }>((done) =>
        a.s.emit('delta', { meta, frame }, done),
      );
      // b never reports: banning it closes the round, and A's delta is applied by the workers
      const ban = await fetch(`${ts.url}/api/admin/islands/${b.r.value.islandId}/ban`, {
        method: 'POST',
        headers: { authorization: 'Bearer tok', 'content-type': 'application/json' },
        body: '{}',
      });
      expect(ban.status).toBe(200);
      expect(await ack).toMatchObject({ ok: true, value: { status: 'applied', version: 1 } });
      expect(ts.server.run.store.listCheckpoints().map((c) => c.version)).toContain(1);
    } finally {
      for (const s of sockets) s.disconnect();
      await ts.close();
    }
  });
});
