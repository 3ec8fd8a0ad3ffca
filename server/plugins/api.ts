// The public, read-only REST API under /api. Everything here is safe to expose: no route
// changes the run (admin routes live in admin.ts, behind the token).

import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { decodeTokens, encodeText } from '../../core/data/tokenizer.ts';
import { numParams } from '../../core/model/config.ts';
import { PROTOCOL_VERSION } from '../../core/protocol.ts';
import type { CheckpointsResponse, HistoryResponse, IslandsResponse, RunInfo, RunStatus, SampleResponse } from '../../core/api.ts';
import type { Run } from '../run.ts';

export interface ApiOptions {
  run: Run;
  /** Largest GET /api/sample length. */
  maxSampleTokens?: number;
}

const HistoryQuery = Type.Object({
  since: Type.Optional(Type.Integer({ minimum: -1 })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
});
const SampleQuery = Type.Object({
  tokens: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
  prompt: Type.Optional(Type.String({ maxLength: 512 })),
  seed: Type.Optional(Type.Integer({ minimum: 0, maximum: 2 ** 32 - 1 })),
  temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 5 })),
});
const VersionParams = Type.Object({ version: Type.String({ pattern: '^[0-9]{1,12}$' }) });

/** Bytes of one encoded frame for `count` elements (what an island sends per round). */
export function expectedFrameBytes(count: number, encoding: string, blockSize = 64, topkFraction = 0.01): number {
  const nb = (n: number) => Math.ceil(n / blockSize);
  switch (encoding) {
    case 'f32': return 32 + 4 * count;
    case 'f16': return 32 + 2 * count;
    case 'int8': return 32 + 4 * nb(count) + count;
    case 'int4': return 32 + 4 * nb(count) + Math.ceil(count / 2);
    default: {
      const k = Math.max(1, Math.round(topkFraction * count));
      return 32 + 4 * Math.ceil(k / blockSize) + k + Math.ceil(k * 1.5); // varint gaps: ~1-2 bytes each
    }
  }
}

export function runInfo(run: Run): RunInfo {
  const c = run.config;
  const cc = c.coordinator;
  const params = numParams(c.model);
  const up = expectedFrameBytes(params, cc.uplink.encoding, cc.uplink.blockSize ?? 64, cc.uplink.topkFraction ?? 0.01);
  const down = expectedFrameBytes(params, cc.downlink.encoding, cc.downlink.blockSize);
  return {
    name: c.name,
    description: c.description,
    preset: c.preset,
    model: c.model,
    params,
    data: { name: run.dataset.name, trainBytes: run.dataset.train.length, heldOutBytes: run.dataset.heldOut.length },
    mode: cc.mode,
    batch: cc.batchSize,
    seqLen: cc.seqLen,
    innerSteps: cc.dylu && cc.targetRoundMs > 0 ? null : cc.innerSteps,
    targetRoundMs: cc.targetRoundMs,
    codec: cc.uplink,
    outer: cc.outer,
    bytesPerRound: { up, down },
    modelBytes: params * 4,
    maxFrameBytes: run.maxFrameBytes,
    protocolVersion: PROTOCOL_VERSION,
    config: c,
  };
}

