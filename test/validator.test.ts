// Verified work: an island's round, recomputed by a validator on the CPU reference, passes when it is
// honest and fails when it is fake (another data stream, fewer steps than claimed, a scaled Δ), for
// a CPU island and a Node WebGPU island (SwiftShader), through the real coordinator and runtime.

import { afterAll, describe, expect, it } from 'vitest';
import { JsEngine } from '../core/engine/js.ts';
import { IslandRuntime } from '../client/island/index.ts';
import { LocalHub } from '../instruments/simulate/local.ts';
import { judge, recomputeDelta } from '../client/island/validator.ts';
import { decodeDelta, encodeDelta } from '../core/codec/index.ts';
import { type AuditJob, AuditQueue, DEFAULT_AUDIT_TOLERANCE, auditPasses, auditWork } from '../core/coord/audit.ts';
import { Coordinator } from '../core/coord/index.ts';
import { PRESETS } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import type { TrainingEngine } from '../core/engine/index.ts';
import type { DeltaMeta } from '../core/protocol.ts';
import { loadCorpus } from '../server/run/corpus.ts';
import { createEngine } from '../client/island/engine/node-engines.ts';
import { runRow } from '../instruments/simulate/row.ts';
import { type RowDefaults, compareRows } from '../instruments/simulate/scenarios.ts';

const config = PRESETS.tiny;
const B = 4,
  T = 32,
  H = 8;
const train = loadCorpus().train;
const engines: TrainingEngine[] = [];
afterAll(() => {
  for (const e of engines) e.destroy();
});

/** Two sync rounds of one island on `engine`; the audit job of each accepted delta. fresh: the run audits (fresh AdamW per round). */
async function honestJobs(engine: TrainingEngine, fresh = true): Promise<AuditJob[]> {
  const coord = new Coordinator({
    params: initParams(config, 5),
    config: {
      batchSize: B,
      seqLen: T,
      innerSteps: H,
      minInnerSteps: H,
      dylu: false,
      totalTokens: 2 * H * B * T,
      uplink: { encoding: 'int8', blockSize: 64 },
      innerLr: { maxLr: 3e-3, minLr: 3e-4, warmupTokens: 0, localWarmupSteps: 0 },
      freshInnerOptimizer: fresh,
    },
  });
  const hub = new LocalHub(coord);
  const transport = hub.connect();
  const jobs: AuditJob[] = [];
  const submit = transport.submitDelta.bind(transport);
  transport.submitDelta = async (meta: DeltaMeta, frame: Uint8Array) => {
    const base = coord.model();
    expect(base.version).toBe(meta.baseVersion);
    const work = auditWork(coord.island(meta.islandId)!, meta.roundId, meta.steps, T)!;
    jobs.push({
      jobId: jobs.length + 1,
      islandId: meta.islandId,
      seq: meta.seq,
      roundId: meta.roundId,
      baseVersion: base.version,
      baseHash: base.hash,
      work,
      frame: frame.slice(),
      params: base.params,
    });
    return submit(meta, frame);
  };
  const rt = new IslandRuntime({ engine, train, transport, caps: { batchSize: B, maxBatch: B } });
  const summary = await rt.start();
  expect(summary.reason).toBe('done');
  return jobs;
}

const passes = (m: { cosine: number | null; normRatio: number | null }) =>
  auditPasses(m.cosine!, m.normRatio!, DEFAULT_AUDIT_TOLERANCE);

describe.each(['cpu', 'webgpu'] as const)('validator on a %s island', (kind) => {
  it('passes every honest round and fails a fake one', async () => {
    const island = await createEngine(kind, { config, maxBatch: B }, { autotune: false });
    const ref = new JsEngine({ config, maxBatch: B });
    engines.push(island, ref);
    const jobs = await honestJobs(island);
    expect(jobs.length).toBe(2);
    for (const job of jobs) {
      const m = await judge(ref, train, job);
      expect(m.cosine!, `round ${job.roundId}`).toBeGreaterThan(0.99); // rounds after the first too: the run audits, so AdamW is reset per round
      expect(passes(m)).toBe(true);
    }
    // fakes of the last round, each sent as a valid int8 frame
    const job = jobs[1];
    const honest = await recomputeDelta(ref, train, job);
    const fake = (d: Float32Array): AuditJob => ({
      ...job,
      frame: encodeDelta(d, { encoding: 'int8', blockSize: 64 }),
    });
    const norm = (d: Float32Array) => Math.sqrt(d.reduce((a, x) => a + x * x, 0));
    const otherStream = await recomputeDelta(ref, train, {
      ...job,
      work: { ...job.work, data: { ...job.work.data, stream: job.work.data.stream + 1 } },
    });
    const fewer = await recomputeDelta(ref, train, { ...job, work: { ...job.work, steps: H / 4 } });
    const scale = norm(honest) / norm(fewer);
    const fewerScaled = fewer.map((x) => x * scale);
    for (const [name, d] of [
      ['other stream', otherStream],
      ['fewer steps, norm-matched', fewerScaled],
      ['scaled ×1.5', honest.map((x) => 1.5 * x)],
    ] as const) {
      const m = await judge(ref, train, fake(d));
      expect(passes(m), `${name}: cosine ${m.cosine} norm ratio ${m.normRatio}`).toBe(false);
    }
    // a frame that is not a delta of this size cannot be judged
    const bad = await judge(ref, train, { ...job, frame: new Uint8Array(8) });
    expect(bad.cosine).toBeNull();
    expect(decodeDelta(job.frame, job.params.length).ok).toBe(true);
  }, 120_000);
});

