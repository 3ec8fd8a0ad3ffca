// The public, read-only REST API under /api. Everything here is safe to expose: no route
// changes the run (admin routes live in admin.ts, behind the token).

import { createHash } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Type } from '@sinclair/typebox';
import { frameBytes } from '../../core/codec/index.ts';
import { loadTokenizer } from '../../core/data/tokenizer.ts';
import { numParams } from '../../core/model/config.ts';
import { PROTOCOL_VERSION } from '../../core/protocol.ts';
import {
  CheckpointsResponseSchema,
  ContributorCreditSchema,
  HistoryResponseSchema,
  IslandDetailSchema,
  IslandsResponseSchema,
  RunInfoSchema,
  RunStatusSchema,
  SampleResponseSchema,
  type MixStatus,
  type RunInfo,
} from '../../core/api.ts';
import { decodeCheckpoint } from '../../core/checkpoint.ts';
import { exportHf } from '../../core/hf.ts';
import { creditOf } from '../../core/credit.ts';
import { NoQuery, replies, type TypeBoxTypes } from './http-strict.ts';
import type { Run } from '../run/run.ts';
import { ISLANDS_PAGE_MAX } from '../run/views.ts';
import { checkpointFile } from '../run/checkpoint.ts';
import { tarFolder } from '../tar.ts';
import { pointScalars, scalarsCsv } from '../run/scalars.ts';

export interface ApiOptions {
  run: Run;
  /** Butterfly mixing's figures for the status, where the server mixes (server/gateway/mix.ts). */
  mix?: () => MixStatus;
  /** Largest GET /api/sample length. */
  maxSampleTokens?: number;
}