export async function apiPlugin(app: FastifyInstance, opts: ApiOptions): Promise<void> {
  const run = opts.run;
  const maxSample = opts.maxSampleTokens ?? 256;
  const checkHistory = TypeCompiler.Compile(HistoryQuery);
  const checkSample = TypeCompiler.Compile(SampleQuery);
  const checkVersion = TypeCompiler.Compile(VersionParams);
  const bad = (reply: FastifyReply, message: string) => reply.code(400).send({ error: { code: 'E_BAD_REQUEST', message } });
  // Query strings are text; convert digits before checking against the schema.
  const numify = (q: unknown): Record<string, unknown> => {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries((q ?? {}) as Record<string, unknown>)) {
      out[k] = typeof v === 'string' && k !== 'prompt' && v !== '' && !Number.isNaN(Number(v)) ? Number(v) : v;
    }
    return out;
  };

  app.get('/api/status', async (): Promise<RunStatus> => run.status());

  app.get('/api/run', async () => runInfo(run));

  app.get('/api/islands', async (): Promise<IslandsResponse> => ({ islands: run.islands() }));

  app.get('/api/history', async (req, reply) => {
    const q = numify(req.query);
    if (!checkHistory.Check(q)) return bad(reply, 'since and limit must be integers');
    const { since, limit } = q as Static<typeof HistoryQuery>;
    const body: HistoryResponse = { points: run.historySince(since ?? -1, limit ?? 100_000) };
    return body;
  });

  // The model an island trains from: θ at the last durable version, as safetensors.
  app.get('/api/model', async (req, reply) => {
    const m = run.modelBytes();
    const etag = `"${m.hash}"`;
    reply.header('etag', etag).header('cache-control', 'no-cache').header('x-atoll-version', String(m.version)).header('x-atoll-hash', m.hash);
    if (ifNoneMatch(req, etag)) return reply.code(304).send();
    run.noteBytesOut(m.bytes.length);
    return reply.type('application/octet-stream').send(Buffer.from(m.bytes.buffer, m.bytes.byteOffset, m.bytes.byteLength));
  });

  // The training split, for browser islands (immutable for a run: cache it).
  let dataEtag: string | null = null;
  app.get('/api/data/train', async (req, reply) => {
    const bytes = run.dataset.train;
    dataEtag ??= `"${createHash('sha256').update(bytes).digest('hex').slice(0, 32)}"`;
    reply.header('etag', dataEtag).header('cache-control', 'public, max-age=86400');
    if (ifNoneMatch(req, dataEtag)) return reply.code(304).send();
    return reply.type('application/octet-stream').send(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  });

  app.get('/api/checkpoints', async (): Promise<CheckpointsResponse> => ({
    checkpoints: run.store.listCheckpoints().map((c) => ({
      version: c.version, hash: run.store.checkpointHash(c), bytes: c.bytes, time: Math.round(c.mtimeMs), url: `/api/checkpoints/${c.version}`,
    })),
  }));

  app.get('/api/checkpoints/:version', async (req, reply) => {
    if (!checkVersion.Check(req.params)) return bad(reply, 'version must be a non-negative integer');
    const v = Number((req.params as Static<typeof VersionParams>).version);
    const bytes = run.store.readCheckpoint(v);
    if (!bytes) return reply.code(404).send({ error: { code: 'E_NOT_FOUND', message: `no checkpoint of version ${v} (see /api/checkpoints)` } });
    reply.header('content-disposition', `attachment; filename="${run.config.name}-v${v}.safetensors"`);
    return reply.type('application/octet-stream').send(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  });

  app.get('/api/sample', async (req, reply) => {
    const q = numify(req.query);
    if (!checkSample.Check(q)) return bad(reply, 'tokens, seed: integers; temperature: 0..5; prompt: ≤ 512 chars');
    const s = q as Static<typeof SampleQuery>;
    const tokens = Math.min(maxSample, s.tokens ?? 100);
    const prompt = encodeText(s.prompt ?? '');
    const r = await run.sample(tokens, prompt.subarray(Math.max(0, prompt.length - run.config.model.blockSize)), s.seed ?? 1, s.temperature ?? 0.8);
    if (!r.ok) return reply.code(r.error.code === 'E_BUSY' ? 503 : 500).send({ error: r.error });
    const body: SampleResponse = { version: r.value.version, prompt: s.prompt ?? '', text: decodeTokens(r.value.bytes), tokens };
    return body;
  });
}

function ifNoneMatch(req: FastifyRequest, etag: string): boolean {
  const h = req.headers['if-none-match'];
  if (!h) return false;
  return h.split(',').some((t) => t.trim() === etag || t.trim() === `W/${etag}` || t.trim() === '*');
}
