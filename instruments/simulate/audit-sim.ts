// Verified work in the simulator: islands that send plausible fake work, and a validator that
// audits a sample of accepted deltas as the server does (core/coord/audit.ts sampling and
// tolerance, client/island/validator.ts recompute on the CPU reference, coord.ban past banAfter).
// The validator's compute takes no virtual time (it is another machine).
//
//   const auditor = new SimAuditor(hub, row.audit, train, config, seqLen, seed);
//   transport = fakeWork(auditor.wrap(local, behaviour !== 'honest'), behaviour) ?? …
//     (the auditor next to the server)
//   result.audits = auditor.report();

import { JsEngine } from '../../core/engine/js.ts';
import type { LocalHub } from './local.ts';
import type { HelloResult, Transport } from '../../client/island/transport.ts';
import { judge } from '../../client/island/validator.ts';
import { AuditQueue, auditPasses, auditWork } from '../../core/coord/audit.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import type { AckMsg, Assignment, DeltaMeta, HelloMsg, ModelSnapshotMsg, UpdateMsg } from '../../core/protocol.ts';
import { mulberry32 } from '../../core/random.ts';
import type { Result } from '../../core/result.ts';
import type { AuditReport, Behaviour } from './types.ts';
import type { TokenArray } from '../../core/data/tokenizer.ts';

/** Passes every call to `inner`; subclasses change some. */
class ForwardingTransport implements Transport {
  constructor(protected readonly inner: Transport) {}
  hello(m: HelloMsg): Promise<Result<HelloResult>> {
    return this.inner.hello(m);
  }
  nextAssignment(): Promise<Result<Assignment>> {
    return this.inner.nextAssignment();
  }
  submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    return this.inner.submitDelta(meta, frame);
  }
  fetchModel(): Promise<Result<ModelSnapshotMsg>> {
    return this.inner.fetchModel();
  }
  fetchUpdates(v: number): Promise<Result<UpdateMsg[]>> {
    return this.inner.fetchUpdates(v);
  }
  onUpdate(l: (m: UpdateMsg) => void): () => void {
    return this.inner.onUpdate(l);
  }
  close(r: string): Promise<void> {
    return this.inner.close(r);
  }
}

/**
 * Fake work: 'other-stream' trains its rounds on the next island's data stream; 'fewer-steps'
 * trains a quarter of the assigned steps and claims all of them. Both send valid frames.
 */
class FakeWorkTransport extends ForwardingTransport {
  private readonly assigned = new Map<number, number>();
  constructor(
    inner: Transport,
    private readonly behaviour: 'other-stream' | 'fewer-steps',
  ) {
    super(inner);
  }
  private fake(a: Assignment): Assignment {
    if (this.behaviour === 'other-stream') return { ...a, data: { ...a.data, stream: a.data.stream + 1 } };
    this.assigned.set(a.roundId, a.innerSteps);
    if (this.assigned.size > 8) this.assigned.delete(this.assigned.keys().next().value!);
    return { ...a, innerSteps: Math.max(1, a.innerSteps >> 2) };
  }
  override async hello(m: HelloMsg): Promise<Result<HelloResult>> {
    const r = await this.inner.hello(m);
    return r.ok && r.value.assignment
      ? { ok: true, value: { ...r.value, assignment: this.fake(r.value.assignment) } }
      : r;
  }
  override async nextAssignment(): Promise<Result<Assignment>> {
    const r = await this.inner.nextAssignment();
    return r.ok ? { ok: true, value: this.fake(r.value) } : r;
  }
  override submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    const claimed = this.assigned.get(meta.roundId);
    if (claimed === undefined) return this.inner.submitDelta(meta, frame);
    return this.inner.submitDelta({ ...meta, steps: claimed, tokens: (meta.tokens / meta.steps) * claimed }, frame);
  }
}

/** Audits a sample of accepted deltas on their way through (what the server's validators see). */
class AuditingTransport extends ForwardingTransport {
  constructor(
    inner: Transport,
    private readonly onSubmit: (
      meta: DeltaMeta,
      frame: Uint8Array,
      submit: () => Promise<Result<AckMsg>>,
    ) => Promise<Result<AckMsg>>,
  ) {
    super(inner);
  }
  override submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    return this.onSubmit(meta, frame, () => this.inner.submitDelta(meta, frame));
  }
}