// Route schemas: Fastify validates them (nothing coerced; a query string's numbers are read
// strictly by http-strict.ts) and answers 400 E_BAD_REQUEST through the app's error handler before
// a handler runs. Route types are taken from the schemas.
const HistoryQuery = Type.Object(
  {
    since: Type.Optional(Type.Integer({ minimum: -1, maximum: Number.MAX_SAFE_INTEGER })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
  },
  { additionalProperties: false },
);
const SampleQuery = Type.Object(
  {
    tokens: Type.Optional(Type.Integer({ minimum: 1, maximum: 100_000 })),
    prompt: Type.Optional(Type.String({ maxLength: 512 })),
    seed: Type.Optional(Type.Integer({ minimum: 0, maximum: 2 ** 32 - 1 })),
    temperature: Type.Optional(Type.Number({ minimum: 0, maximum: 5 })),
  },
  { additionalProperties: false },
);
const IslandsQuery = Type.Object(
  {
    offset: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: ISLANDS_PAGE_MAX })),
  },
  { additionalProperties: false },
);
const IslandParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false });
const VersionParams = Type.Object(
  { version: Type.String({ pattern: '^[0-9]{1,12}$' }) },
  { additionalProperties: false },
);
const ContributorParams = Type.Object(
  { id: Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$' }) },
  { additionalProperties: false },
);

// Response schemas: the shapes of core/api.ts (the one contract with the pages); fast-json-stringify
// writes only the fields they declare. Binary bodies (a Buffer) are sent as they are; their schema
// says what they are. Every error is {error: {code, message}}.
export const Binary = (description: string) => Type.Unsafe<Buffer>({ type: 'string', description });
export const NotModified = Type.Unsafe<undefined>({ description: 'If-None-Match matched: no body' });

export function runInfo(run: Run): RunInfo {
  const c = run.config;
  const cc = c.coordinator;
  const params = numParams(c.model);
  const up = frameBytes(params, cc.uplink);
  const down = frameBytes(params, cc.downlink);
  return {
    name: c.name,
    title: c.title,
    description: c.description,
    preset: c.preset,
    model: c.model,
    params,
    data: {
      name: run.dataset.name,
      trainBytes: run.dataset.train.length,
      heldOutBytes: run.dataset.heldOut.length,
      ...(run.shards ? { shards: run.shards.index.shards.length } : {}),
    },
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
  const views = run.views;
  const mix = opts.mix;
  const maxSample = opts.maxSampleTokens ?? 256;
  const api = app.withTypeProvider<TypeBoxTypes>();

  api.get('/api/status', { schema: { querystring: NoQuery, response: replies(RunStatusSchema) } }, async () =>
    views.status(Date.now(), mix),
  );

  api.get('/api/run', { schema: { querystring: NoQuery, response: replies(RunInfoSchema) } }, async () => runInfo(run));

  // paged, from a copy refreshed at most once a second (run-views.ts)
  api.get(
    '/api/islands',
    { schema: { querystring: IslandsQuery, response: replies(IslandsResponseSchema) } },
    async (req) => views.islandsPage(req.query.offset ?? 0, req.query.limit ?? ISLANDS_PAGE_MAX),
  );

  api.get(
    '/api/islands/:id',
    { schema: { params: IslandParams, querystring: NoQuery, response: replies(IslandDetailSchema) } },
    async (req, reply) => {
      const id = req.params.id;
      const island = views.islands().find((i) => i.id === id);
      if (!island)
        return reply
          .code(404)
          .send({ error: { code: 'E_UNKNOWN_ISLAND', message: `no island '${id}' (see /api/islands)` } });
      return { island, contributions: run.history.islands.contributions(id) };
    },
  );

  // A volunteer's own totals and place, by the contributor id their browser keeps (all their islands).
  api.get(
    '/api/contributors/:id',
    { schema: { params: ContributorParams, querystring: NoQuery, response: replies(ContributorCreditSchema) } },
    async (req) => creditOf(views.islands(), req.params.id),
  );

  api.get(
    '/api/history',
    { schema: { querystring: HistoryQuery, response: replies(HistoryResponseSchema) } },
    async (req) => {
      const { since, limit } = req.query;
      return { points: views.historySince(since ?? -1, limit ?? 100_000), configChanges: run.history.configChanges };
    },
  );

  // The run's scalars (server/run/scalars.ts), one row per version: what <run-dir>/metrics/ holds, as CSV.
  api.get(
    '/api/scalars.csv',
    {
      schema: { querystring: NoQuery, response: replies(Type.Unsafe<string>({ type: 'string', description: 'CSV' })) },
    },
    async (_req, reply) => {
      const rows = run.history.points.map((p) => ({ step: p.version, time: p.time, scalars: pointScalars(p) }));
      return reply.type('text/csv; charset=utf-8').send(scalarsCsv(rows));
    },
  );

  // The training split, for browser islands (immutable for a run: cache it).
  let dataEtag: string | null = null;
  api.get(
    '/api/data/train',
    {
      schema: {
        querystring: NoQuery,
        response: replies(Binary('the training split, raw bytes'), { 304: NotModified }),
      },
    },
    async (req, reply) => {
      if (run.shards)
        return reply.code(404).send({
          error: {
            code: 'E_SHARD_RUN',
            message: 'this run trains on shards: GET /api/data/index, then the ranges assigned',
          },
        });
      const bytes = run.dataset.train;
      dataEtag ??= `"${createHash('sha256').update(bytes).digest('hex').slice(0, 32)}"`;
      reply.header('etag', dataEtag).header('cache-control', 'public, max-age=86400');
      if (ifNoneMatch(req, dataEtag)) return reply.code(304).send();
      return reply.type('application/octet-stream').send(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    },
  );

  api.get(
    '/api/checkpoints',
    { schema: { querystring: NoQuery, response: replies(CheckpointsResponseSchema) } },
    async () => ({
      checkpoints: views.checkpoints(),
    }),
  );

  api.get(
    '/api/checkpoints/:version',
    {
      schema: {
        params: VersionParams,
        querystring: NoQuery,
        response: replies(Binary('the checkpoint as safetensors')),
      },
    },
    async (req, reply) => {
      const v = Number(req.params.version);
      const bytes = views.checkpointBytes(v);
      if (!bytes)
        return reply
          .code(404)
          .send({ error: { code: 'E_NOT_FOUND', message: `no checkpoint of version ${v} (see /api/checkpoints)` } });
      reply.header('content-disposition', `attachment; filename="${checkpointFile(run.config.name, v)}"`);
      return reply.type('application/octet-stream').send(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    },
  );

  api.get(
    '/api/checkpoints/:version/hf',
    {
      schema: {
        params: VersionParams,
        querystring: NoQuery,
        response: replies(Binary('a transformers GPT-2 folder as tar')),
      },
    },
    async (req, reply) => {
      const v = Number(req.params.version);
      const bytes = views.checkpointBytes(v);
      if (!bytes)
        return reply
          .code(404)
          .send({ error: { code: 'E_NOT_FOUND', message: `no checkpoint of version ${v} (see /api/checkpoints)` } });
      const ck = decodeCheckpoint(bytes);
      if (!ck.ok) return reply.code(500).send({ error: ck.error });
      const tar = tarFolder(checkpointFile(run.config.name, v, 'hf').replace(/\.tar$/, ''), exportHf(ck.value));
      reply.header('content-disposition', `attachment; filename="${checkpointFile(run.config.name, v, 'hf')}"`);
      return reply.type('application/x-tar').send(Buffer.from(tar.buffer, tar.byteOffset, tar.byteLength));
    },
  );

  api.get(
    '/api/sample',
    { schema: { querystring: SampleQuery, response: replies(SampleResponseSchema) } },
    async (req, reply) => {
      const s = req.query;
      const tokens = s.tokens ?? 100;
      if (tokens > maxSample)
        return reply.code(400).send({
          error: { code: 'E_BAD_REQUEST', message: `tokens=${tokens} is above this server's limit of ${maxSample}` },
        });
      const tokenizer = await loadTokenizer(run.config.tokenizer);
      const prompt = tokenizer.encode(s.prompt ?? '');
      const r = await views.sample(
        tokens,
        prompt.subarray(Math.max(0, prompt.length - run.config.model.blockSize)),
        s.seed ?? 1,
        s.temperature ?? 0.8,
      );
      if (!r.ok) return reply.code(r.error.code === 'E_BUSY' ? 503 : 500).send({ error: r.error });
      return { version: r.value.version, prompt: s.prompt ?? '', text: tokenizer.decode(r.value.ids), tokens };
    },
  );
}

export function ifNoneMatch(req: FastifyRequest, etag: string): boolean {
  const h = req.headers['if-none-match'];
  if (!h) return false;
  return h.split(',').some((t) => t.trim() === etag || t.trim() === `W/${etag}` || t.trim() === '*');
}
