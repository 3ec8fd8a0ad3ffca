// The coordinator against plain references computed here: averaging, outer optimizers, rounds,
// staleness, DyLU, validation (every rejection leaves θ and the optimizer untouched), replicas.

import { describe, expect, it } from 'vitest';
import { crc32, decodeDelta, encodeDelta, type CodecOptions } from '../core/codec/index.ts';
import { NormHistory, normSteps } from '../core/coord/aggregate.ts';
import {
  Coordinator,
  type CoordinatorConfigPatch,
  type CoordinatorEvent,
  applyUpdateMessage,
  dyluInnerSteps,
  hashParams,
  stalenessWeight,
  trimmedMean,
} from '../core/coord/index.ts';
import { SPARSE_MAX_INNER_STEPS, codecSetting, roundStepsCap } from '../core/coord/config.ts';
import type { Assignment, DeltaMeta, IslandCaps } from '../core/protocol.ts';
import { ErrorCode, innerLearningRate } from '../core/protocol.ts';
import { gaussian, mulberry32 } from '../core/random.ts';

const N = 256;
const CAPS: IslandCaps = { engine: 'cpu' };
const F32: CodecOptions = { encoding: 'f32' };

function randomVec(seed: number, scale = 0.01, n = N): Float32Array {
  const r = gaussian(mulberry32(seed));
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = scale * r();
  return x;
}

/** A coordinator whose downlink is exact (f32), so θ can be compared with a float64 reference. */
function makeCoord(config: CoordinatorConfigPatch, seed = 1): Coordinator {
  return new Coordinator({
    params: randomVec(seed, 0.02),
    config: {
      downlink: { encoding: 'f32', blockSize: 64 },
      uplink: F32,
      normBound: { factor: 0 },
      batchSize: 4,
      seqLen: 8,
      innerSteps: 10,
      ...config,
    },
  });
}

function join(c: Coordinator, now = 0, caps: IslandCaps = CAPS): { id: string; a: Assignment } {
  const j = c.join({ caps }, now);
  if (!j.ok) throw new Error(j.error.message);
  return { id: j.value.islandId, a: j.value.assignment! };
}

let seqs = new Map<string, number>();
function meta(a: Assignment, o: Partial<DeltaMeta> = {}): DeltaMeta {
  const seq = (seqs.get(a.islandId) ?? 0) + 1;
  seqs.set(a.islandId, seq);
  const steps = o.steps ?? a.innerSteps;
  return {
    islandId: a.islandId,
    roundId: a.roundId,
    baseVersion: a.baseVersion,
    seq,
    steps,
    tokens: steps * a.batchSize * a.seqLen,
    lossFirst: 3,
    lossLast: 2,
    lossMean: 2.5,
    elapsedMs: 1000,
    ...o,
  };
}

const updates = (evs: CoordinatorEvent[]) =>
  evs.filter((e): e is Extract<CoordinatorEvent, { type: 'update' }> => e.type === 'update');

function expectClose(actual: Float32Array, expected: Float64Array | Float32Array, tol = 1e-6): void {
  let worst = 0;
  for (let i = 0; i < actual.length; i++) worst = Math.max(worst, Math.abs(actual[i] - expected[i]));
  expect(worst).toBeLessThan(tol);
}

describe('sync averaging', () => {
  it('averages deltas weighted by tokens (FedAvg: lr 1, momentum 0)', () => {
    seqs = new Map();
    const c = makeCoord({ mode: 'sync', outer: { kind: 'sgd', lr: 1, momentum: 0 } });
    const theta0 = Float64Array.from(c.params());
    const isl = [join(c), join(c), join(c)];
    const steps = [1, 2, 7]; // tokens 32, 64, 224: the server derives them from the steps
    const ds = isl.map((_, k) => randomVec(10 + k));
    isl.forEach(({ a }, k) => {
      const r = c.submit({ meta: meta(a, { steps: steps[k] }), frame: encodeDelta(ds[k], F32) }, 10);
      expect(r.ok).toBe(true);
      if (r.ok) expect(r.value.status).toBe(k < 2 ? 'pending' : 'applied');
    });
    const ev = updates(c.drainEvents());
    expect(ev).toHaveLength(1);
    expect(ev[0].contributors.map((x) => x.weight)).toEqual([0.1, 0.2, 0.7]);
    const ref = theta0.map((t, i) => t - (0.1 * ds[0][i] + 0.2 * ds[1][i] + 0.7 * ds[2][i]));
    expectClose(c.params() as Float32Array, ref);
    expect(c.version).toBe(1);
  });

  it('trimmed mean drops the extremes per coordinate', () => {
    const ds = [
      Float32Array.from([1, 10, -5]),
      Float32Array.from([2, 20, 0]),
      Float32Array.from([3, -30, 5]),
      Float32Array.from([100, 0, 1]),
    ];
    const out = new Float32Array(3);
    trimmedMean(ds, 1, out);
    expect(Array.from(out)).toEqual([2.5, 5, 0.5]);
  });
});

