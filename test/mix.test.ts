// Butterfly mixing (core/mix): the reduce-scatter gives every member its fragment of the group's
// token-weighted mean bit for bit as anyone recomputes it; the all-gather rebuilds the frame; the
// broker settles a group from honest uploads, falls back when a member is missing, and an audit
// pins a lie on the liar only. Then a short simulation through the real coordinator and runtime:
// fewer server bytes per accepted token, every accepted token counted once with members dropping
// mid-exchange, and a lying member caught by the spot checks.

import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { type CodecOptions, encodeDelta } from '../core/codec/index.ts';
import { type FragmentUpload, type GroupIO, type GroupPlan, MixBroker, type Replay, transcriptHash } from '../core/mix/broker.ts';
import {
  type PeerChannel, type PieceChannel, allGather, canonicalFragment, fragmentRanges, mixWeights, pieceRange, reduceScatter,
} from '../core/mix/butterfly.ts';
import { sha256Hex } from '../core/mix/commit.ts';
import type { DeltaMeta } from '../core/protocol.ts';
import { gaussian, mulberry32 } from '../core/random.ts';
import { loadCorpus } from '../server/corpus.ts';
import { runRow } from '../server/simulate/row.ts';
import { heterogeneous, mixed } from '../server/simulate/scenarios.ts';
import type { SimRow } from '../server/simulate/types.ts';

/** In-memory channels among k members; `lie(from, stage, payload)` may rewrite what a member sends. */
function mesh<T>(lie?: (from: number, stage: number, v: T) => T, dead?: number) {
  const box = new Map<string, { v?: T; wake?: (v: T | null) => void }>();
  const slot = (key: string) => { let s = box.get(key); if (!s) box.set(key, (s = {})); return s; };
  return (me: number) => ({
    send: async (to: number, stage: number, v: T) => {
      const s = slot(`${me}>${to}@${stage}`);
      const out = lie ? lie(me, stage, v) : v;
      if (s.wake) s.wake(out); else s.v = out;
    },
    recv: (from: number, stage: number) => new Promise<T | null>((resolve) => {
      if (from === dead) return resolve(null);
      const s = slot(`${from}>${me}@${stage}`);
      if (s.v !== undefined) resolve(s.v);
      else { s.wake = resolve; setTimeout(() => resolve(null), 200); } // a peer that stopped sending: timed out
    }),
  });
}

function randomDeltas(k: number, n: number, seed: number): Float32Array[] {
  const r = gaussian(mulberry32(seed));
  return Array.from({ length: k }, () => Float32Array.from({ length: n }, () => r() * 1e-2));
}

const CODEC: CodecOptions = { encoding: 'int8', blockSize: 64, deflate: false };
const meta = (i: number): DeltaMeta => ({ islandId: `island-${i + 1}`, roundId: 1, baseVersion: 0, seq: 1, steps: 4, tokens: 4 * (i + 1) * 16, lossFirst: 3, lossLast: 2.9, lossMean: 2.95, elapsedMs: 100 });

/** A group of k run in memory: plan, each member's reduce-scatter, and a GroupIO over the results. */
async function group(k: number, n: number, opts: { lieInTransit?: number; mixesOther?: number; lieFragment?: number; dropped?: number } = {}) {
  const xs = randomDeltas(k, n, 7 + k);
  const frames = xs.map((x) => encodeDelta(x, CODEC));
  const tokens = xs.map((_, i) => 64 * (i + 1));
  const plan: GroupPlan = { groupId: 1, members: xs.map((_, i) => ({ islandId: `island-${i + 1}`, meta: meta(i), frameHash: sha256Hex(frames[i]), tokens: tokens[i], readyAt: 0 })), ranges: fragmentRanges(n, k, 64), weights: mixWeights(tokens) };
  // members mix what the server would decode of their frames
  const { decodeDelta } = await import('../core/codec/index.ts');
  const dx = frames.map((f) => { const d = decodeDelta(f, n); if (!d.ok) throw new Error(d.error.message); return d.value.slice(); });
  const net = mesh<Float32Array>((from, stage, v) => (from === opts.lieInTransit && stage === 1 ? v.map((t) => -t) : v), opts.dropped);
  const mixedX = (x: Float32Array, i: number) => (i === opts.mixesOther ? x.map((t) => 2 * t) : x);
  const results = await Promise.all(dx.map((x, i) => (i === opts.dropped ? Promise.resolve(null) : reduceScatter(i, k, mixedX(x, i), plan.weights, plan.ranges, net(i) as PeerChannel))));
  const logs = results.map((r) => r && { sent: r.log.sent.map((v) => sha256Hex(v)), received: r.log.received.map((v) => sha256Hex(v)) });
  const uploads: Array<FragmentUpload | null> = results.map((r, i) => {
    if (!r) return null;
    const f = i === opts.lieFragment ? r.fragment.map((t) => -t) : r.fragment;
    return { frame: encodeDelta(f, CODEC), transcript: transcriptHash(logs[i]!.sent, logs[i]!.received) };
  });
  const io: GroupIO = {
    fragment: async (j) => uploads[j],
    check: async (c, j) => {
      const [lo, hi] = plan.ranges[j];
      const right = canonicalFragment(dx, plan.weights, [lo, hi]);
      const f = c === opts.lieFragment ? right.map((t) => -t) : right;
      const received = dx.map((x, m) => sha256Hex(Float32Array.from(x.subarray(lo, hi), (t) => plan.weights[m] * t)));
      return { frame: encodeDelta(f, CODEC), transcript: '', received };
    },
    replay: async (j): Promise<Replay | null> => (logs[j] ? { frame: frames[j], ...logs[j]! } : null),
  };
  return { plan, dx, results, io };
}