describe('a run that does not audit', () => {
  it("keeps the island's AdamW across rounds (its second Δ is not a fresh-AdamW recompute), and its deltas are never sampled", async () => {
    const island = new JsEngine({ config, maxBatch: B });
    const ref = new JsEngine({ config, maxBatch: B });
    engines.push(island, ref);
    const [first, second] = await honestJobs(island, false);
    expect((await judge(ref, train, first)).cosine!).toBeGreaterThan(0.99); // the first round starts fresh either way
    expect((await judge(ref, train, second)).cosine!).toBeLessThan(0.97);
    const run = (encoding: 'int8' | 'sparse', fresh: boolean) => ({ encoding, fresh });
    expect(new AuditQueue({ rate: 1 }).wants(run('int8', false), 0)).toBe(false);
  }, 60_000);
});

describe('AuditQueue', () => {
  it('samples dense codes only, stays bounded, leases and settles once', () => {
    const q = new AuditQueue({ rate: 0.5, maxJobs: 2, leaseMs: 100 });
    const run = (encoding: 'int8' | 'sparse') => ({ encoding, fresh: true });
    expect(q.wants(run('int8'), 0.4)).toBe(true);
    expect(q.wants(run('int8'), 0.6)).toBe(false);
    expect(q.wants(run('sparse'), 0)).toBe(false);
    const job = {
      islandId: 'island-1',
      seq: 1,
      roundId: 0,
      baseVersion: 0,
      baseHash: '',
      work: null as never,
      frame: new Uint8Array(),
      params: new Float32Array(),
    };
    const ids = [q.offer(job), q.offer(job), q.offer(job)];
    expect(q.size).toBe(2);
    expect(q.stats.dropped).toBe(1);
    const a = q.take(0)!;
    expect(a.jobId).toBe(ids[1]);
    expect(q.settle(a.jobId, 0.5, 1).ok && q.stats.failed).toBe(1);
    const again = q.settle(a.jobId, 1, 1);
    expect(!again.ok && again.error.code).toBe('E_UNKNOWN_AUDIT');
    const b = q.take(0)!;
    expect(q.take(50)).toBeNull();
    expect(q.take(200)!.jobId).toBe(b.jobId); // lease ran out: queued again
  });
});

describe('simulator rows with fake work', () => {
  const d: RowDefaults = {
    islands: 8,
    seeds: [1],
    batchSize: 4,
    tokens: 200_000,
    innerSteps: 16,
    baseTokensPerSec: 2000,
    seqLen: 32,
    lr: { maxLr: 3e-3, minLr: 3e-4, warmupTokens: 0 },
  };
  it.each(['other-stream', 'fewer-steps'])(
    'sync-int8-audit-%s: the fake island is banned within 2 validations, no honest one fails',
    async (fake) => {
      const row = compareRows(d).find((r) => r.name === `sync-int8-audit-${fake}`)!;
      // shorter rounds, every accepted delta audited: a few rounds suffice
      const short = {
        ...row,
        tokens: 3 * 4 * 4 * 4 * 16,
        audit: { rate: 1, banAfter: 2 },
        coordinator: { ...row.coordinator, innerSteps: 4, minInnerSteps: 4, maxInnerSteps: 4, dylu: false },
      };
      const res = await runRow(short, {
        common: { model: 'tiny', seqLen: 16, seed: 1, evals: 1, evalBatches: 1, evalBatchSize: 2 },
      });
      const a = res.audits!;
      expect(a.fakeBanned).toBe(1);
      expect(a.validationsToBan).toEqual([2]);
      expect(a.honestFailed).toBe(0);
      expect(a.honestPassed).toBeGreaterThan(0);
      expect(res.perIsland[3].behaviour).toBe(fake);
    },
    60_000,
  );
});