describe('outer optimizers', () => {
  it('Nesterov matches the hand-computed reference over 3 rounds', () => {
    seqs = new Map();
    const lr = 0.7,
      mu = 0.9;
    const c2 = makeCoord({ mode: 'sync', soloPlainStep: false, outer: { kind: 'nesterov', lr, momentum: mu } });
    const theta = Float64Array.from(c2.params());
    const m = new Float64Array(N);
    let asg = join(c2).a;
    for (let r = 0; r < 3; r++) {
      const g = randomVec(100 + r);
      expect(c2.submit({ meta: meta(asg), frame: encodeDelta(g, F32) }, r).ok).toBe(true);
      for (let i = 0; i < N; i++) {
        m[i] = Math.fround(mu * m[i] + g[i]);
        theta[i] -= lr * (g[i] + mu * m[i]);
      }
      expectClose(c2.params() as Float32Array, theta, 1e-6);
      expectClose(c2.outerState().momentum, m, 1e-7);
      const next = c2.nextAssignment(asg.islandId, r + 0.5);
      if (!next.ok || !next.value) throw new Error('no assignment');
      asg = next.value;
    }
  });

  it('delayed Nesterov: plain lr·g/N per arrival, momentum step every N arrivals', () => {
    seqs = new Map();
    const lr = 0.5,
      mu = 0.8,
      period = 2;
    const c = makeCoord({
      mode: 'async',
      asyncWindow: { fraction: 0 },
      soloPlainStep: false,
      staleness: 'none',
      outer: { kind: 'delayed-nesterov', lr, momentum: mu, dnPeriod: period },
    });
    const theta = Float64Array.from(c.params());
    const m = new Float64Array(N),
      b = new Float64Array(N);
    let asg = join(c).a; // one active island: s = w / 1 = 1 (tokens = expected)
    for (let k = 0; k < 5; k++) {
      const g = randomVec(200 + k);
      const r = c.submit({ meta: meta(asg), frame: encodeDelta(g, F32) }, k);
      expect(r.ok && r.value.status).toBe('applied');
      const flush = (k + 1) % period === 0;
      for (let i = 0; i < N; i++) {
        let u = lr * g[i];
        b[i] += g[i];
        if (flush) {
          m[i] = mu * m[i] + b[i];
          u += lr * mu * m[i];
          b[i] = 0;
        }
        theta[i] -= u;
      }
      expectClose(c.params() as Float32Array, theta, 1e-6);
      expect(c.outerState().bufferCount).toBe(flush ? 0 : 1);
      const next = c.nextAssignment(asg.islandId, k + 0.5);
      if (!next.ok || !next.value) throw new Error('no assignment');
      asg = next.value;
    }
  });
});