/** The fake-work transport for these behaviours, else null. */
export function fakeWork(inner: Transport, behaviour: Behaviour): Transport | null {
  return behaviour === 'other-stream' || behaviour === 'fewer-steps' ? new FakeWorkTransport(inner, behaviour) : null;
}

export class SimAuditor {
  private readonly queue: AuditQueue;
  private readonly engine: JsEngine;
  private readonly rand: () => number;
  private readonly fakeIds = new Set<string>();
  private readonly verdicts = new Map<string, { passed: number; failed: number }>();
  private readonly out: AuditReport = {
    audits: 0,
    honestPassed: 0,
    honestFailed: 0,
    fakePassed: 0,
    fakeFailed: 0,
    fakeBanned: 0,
    fakeIslands: 0,
    validationsToBan: [],
    minHonestCosine: null,
    maxFakeCosine: null,
  };

  constructor(
    private readonly hub: LocalHub,
    cfg: { rate: number; banAfter: number },
    private readonly train: TokenArray,
    config: GPTConfig,
    private readonly seqLen: number,
    seed: number,
    maxBatch: number,
  ) {
    this.queue = new AuditQueue({ rate: cfg.rate, banAfter: cfg.banAfter });
    this.engine = new JsEngine({ config, maxBatch, maxT: seqLen });
    this.rand = mulberry32(seed ^ 0xa0d17);
  }

  /** Audits a sample of this island's accepted deltas (`fake`: counted as fake work in the report). */
  wrap(inner: Transport, fake: boolean): Transport {
    return new AuditingTransport(inner, async (meta, frame, submit) => {
      const coord = this.hub.coord;
      const assigned = coord.island(meta.islandId)?.work?.find((w) => w.roundId === meta.roundId);
      const sampled = meta.baseVersion === coord.version && this.queue.wants(assigned, this.rand());
      const base = sampled ? coord.model() : null;
      const isl = base && coord.island(meta.islandId);
      const work = isl ? auditWork(isl, meta.roundId, meta.steps, this.seqLen) : null;
      const r = await submit();
      if (base && work && r.ok && r.value.status === 'applied') {
        if (fake && !this.fakeIds.has(meta.islandId)) {
          this.fakeIds.add(meta.islandId);
          this.out.fakeIslands++;
        }
        await this.judgeOne(meta.islandId, fake, {
          jobId: 0,
          islandId: meta.islandId,
          seq: meta.seq,
          roundId: meta.roundId,
          baseVersion: base.version,
          baseHash: base.hash,
          work,
          frame,
          params: base.params,
        });
      }
      return r;
    });
  }

  private async judgeOne(islandId: string, fake: boolean, job: Parameters<typeof judge>[2]): Promise<void> {
    const m = await judge(this.engine, this.train, job);
    if (m.cosine === null || m.normRatio === null) return;
    const passed = auditPasses(m.cosine, m.normRatio, this.queue.cfg.tolerance);
    const o = this.out;
    o.audits++;
    if (fake) {
      o[passed ? 'fakePassed' : 'fakeFailed']++;
      o.maxFakeCosine = Math.max(o.maxFakeCosine ?? -1, m.cosine);
    } else {
      o[passed ? 'honestPassed' : 'honestFailed']++;
      o.minHonestCosine = Math.min(o.minHonestCosine ?? 1, m.cosine);
    }
    const coord = this.hub.coord;
    const counts = coord.recordAudit(islandId, passed);
    const v = this.verdicts.get(islandId) ?? { passed: 0, failed: 0 };
    v[passed ? 'passed' : 'failed']++;
    this.verdicts.set(islandId, v);
    const banAfter = this.queue.cfg.banAfter;
    if (!passed && counts.ok && banAfter > 0 && counts.value.failed === banAfter) {
      coord.ban(islandId, this.hub.clock.now(), `failed ${banAfter} audits of its work`);
      await this.hub.dispatch();
      if (fake) {
        o.fakeBanned++;
        o.validationsToBan.push(v.passed + v.failed);
      }
    }
  }

  report(): AuditReport {
    return structuredClone(this.out);
  }
}
