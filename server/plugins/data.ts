// A shard run's data routes (`serve --data DIR`, server/run/served-shards.ts): the index, the range
// ledger's state, and shard bytes by HTTP Range (206 with Content-Range; a range starting past the end 416).
// Only names in the index are served. A corpus run answers 404 E_NOT_SHARD_RUN on all three.

import type { FastifyInstance, FastifyReply } from 'fastify';
import { Type } from '@sinclair/typebox';
import { DataIndexSchema, DataStatusSchema } from '../../core/api.ts';
import type { Run } from '../run/run.ts';
import { readShardBytes } from '../run/served-shards.ts';
import { RangeHeader, byteRange } from './byte-range.ts';
import { NoQuery, replies, type TypeBoxTypes } from './http-strict.ts';

const ShardParams = Type.Object(
  { name: Type.String({ pattern: '^[\\w.-]{1,200}$' }) },
  { additionalProperties: false },
);
const RangeHeaders = Type.Object({ range: RangeHeader });
const Binary = (description: string) => Type.Unsafe<Buffer>({ type: 'string', description });

const notShardRun = (reply: FastifyReply) =>
  reply.code(404).send({
    error: { code: 'E_NOT_SHARD_RUN', message: 'this run trains on a corpus (GET /api/data/train), not on shards' },
  });

export async function dataPlugin(app: FastifyInstance, opts: { run: Run }): Promise<void> {
  const run = opts.run;
  const api = app.withTypeProvider<TypeBoxTypes>();

  api.get(
    '/api/data/index',
    { schema: { querystring: NoQuery, response: replies(DataIndexSchema) } },
    async (_req, reply) => {
      const s = run.shards;
      if (!s) return notShardRun(reply);
      reply.header('cache-control', 'no-cache');
      return s.index;
    },
  );

  api.get('/api/data', { schema: { querystring: NoQuery, response: replies(DataStatusSchema) } }, async (_r, reply) => {
    const s = run.shards;
    const status = run.coord.dataRanges();
    if (!s || !status) return notShardRun(reply);
    return { ...status, bytesServed: s.bytesServed };
  });

  api.get(
    '/api/data/shards/:name',
    {
      schema: {
        params: ShardParams,
        querystring: NoQuery,
        headers: RangeHeaders,
        response: replies(Binary('shard bytes: the whole file, or the Range asked (206)'), {
          206: Binary('the bytes of the Range asked'),
        }),
      },
    },
    async (req, reply) => {
      const s = run.shards;
      if (!s) return notShardRun(reply);
      const name = req.params.name;
      const entry = s.index.shards.find((e) => e.name === name);
      if (!entry)
        return reply
          .code(404)
          .send({ error: { code: 'E_NOT_FOUND', message: `no shard '${name}' in the index (GET /api/data/index)` } });
      const size = entry.bytes;
      reply.header('accept-ranges', 'bytes').header('cache-control', 'public, max-age=86400');
      const h = req.headers.range;
      if (h === undefined) {
        const all = await readShardBytes(s, name, 0, size - 1);
        return reply.type('application/octet-stream').send(all);
      }
      const r = byteRange(h, size, `shard '${name}'`, reply);
      if (!r) return reply;
      const bytes = await readShardBytes(s, name, r.start, r.end);
      return reply.type('application/octet-stream').send(bytes);
    },
  );
}