describe('sync rounds: quorum and grace window', () => {
  it('closes at quorum + grace, not before; late deltas join the next round discounted', () => {
    seqs = new Map();
    const c = makeCoord({
      mode: 'sync',
      outer: { kind: 'sgd', lr: 1, momentum: 0 },
      quorum: 0.5,
      grace: { factor: 2, floorMs: 100, capMs: 60_000 },
      staleness: 'inv-sqrt',
    });
    const isl = [join(c), join(c), join(c), join(c)];
    c.drainEvents();
    expect(c.submit({ meta: meta(isl[0].a), frame: encodeDelta(randomVec(1), F32) }, 1000).ok).toBe(true);
    expect(c.nextDeadline()).toBe(60_000); // one of four: no quorum yet, only the island timeout
    expect(c.submit({ meta: meta(isl[1].a), frame: encodeDelta(randomVec(2), F32) }, 1200).ok).toBe(true);
    // quorum (2 of 4) met; grace = 2 × median(1000, 1200) = 2200 ms after the open
    expect(c.nextDeadline()).toBe(2200);
    c.tick(2199);
    expect(c.version).toBe(0);
    c.tick(2200);
    expect(c.version).toBe(1);
    const ev = updates(c.drainEvents());
    expect(ev[0].contributors.map((x) => x.islandId)).toEqual(['island-1', 'island-2']);
    // islands 1 and 2 take round-1 work; island 3 returns late (round 0 closed): folded into round 1
    const a1 = c.nextAssignment('island-1', 2300),
      a2 = c.nextAssignment('island-2', 2300);
    if (!a1.ok || !a1.value || !a2.ok || !a2.value) throw new Error('expected assignments');
    expect(a1.value.roundId).toBe(1);
    const late = c.submit({ meta: meta(isl[2].a, { tokens: 320 }), frame: encodeDelta(randomVec(3), F32) }, 2500);
    expect(late.ok && late.value.status).toBe('pending');
    if (late.ok) expect(late.value.staleness).toBe(1);
    c.drainEvents();
    c.submit({ meta: meta(a1.value, { tokens: 320 }), frame: encodeDelta(randomVec(4), F32) }, 3000);
    c.submit({ meta: meta(a2.value, { tokens: 320 }), frame: encodeDelta(randomVec(5), F32) }, 3100);
    const ev2 = updates(c.drainEvents());
    expect(ev2).toHaveLength(1);
    const w = Object.fromEntries(ev2[0].contributors.map((x) => [x.islandId, x.weight]));
    // tokens 320 each, the late one 320 × 1/√2
    const s = 1 / Math.sqrt(2);
    expect(w['island-3']).toBeCloseTo(s / (2 + s), 10);
    expect(w['island-1']).toBeCloseTo(1 / (2 + s), 10);
  });

  it('a departed island never stalls the round; the round timeout closes without quorum', () => {
    seqs = new Map();
    const c = makeCoord({
      mode: 'sync',
      quorum: 1,
      roundTimeoutMs: 5000,
      grace: { factor: 1, floorMs: 0, capMs: 1000 },
    });
    const a = join(c),
      b = join(c),
      d = join(c);
    c.submit({ meta: meta(a.a), frame: encodeDelta(randomVec(1), F32) }, 100);
    expect(c.version).toBe(0);
    c.leave(b.id, 200); // gone: only d is still awaited
    expect(c.version).toBe(0);
    c.tick(4999);
    expect(c.version).toBe(0);
    c.tick(5000); // quorum 1.0 never met (d is silent), the timeout closes the round
    expect(c.version).toBe(1);
    void d;
  });

  it('rounds close as soon as every live member has returned', () => {
    seqs = new Map();
    const c = makeCoord({ mode: 'sync', quorum: 1 });
    const a = join(c),
      b = join(c);
    c.submit({ meta: meta(a.a), frame: encodeDelta(randomVec(1), F32) }, 10);
    expect(c.nextAssignment(a.id, 11)).toEqual({ ok: true, value: null }); // waits for the round
    c.submit({ meta: meta(b.a), frame: encodeDelta(randomVec(2), F32) }, 20);
    const evs = c.drainEvents();
    expect(updates(evs)).toHaveLength(1);
    const asg = evs.filter((e) => e.type === 'assignment');
    expect(asg).toHaveLength(1); // the island that waited gets its round-1 assignment as an event
    expect(asg[0].type === 'assignment' && asg[0].result.ok && asg[0].result.value.roundId).toBe(1);
  });
});

describe('sync rounds: rejected members', () => {
  it('a member whose delta was rejected no longer holds the round, and waits for the next one', () => {
    seqs = new Map();
    const c = makeCoord({ mode: 'sync', quorum: 1, roundTimeoutMs: 1e9, grace: { factor: 1, floorMs: 0, capMs: 1e9 } });
    const a = join(c),
      b = join(c),
      bad = join(c);
    c.submit({ meta: meta(a.a), frame: encodeDelta(randomVec(1), F32) }, 10);
    const x = randomVec(2);
    x[0] = NaN;
    const r = c.submit({ meta: meta(bad.a), frame: encodeDelta(x, F32) }, 11);
    expect(r.ok ? 'ok' : r.error.code).toBe(ErrorCode.NON_FINITE);
    expect(c.nextAssignment(bad.id, 12)).toEqual({ ok: true, value: null }); // its turn is used
    c.submit({ meta: meta(b.a), frame: encodeDelta(randomVec(3), F32) }, 20); // closes: a and b are all that is awaited
    expect(c.version).toBe(1);
    const asg = c
      .drainEvents()
      .filter((e) => e.type === 'assignment')
      .map((e) => e.type === 'assignment' && e.islandId);
    expect(asg).toContain(bad.id);
  });

  it('assignments carry minSeq so an island that lost its counter is not rejected as a replay', () => {
    seqs = new Map();
    const c = makeCoord({ mode: 'async' });
    const { id, a } = join(c);
    expect(a.minSeq).toBe(0);
    c.submit({ meta: meta(a, { seq: 7 }), frame: encodeDelta(randomVec(1), F32) }, 1);
    const again = c.join({ caps: CAPS, resumeIslandId: id }, 2); // a restarted island rejoins
    expect(again.ok && again.value.assignment?.minSeq).toBe(8);
  });
});