describe('butterfly mixing', () => {
  it('SHA-256 commitments agree with node:crypto', () => {
    for (const n of [0, 3, 55, 56, 64, 119, 1000]) {
      const b = Uint8Array.from({ length: n }, (_, i) => (i * 31 + 7) & 255);
      expect(sha256Hex(b)).toBe(createHash('sha256').update(b).digest('hex'));
    }
  });

  it('reduce-scatter: member j holds fragment j of the token-weighted mean, bit for bit as recomputed; the all-gather rebuilds a frame', async () => {
    for (const k of [2, 4, 8]) {
      const n = 1000;
      const { plan, dx, results } = await group(k, n);
      const W = plan.members.reduce((a, m) => a + m.tokens, 0);
      for (let j = 0; j < k; j++) {
        const mine = results[j]!.fragment;
        const [lo, hi] = plan.ranges[j];
        expect(mine).toEqual(canonicalFragment(dx, plan.weights, [lo, hi]));
        for (const t of [lo, hi - 1]) {
          const exact = dx.reduce((a, x, m) => a + (plan.members[m].tokens / W) * x[t], 0);
          expect(mine[t - lo]).toBeCloseTo(exact, 6);
        }
      }
      const frame = Uint8Array.from({ length: 777 }, (_, i) => i & 255);
      const pieces = mesh<Map<number, Uint8Array>>();
      const got = await Promise.all(Array.from({ length: k }, (_, i) => allGather(i, k, frame.slice(...pieceRange(777, k, i)), pieces(i) as PieceChannel)));
      for (const g of got) expect(g).toEqual(frame);
    }
  });

  it('settles honest uploads into the group mean; a missing member sends everyone to direct upload', async () => {
    const broker = new MixBroker({ k: 4, formWaitMs: 100, spotRate: 1 }, 1000, 64, mulberry32(3));
    const g = await group(4, 1000);
    const out = await broker.settle(g.plan, g.io, CODEC);
    expect(out.kind).toBe('mixed');
    if (out.kind !== 'mixed') return;
    expect(out.implicated).toEqual([]);
    expect(out.accepted).toHaveLength(4);
    expect(out.checks).toBe(4);
    const dropped = await group(4, 1000, { dropped: 2 });
    const fell = await broker.settle(dropped.plan, dropped.io, CODEC);
    expect(fell.kind).toBe('direct');
  });

  it('groups form from k ready islands; one left waiting goes direct after formWaitMs', () => {
    const broker = new MixBroker({ k: 2, formWaitMs: 100, spotRate: 0 }, 10, 1, mulberry32(1));
    const ready = (i: number, at: number) => ({ islandId: `i${i}`, meta: meta(i), frameHash: '', tokens: 10, readyAt: at });
    expect(broker.offer(ready(0, 0))).toBeNull();
    expect(broker.offer(ready(1, 10))?.members.map((m) => m.islandId)).toEqual(['i0', 'i1']);
    expect(broker.offer(ready(2, 20))).toBeNull();
    expect(broker.expire(119)).toEqual([]);
    expect(broker.expire(120).map((m) => m.islandId)).toEqual(['i2']);
  });

  it('an audit pins a wrong fragment on its uploader, a wrong partial sum on its sender, never on the honest', async () => {
    const broker = new MixBroker({ k: 4, formWaitMs: 100, spotRate: 1 }, 1000, 64, mulberry32(5));
    const liar = await group(4, 1000, { lieFragment: 1 });
    const a = await broker.settle(liar.plan, liar.io, CODEC);
    expect(a.kind === 'mixed' && a.audited).toBe(true);
    if (a.kind !== 'mixed') return;
    expect(a.implicated.map((x) => x.islandId)).toEqual(['island-2']);
    expect(a.accepted.map((m) => m.islandId)).toEqual(['island-1', 'island-3', 'island-4']);
    // the server's mean over the honest three, from their committed Δs
    const honest = [0, 2, 3], W = honest.reduce((s, i) => s + liar.plan.members[i].tokens, 0);
    expect(a.delta[10]).toBeCloseTo(honest.reduce((s, i) => s + (liar.plan.members[i].tokens / W) * liar.dx[i][10], 0), 6);
    // member 0 mixes another Δ than it committed to: its partial sums are wrong as it logs them, so
    // it alone is implicated, not the partners whose fragments it spoiled
    const other = await group(4, 1000, { mixesOther: 0 });
    const b = await broker.settle(other.plan, other.io, CODEC);
    expect(b.kind === 'mixed' && b.implicated.map((x) => x.islandId)).toEqual(['island-1']);
    // member 0's stage-1 message is changed after it logged it: its log and member 2's disagree and
    // neither can be shown to lie, so neither is counted against (a dispute), and the honest mean stands
    const transit = await group(4, 1000, { lieInTransit: 0 });
    const c = await broker.settle(transit.plan, transit.io, CODEC);
    expect(c.kind === 'mixed' && c.implicated).toEqual([]);
    expect(c.kind === 'mixed' && c.disputes).toContainEqual(['island-3', 'island-1']);
    expect(c.kind === 'mixed' && c.accepted).toHaveLength(4);
  });

  it('simulated: mixing in groups of 4 cuts server bytes per accepted token; drops mid-exchange lose nothing; a liar is caught', async () => {
    const ds = loadCorpus();
    const common = { model: 'tiny' as const, seqLen: 32, seed: 1, evals: 1, evalBatches: 2, evalBatchSize: 4 };
    const d = { islands: 8, seeds: [1], batchSize: 4, tokens: 16_000, innerSteps: 8, baseTokensPerSec: 2000, seqLen: 32, lr: { maxLr: 3e-3, minLr: 3e-4, warmupTokens: 2048 } };
    const het = heterogeneous(8, 4);
    const rm = (1000 * 8 * Math.max(...het.map((s) => s.batchSize)) * 32) / (4 * 2000);
    const direct: SimRow = { ...mixed('direct', d, het, 4, rm, 'int8'), mix: undefined };
    const row = mixed('mix4', d, het.map((s, i) => ({ ...s, mixDropProb: i === 0 ? 0.5 : 0, offlineMs: rm / 2, behaviour: i === 7 ? 'lie-fragment' as const : 'honest' as const })), 4, rm, 'int8');
    row.mix!.spotRate = 0.5;
    const [a, b] = [await runRow(direct, { common, ds }), await runRow(row, { common, ds })];
    expect(b.mix!.mixedGroups).toBeGreaterThan(2);
    expect(b.mix!.implicated).toBe(1);
    expect(b.perIsland[7].rejected['E_MIX_MISMATCH'] ?? 0).toBe(1);
    for (const r of b.perIsland.slice(0, 7)) expect(r.rejected['E_MIX_MISMATCH'] ?? 0).toBe(0);
    expect(b.mix!.fallbacks).toBeGreaterThan(0); // island-1 dropped mid-exchange at least once
    // every accepted token counted once: θ's tokens are the sum of the islands' acknowledged work
    expect(b.tokens).toBe(b.perIsland.reduce((s, r) => s + r.acceptedTokens, 0));
    expect(b.server.inPerToken).toBeLessThan(a.server.inPerToken / 2);
    expect(b.server.outPerToken).toBeLessThan(a.server.outPerToken / 2);
    expect(b.evalLoss).toBeLessThan(a.curve[0].evalLoss);
  }, 120_000);
});
