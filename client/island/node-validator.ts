// `atoll island --validator`: a trusted validator in Node. Authenticates with the run's validator
// token over socket.io, then audits jobs (client/island/validator.ts) on the CPU engine
// (or the one asked for) until stopped. Messages: docs/protocol.md, "Verified work".

import { io, type Socket } from 'socket.io-client';
import { type AuditMeasure, type ValidatorLink, runValidator } from './validator.ts';
import type { AuditJob } from '../../core/coord/audit.ts';
import type { CpuEngineName } from '../../core/engine/cpu.ts';
import type { TrainingEngine } from '../../core/engine/index.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import type { EngineKind } from '../../core/protocol.ts';
import { type Result, err, ok } from '../../core/result.ts';
import { createEngine } from './engine/node-engines.ts';
import { getBytes, getJson } from './node.ts';
import { openRangeSource } from './range-fetch.ts';
import type { DataRange } from '../../core/server-messages.ts';

export interface NodeValidatorOptions {
  server: string;
  token: string;
  engine?: EngineKind | CpuEngineName;
  /** Wait between asks when no job is queued, ms (default 1000). */
  idleMs?: number;
  say?: (line: string) => void;
  onVerdict?: (job: AuditJob, m: AuditMeasure, passed: boolean | null, banned: boolean) => void;
}

export interface NodeValidator {
  /** Verdicts sent, or the error that ended the loop. */
  done: Promise<Result<number>>;
  stop(): void;
}

/** A job off the wire: θ back to f32 (copied: the bytes need not be aligned). */
function fromWire(j: AuditJob & { params: unknown }): AuditJob {
  const b = j.params as unknown as Uint8Array;
  const params = new Float32Array(b.byteLength >> 2);
  new Uint8Array(params.buffer).set(b.subarray(0, params.byteLength));
  return { ...j, frame: new Uint8Array(j.frame), params };
}

function socketLink(socket: Socket): ValidatorLink & { auth(token: string): Promise<Result<unknown>> } {
  const call = async <T>(event: string, payload?: unknown): Promise<Result<T>> => {
    try {
      const s = socket.timeout(60_000);
      return (await (payload === undefined ? s.emitWithAck(event, {}) : s.emitWithAck(event, payload))) as Result<T>;
    } catch (e) {
      return err('E_TRANSPORT', `${event}: ${(e as Error).message}`);
    }
  };
  return {
    auth: (token) => call('validator', { token }),
    async take() {
      const r = await call<(AuditJob & { params: unknown }) | null>('auditJob');
      return r.ok ? ok(r.value && fromWire(r.value)) : r;
    },
    verdict: (jobId, m) => call('verdict', { jobId, cosine: m.cosine, normRatio: m.normRatio }),
  };
}

export async function startNodeValidator(o: NodeValidatorOptions): Promise<NodeValidator> {
  const base = o.server.split(',')[0].trim().replace(/\/+$/, '');
  const say = o.say ?? (() => {});
  const info = (await getJson(`${base}/api/run`)) as {
    model: GPTConfig;
    batch: number;
    name: string;
    data?: { shards?: number };
  };
  // a shard run: each job's range alone (the index once); else the whole train split
  const shards = info.data?.shards ? await openRangeSource(base) : null;
  const train = shards ? new Uint8Array(0) : await getBytes(`${base}/api/data/train`);
  // one engine, re-made larger when a job's batch exceeds it (islands choose their batch)
  let engine: TrainingEngine | null = null;
  let maxBatch = 0;
  const engineFor = async (batch: number) => {
    if (!engine || batch > maxBatch) {
      engine?.destroy();
      maxBatch = Math.max(batch, info.batch || 1);
      engine = await createEngine(o.engine ?? 'cpu', { config: info.model, maxBatch }, { autotune: false });
    }
    return engine;
  };
  say(`atoll island --validator: run '${info.name}', engine ${o.engine ?? 'cpu'}`);
  const socket = io(`${base}/island`, {
    path: '/socket.io',
    transports: ['websocket'],
    reconnection: true,
    timeout: 20_000,
  });
  const link = socketLink(socket);
  let stopped = false;
  let wake: (() => void) | null = null;
  const done = (async (): Promise<Result<number>> => {
    try {
      const a = await link.auth(o.token);
      if (!a.ok) return a;
      return await runValidator({
        engineFor,
        train,
        ...(shards ? { fetchRange: (r: DataRange) => shards.fetch(r) } : {}),
        link,
        stopped: () => stopped,
        idle: () =>
          new Promise<void>((r) => {
            const t = setTimeout(r, o.idleMs ?? 1000);
            wake = () => {
              clearTimeout(t);
              r();
            };
          }),
        onVerdict: (job, m, passed, banned) => {
          const verdict = passed === null ? `skipped (${m.reason})` : passed ? 'passed' : 'FAILED';
          say(
            `audit ${job.jobId} of ${job.islandId} (round ${job.roundId}): cosine ` +
              `${m.cosine?.toFixed(4) ?? '-'} norm ratio ${m.normRatio?.toFixed(3) ?? '-'} → ` +
              `${verdict}${banned ? ', island banned' : ''}`,
          );
          o.onVerdict?.(job, m, passed, banned);
        },
      });
    } finally {
      socket.disconnect();
      (engine as TrainingEngine | null)?.destroy();
    }
  })();
  return {
    done,
    stop: () => {
      stopped = true;
      wake?.();
    },
  };
}