describe('staleness', () => {
  it('weights follow the staleness function; past maxStaleness → E_STALE', () => {
    expect(stalenessWeight('inv-sqrt', 0)).toBe(1);
    expect(stalenessWeight('inv-sqrt', 3)).toBeCloseTo(0.5, 12);
    expect(stalenessWeight('inv-linear', 3)).toBeCloseTo(0.25, 12);
    expect(stalenessWeight('none', 9)).toBe(1);
    seqs = new Map();
    const c = makeCoord({
      mode: 'async',
      asyncWindow: { fraction: 0 },
      maxStaleness: 2,
      staleness: 'inv-sqrt',
      outer: { kind: 'sgd', lr: 1, momentum: 0 },
    });
    const slow = join(c),
      fast = join(c);
    let fa = fast.a;
    for (let k = 0; k < 2; k++) {
      expect(c.submit({ meta: meta(fa), frame: encodeDelta(randomVec(k), F32) }, k).ok).toBe(true);
      const n = c.nextAssignment(fast.id, k);
      if (!n.ok || !n.value) throw new Error('no assignment');
      fa = n.value;
    }
    // slow is 2 versions behind: accepted with weight 1/√3 (× its token share)
    const h0 = c.hash;
    const ok2 = c.submit({ meta: meta(slow.a), frame: encodeDelta(randomVec(9), F32) }, 5);
    expect(ok2.ok && ok2.value.staleness).toBe(2);
    const w = updates(c.drainEvents()).at(-1)!.contributors[0].weight;
    expect(w).toBeCloseTo(1 / Math.sqrt(3), 10);
    expect(c.hash).not.toBe(h0);
    // a delta 3 versions old is rejected
    const sa = c.nextAssignment(slow.id, 6);
    if (!sa.ok || !sa.value) throw new Error('no assignment');
    for (let k = 0; k < 3; k++) {
      c.submit({ meta: meta(fa), frame: encodeDelta(randomVec(20 + k), F32) }, 7 + k);
      const n = c.nextAssignment(fast.id, 7 + k);
      if (!n.ok || !n.value) throw new Error('no assignment');
      fa = n.value;
    }
    const r = c.submit({ meta: meta(sa.value), frame: encodeDelta(randomVec(30), F32) }, 20);
    expect(r.ok ? 'ok' : r.error.code).toBe(ErrorCode.STALE);
  });
});

describe('DyLU', () => {
  const base = { batchSize: 8, seqLen: 32, innerSteps: 100, minInnerSteps: 5, maxInnerSteps: 400 };
  it('time rule: steps that take targetRoundMs at the island speed', () => {
    // 10 s at 2048 tok/s with 256 tokens per step = 80 steps
    expect(dyluInnerSteps({ ...base, tokensPerSec: 2048, fastestStepsPerSec: undefined, targetRoundMs: 10_000 })).toBe(
      80,
    );
    expect(dyluInnerSteps({ ...base, tokensPerSec: 8192, fastestStepsPerSec: undefined, targetRoundMs: 10_000 })).toBe(
      320,
    );
    expect(dyluInnerSteps({ ...base, tokensPerSec: 1, fastestStepsPerSec: undefined, targetRoundMs: 10_000 })).toBe(5); // min
    expect(dyluInnerSteps({ ...base, tokensPerSec: 1e6, fastestStepsPerSec: undefined, targetRoundMs: 10_000 })).toBe(
      400,
    ); // max
    expect(dyluInnerSteps({ ...base, tokensPerSec: undefined, fastestStepsPerSec: 10, targetRoundMs: 10_000 })).toBe(
      100,
    );
  });
  it('ratio rule (Async Local-SGD): H · (steps/s) / (steps/s)_max, seconds per step compared, not tokens/s', () => {
    // 256 tokens per step: 1000 tok/s = 3.9 steps/s against 15.6 steps/s
    expect(dyluInnerSteps({ ...base, tokensPerSec: 1000, fastestStepsPerSec: 4000 / 256, targetRoundMs: 0 })).toBe(25);
    expect(dyluInnerSteps({ ...base, tokensPerSec: 4000, fastestStepsPerSec: 4000 / 256, targetRoundMs: 0 })).toBe(100);
    // same tokens/s, half the batch: twice the steps per second, so the same number of steps as the fastest
    expect(
      dyluInnerSteps({ ...base, batchSize: 4, tokensPerSec: 2000, fastestStepsPerSec: 2000 / 128, targetRoundMs: 0 }),
    ).toBe(100);
  });
  it('the coordinator assigns islands of 1× and 4× speed steps that take the same time', () => {
    const c = makeCoord({
      mode: 'async',
      dylu: true,
      targetRoundMs: 8000,
      batchSize: 8,
      seqLen: 32,
      maxInnerSteps: 1000,
    });
    const slow = join(c, 0, { engine: 'cpu', tokensPerSec: 1024 }).a;
    const fast = join(c, 0, { engine: 'webgpu', tokensPerSec: 4096 }).a;
    expect(slow.innerSteps).toBe(32);
    expect(fast.innerSteps).toBe(128);
    const t = (a: Assignment, tps: number) => (a.innerSteps * a.batchSize * a.seqLen) / tps;
    expect(t(slow, 1024)).toBeCloseTo(t(fast, 4096), 9);
  });
  it('the sparse uplink caps a round at SPARSE_MAX_INNER_STEPS on either rule and without DyLU; f32 at maxInnerSteps', () => {
    const run = { mode: 'async', batchSize: 8, seqLen: 32, maxInnerSteps: 1000, innerSteps: 400 } as const;
    const fast = { engine: 'webgpu', tokensPerSec: 4096 } as const; // 128 steps in 8 s
    const sparse = { ...codecSetting('sparse') };
    for (const rule of [{ dylu: true, targetRoundMs: 8000 }, { dylu: true, targetRoundMs: 0 }, { dylu: false }]) {
      expect(join(makeCoord({ ...run, ...rule, ...sparse }), 0, fast).a.innerSteps).toBe(SPARSE_MAX_INNER_STEPS);
    }
    expect(join(makeCoord({ ...run, dylu: true, targetRoundMs: 8000 }), 0, fast).a.innerSteps).toBe(128);
    expect(join(makeCoord({ ...run, dylu: false }), 0, fast).a.innerSteps).toBe(400);
    expect(roundStepsCap({ maxInnerSteps: 20, uplink: { encoding: 'sparse' } })).toBe(20);
  });
  it('sync: the first island on an idle or fresh server gets a whole round from its declared speed, a late joiner the time left', () => {
    const c = makeCoord({
      mode: 'sync',
      dylu: true,
      targetRoundMs: 8000,
      batchSize: 8,
      seqLen: 32,
      minInnerSteps: 1,
      maxInnerSteps: 1000,
    });
    // the round has been open (and empty) for a minute when the volunteer arrives
    expect(join(c, 60_000, { engine: 'webgpu', tokensPerSec: 1024 }).a.innerSteps).toBe(32);
    expect(join(c, 64_000, { engine: 'webgpu', tokensPerSec: 1024 }).a.innerSteps).toBe(16);
    // a fresh server: the first island half a round after it opened still gets a whole round
    const fresh = makeCoord({
      mode: 'sync',
      dylu: true,
      targetRoundMs: 8000,
      batchSize: 8,
      seqLen: 32,
      minInnerSteps: 1,
      maxInnerSteps: 1000,
    });
    expect(join(fresh, 4000, { engine: 'webgpu', tokensPerSec: 1024 }).a.innerSteps).toBe(32);
  });
});

describe('validation: every rejection leaves θ and the optimizer state unchanged', () => {
  it('rejects each bad delta with its code', () => {
    seqs = new Map();
    const c = makeCoord({
      mode: 'async',
      asyncWindow: { fraction: 0 },
      maxStaleness: 1,
      uplink: { encoding: 'int8' },
      normBound: { factor: 4, window: 16, minHistory: 3 },
      outer: { kind: 'delayed-nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 2 },
    });
    const good = join(c),
      other = join(c),
      victim = join(c);
    let ga = good.a;
    const next = () => {
      const n = c.nextAssignment(good.id, 1);
      if (!n.ok || !n.value) throw new Error('no assignment');
      ga = n.value;
    };
    // history for the norm bound (and a non-trivial optimizer state)
    for (let k = 0; k < 3; k++) {
      expect(c.submit({ meta: meta(ga), frame: encodeDelta(randomVec(40 + k), { encoding: 'int8' }) }, 1).ok).toBe(
        true,
      );
      next();
    }
    expect(c.outerState().bufferCount).toBe(1);
    const int8 = (x: Float32Array) => encodeDelta(x, { encoding: 'int8' });
    const fixCrc = (f: Uint8Array) => {
      const head = crc32(f.subarray(0, 28));
      new DataView(f.buffer, f.byteOffset).setUint32(28, crc32(f.subarray(32), head), true);
      return f;
    };
    const stateKey = () => {
      const s = c.outerState();
      return `${c.hash}|${hashParams(s.momentum)}|${hashParams(s.buffer)}|${s.bufferCount}|${s.steps}|${c.version}`;
    };
    const cases: Array<[string, () => ReturnType<Coordinator['submit']>]> = [
      [
        ErrorCode.UNKNOWN_ISLAND,
        () => c.submit({ meta: { ...meta(ga), islandId: 'nobody' }, frame: int8(randomVec(1)) }, 2),
      ],
      [ErrorCode.WRONG_SIZE, () => c.submit({ meta: meta(ga), frame: int8(randomVec(1, 0.01, N + 1)) }, 2)],
      [ErrorCode.TRUNCATED, () => c.submit({ meta: meta(ga), frame: int8(randomVec(1)).subarray(0, 20) }, 2)],
      [
        ErrorCode.CRC,
        () => {
          const f = int8(randomVec(1));
          f[40] ^= 1;
          return c.submit({ meta: meta(ga), frame: f }, 2);
        },
      ],
      [
        ErrorCode.CORRUPT,
        () => {
          const f = int8(randomVec(1));
          f[32 + 4 * 4 + 7] = 0x80;
          return c.submit({ meta: meta(ga), frame: fixCrc(f) }, 2);
        },
      ],
      [
        ErrorCode.NON_FINITE,
        () => {
          const x = randomVec(1);
          x[3] = NaN;
          return c.submit({ meta: meta(ga), frame: int8(x) }, 2);
        },
      ],
      [
        ErrorCode.FUTURE_VERSION,
        () => c.submit({ meta: meta(ga, { baseVersion: c.version + 1 }), frame: int8(randomVec(1)) }, 2),
      ],
      [ErrorCode.STALE, () => c.submit({ meta: meta(other.a), frame: int8(randomVec(1)) }, 2)],
      [
        ErrorCode.NORM_BOUND,
        () => {
          const x = randomVec(1);
          for (let i = 0; i < N; i++) x[i] *= 100;
          return c.submit({ meta: meta(ga), frame: int8(x) }, 2);
        },
      ],
      [ErrorCode.DUPLICATE, () => c.submit({ meta: { ...meta(ga), seq: 1 }, frame: int8(randomVec(1)) }, 2)],
      [
        ErrorCode.PAUSED,
        () => {
          c.pause();
          const r = c.submit({ meta: meta(ga), frame: int8(randomVec(1)) }, 2);
          c.resume(3);
          return r;
        },
      ],
      [
        ErrorCode.BANNED,
        () => {
          c.ban(victim.id, 2);
          return c.submit({ meta: meta(victim.a), frame: int8(randomVec(1)) }, 2);
        },
      ],
    ];
    for (const [code, run] of cases) {
      const before = stateKey();
      const r = run();
      expect(r.ok ? 'ok' : r.error.code, code).toBe(code);
      expect(stateKey(), code).toBe(before);
    }
    // a second delta for the same round (fresh seq) is a duplicate too
    expect(c.submit({ meta: meta(ga), frame: int8(randomVec(50)) }, 4).ok).toBe(true);
    const before = stateKey();
    const dup = c.submit({ meta: meta(ga), frame: int8(randomVec(51)) }, 4);
    expect(dup.ok ? 'ok' : dup.error.code).toBe(ErrorCode.DUPLICATE);
    expect(stateKey()).toBe(before);
    const totals = c.totals();
    for (const [code] of cases) expect(totals.rejected[code], code).toBeGreaterThanOrEqual(1);
  });

  it('sync: a bad first-round delta is dropped at close (norm bound over the round) and acked as rejected', () => {
    seqs = new Map();
    const c = makeCoord({ mode: 'sync', normBound: { factor: 4, window: 16, minHistory: 3 } });
    const isl = [join(c), join(c), join(c), join(c)];
    isl.forEach(({ a }, k) => {
      const x = randomVec(60 + k);
      if (k === 3) for (let i = 0; i < N; i++) x[i] *= 100;
      expect(c.submit({ meta: meta(a), frame: encodeDelta(x, F32) }, 10 + k).ok).toBe(true);
    });
    const ev = updates(c.drainEvents())[0];
    expect(ev.contributors.map((x) => x.islandId)).toEqual(['island-1', 'island-2', 'island-3']);
    expect(ev.rejected.map((x) => [x.islandId, x.error.code])).toEqual([['island-4', ErrorCode.NORM_BOUND]]);
  });

  it('sync: a round whose every member was rejected at submit closes empty; they get work on the same version', () => {
    seqs = new Map();
    const c = makeCoord({ mode: 'sync', normBound: { factor: 4, window: 16, minHistory: 3 } });
    let isl = [join(c), join(c), join(c)];
    isl.forEach(({ a }, k) =>
      expect(c.submit({ meta: meta(a), frame: encodeDelta(randomVec(70 + k), F32) }, 10 + k).ok).toBe(true),
    );
    c.drainEvents();
    const hash = c.hash;
    isl = isl.map(({ id }) => ({
      id,
      a: (() => {
        const n = c.nextAssignment(id, 20);
        if (!n.ok || !n.value) throw new Error('no assignment');
        return n.value;
      })(),
    }));
    isl.forEach(({ a }, k) => {
      const x = randomVec(80 + k).map((v) => 100 * v);
      const r = c.submit({ meta: meta(a), frame: encodeDelta(x, F32) }, 30 + k);
      expect(r.ok ? 'ok' : r.error.code).toBe(ErrorCode.NORM_BOUND);
      // the first two wait for the round; the third's rejection closes it, so it gets work at once
      const n = c.nextAssignment(a.islandId, 30 + k);
      expect(n.ok && (n.value ? n.value.baseVersion : null)).toBe(k < 2 ? null : 1);
    });
    const ev = c.drainEvents();
    expect(
      ev
        .filter((e) => e.type === 'assignment')
        .map((e) => e.type === 'assignment' && e.result.ok && e.result.value.baseVersion),
    ).toEqual([1, 1]);
    expect(c.hash).toBe(hash);
  });

  it('norm bound: a round longer than the usual one is allowed √(steps / median steps) more, a short one is not', () => {
    const nb = { factor: 4, window: 16, minHistory: 3 };
    const h = new NormHistory();
    // 4-step GPU rounds with score ‖Δ‖/√4 = 0.3 each
    for (let i = 0; i < 8; i++) h.push({ score: 0.3, steps: 4 }, nb.window);
    const bound = h.limiter(nb);
    expect(bound(4)).toBeCloseTo(1.2, 12);
    expect(bound(1)).toBeCloseTo(1.2, 12);
    // an honest 144-step CPU round whose ‖Δ‖ grew linearly (36× the 4-step ‖Δ‖ of 0.6): score 21.6/12 = 1.8
    expect(21.6 / Math.sqrt(144)).toBeLessThanOrEqual(bound(144));
    expect(bound(144)).toBeCloseTo(1.2 * 6, 12);
    // a 4-step delta at 5× the usual norm is still over
    expect(5 * 0.3).toBeGreaterThan(bound(4));
    // the open window counts too; checkpoints without steps fall back to the plain √ rule
    expect(
      h.limiter(nb, [
        { score: 0.3, steps: 400 },
        { score: 0.3, steps: 400 },
      ])(144),
    ).toBeCloseTo(1.2 * 6, 12);
    const old = new NormHistory();
    old.restore([0.3, 0.3, 0.3], undefined);
    expect(old.limiter(nb)(144)).toBeCloseTo(1.2, 12);
    expect(new NormHistory().limiter(nb)(4)).toBe(Infinity);
  });

  it("norm bound: a round is judged at its fresh-AdamW warmup (normSteps), so a newcomer's second round is not over", () => {
    const plan = { localWarmupSteps: 40 };
    // no warmup, or past it: the steps themselves
    expect(normSteps({ localWarmupSteps: 0 }, 8, 0)).toBe(8);
    expect(normSteps(plan, 8, 40)).toBe(8);
    expect(normSteps(undefined, 8, 0)).toBe(8);
    // steps 0–7 and 8–15 of the warmup: Σ((k+1)/40)² = 204/1600 and 1292/1600
    const first = normSteps(plan, 8, 0),
      second = normSteps(plan, 8, 8);
    expect(first).toBeCloseTo(204 / 1600, 12);
    expect(second).toBeCloseTo(1292 / 1600, 12);
    // four first rounds of ‖Δ‖ 1, then an honest second round at 5× the norm (2.5× the lr, Adam's
    // moments still growing): over 4 × the median by the plain √steps rule, within it at its lr
    const nb = { factor: 4, window: 16, minHistory: 3 };
    const plain = new NormHistory(),
      byLr = new NormHistory();
    for (let i = 0; i < 4; i++) {
      plain.push({ score: 1 / Math.sqrt(8), steps: 8 }, nb.window);
      byLr.push({ score: 1 / Math.sqrt(first), steps: 8 }, nb.window);
    }
    expect(plain.judge(5, 8, nb, []).over).toBe(true);
    expect(byLr.judge(5, 8, nb, [], second).over).toBe(false);
    // and a delta 12× the norm is still over
    expect(byLr.judge(12, 8, nb, [], second).over).toBe(true);
  });
});

describe('replicas', () => {
  it('stay bit-identical with the server over 20 int8-quantized updates (hash equality)', () => {
    seqs = new Map();
    const c = new Coordinator({
      params: randomVec(7, 0.02),
      config: {
        mode: 'async',
        asyncWindow: { fraction: 0 },
        uplink: { encoding: 'int4', blockSize: 64 },
        downlink: { encoding: 'int8', blockSize: 64 },
        batchSize: 4,
        seqLen: 8,
        maxStaleness: 100,
        outer: { kind: 'delayed-nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 },
      },
    });
    const replica = { ...c.model() };
    let lagging = { ...c.model() }; // catches up later from updatesSince
    const islands = [join(c), join(c), join(c)].map((x) => x.a);
    let updatesSeen = 0;
    for (let k = 0; k < 20; k++) {
      const i = k % 3;
      const r = c.submit(
        { meta: meta(islands[i]), frame: encodeDelta(randomVec(300 + k), { encoding: 'int4', blockSize: 64 }) },
        k,
      );
      expect(r.ok).toBe(true);
      for (const ev of updates(c.drainEvents())) {
        expect(applyUpdateMessage(replica, ev.update).ok).toBe(true);
        expect(replica.hash).toBe(ev.update.hash);
        updatesSeen++;
      }
      expect(replica.hash).toBe(c.hash);
      expect(hashParams(replica.params)).toBe(hashParams(c.params() as Float32Array));
      const n = c.nextAssignment(islands[i].islandId, k);
      if (!n.ok || !n.value) throw new Error('no assignment');
      islands[i] = n.value;
      if (k === 16) lagging = { ...c.model() };
    }
    expect(updatesSeen).toBe(20);
    // the lean downlink: 20 frames outweigh θ, so the answer is "fetch the snapshot"; 3 do not
    const all = c.updatesSince(0);
    expect(all.ok ? 'ok' : all.error.code).toBe(ErrorCode.TOO_OLD);
    const ups = c.updatesSince(lagging.version);
    expect(ups.ok && ups.value.length).toBe(3);
    expect(ups.ok).toBe(true);
    if (ups.ok) for (const u of ups.value) expect(applyUpdateMessage(lagging, u).ok).toBe(true);
    expect(lagging.hash).toBe(c.hash);
    // a corrupted replica is detected by the hash
    const bad = { ...c.model() };
    const ev = c.updatesSince(c.version - 1);
    bad.params[0] += 1e-3; // a replica that is off by one element, applying the last update
    bad.version = c.version - 1;
    const res = ev.ok ? applyUpdateMessage(bad, ev.value[0]) : null;
    expect(res && !res.ok && res.error.code).toBe(ErrorCode.HASH_MISMATCH);
    // decode of the kept frames is deterministic
    if (ups.ok) expect(decodeDelta(ups.value[0].frame, N).ok).toBe(true);
  });

  it('snapshot → restore resumes exactly', () => {
    seqs = new Map();
    const cfg: CoordinatorConfigPatch = {
      mode: 'sync',
      uplink: { encoding: 'int8' },
      downlink: { encoding: 'int8', blockSize: 64 },
      batchSize: 4,
      seqLen: 8,
      quorum: 1,
    };
    const c = new Coordinator({ params: randomVec(3, 0.02), config: cfg });
    const a = join(c),
      b = join(c, 0, { ...CAPS, numerics: 'f16', devices: 2 });
    c.submit({ meta: meta(a.a), frame: encodeDelta(randomVec(1), { encoding: 'int8' }) }, 1);
    c.submit({ meta: meta(b.a), frame: encodeDelta(randomVec(2), { encoding: 'int8' }) }, 2);
    const a2 = c.nextAssignment(a.id, 3),
      b2 = c.nextAssignment(b.id, 3);
    if (!a2.ok || !a2.value || !b2.ok || !b2.value) throw new Error('no assignment');
    c.submit({ meta: meta(a2.value), frame: encodeDelta(randomVec(3), { encoding: 'int8' }) }, 4); // pending in the snapshot
    const snap = c.snapshot();
    // the metadata survives a JSON round trip (it is stored as safetensors metadata)
    const r = Coordinator.restore({ meta: JSON.parse(JSON.stringify(snap.meta)), tensors: snap.tensors });
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    const d = r.value;
    expect(d.hash).toBe(c.hash);
    expect(d.version).toBe(c.version);
    // each island's numerics and devices from its hello are in its record, and survive the checkpoint
    expect([d.island(a.id)?.caps.numerics, d.island(b.id)?.caps.numerics, d.island(b.id)?.caps.devices]).toEqual([
      undefined,
      'f16',
      2,
    ]);
    const lastSeqB = seqs.get(b.id)!;
    const frame = encodeDelta(randomVec(4), { encoding: 'int8' });
    const m = meta(b2.value);
    c.submit({ meta: m, frame }, 5);
    d.submit({ meta: m, frame }, 5);
    expect(d.version).toBe(2);
    expect(d.hash).toBe(c.hash);
    expect(hashParams(d.outerState().momentum)).toBe(hashParams(c.outerState().momentum));
    expect(lastSeqB).toBeGreaterThan(0);
  });
});

describe("the lr schedule's position", () => {
  it("sync rounds of equal steps move the run by every member's step, whatever the speeds; async by speed", () => {
    const caps = (tokensPerSec: number): IslandCaps => ({ engine: 'cpu', batchSize: 8, maxBatch: 8, tokensPerSec });
    const perStep = 8 * 16;
    // a slow island joining a fast one: async moves the run by everyone's tokens while it steps once;
    // sync (equal steps, no DyLU) by one step of each member (the fast one's speed once sent its lr to the schedule's end)
    for (const [mode, want] of [
      ['sync', 2 * perStep],
      ['async', (10_200 / 200) * perStep],
    ] as const) {
      const c = new Coordinator({
        params: randomVec(3),
        config: { mode, dylu: false, batchSize: 8, seqLen: 16, innerSteps: 8, totalTokens: 100_000 },
      });
      join(c, 0, caps(10_000));
      const slow = join(c, 1, caps(200));
      expect(slow.a.lr.tokensPerStep, mode).toBeCloseTo(want, 6);
    }
  });
});

describe('protocol helpers', () => {
  it('inner lr: warmup then cosine over the run tokens, continuing across rounds', () => {
    const plan = {
      maxLr: 1e-3,
      minLr: 1e-4,
      warmupTokens: 1000,
      totalTokens: 11_000,
      tokensStart: 0,
      tokensPerStep: 100,
      localWarmupSteps: 0,
    };
    expect(innerLearningRate(plan, 4)).toBeCloseTo((1e-3 * 500) / 1100, 12);
    expect(innerLearningRate(plan, 10)).toBeCloseTo(1e-3, 12);
    expect(innerLearningRate({ ...plan, tokensStart: 6000 }, 0)).toBeCloseTo(5.5e-4, 12); // half way: (max+min)/2
    expect(innerLearningRate({ ...plan, tokensStart: 5000 }, 10)).toBeCloseTo(
      innerLearningRate({ ...plan, tokensStart: 6000 }, 0),
      12,
    );
    expect(innerLearningRate({ ...plan, tokensStart: 20_000 }, 0)).toBeCloseTo(1e-4, 12);
  });
});
