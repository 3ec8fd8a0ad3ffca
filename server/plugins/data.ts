// A shard run's data routes (`serve --data DIR`, server/run/served-shards.ts): the index, the range
// ledger's state, and shard bytes by HTTP Range (206 with Content-Range; a range starting past the end 416).
// Only names in the index are served. A corpus run answers 404 E_NOT_SHARD_RUN on all three.

import type { FastifyInstance, FastifyReply } from 'fastify';
import { Type } from '@sinclair/typebox';
import { DataIndexSchema, DataStatusSchema } from '../../core/api.ts';
import type { Run } from '../run/run.ts';
import { readShardBytes } from '../run/served-shards.ts';
import { NoQuery, replies, type TypeBoxTypes } from './http-strict.ts';

const ShardParams = Type.Object(
  { name: Type.String({ pattern: '^[\\w.-]{1,200}$' }) },
  { additionalProperties: false },
);
const RangeHeaders = Type.Object({ range: Type.Optional(Type.String({ maxLength: 64 })) });
const Binary = (description: string) => Type.Unsafe<Buffer>({ type: 'string', description });
const RANGE = /^bytes=(\d{1,15})-(\d{0,15})$/;

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
      const m = RANGE.exec(h);
      if (!m)
        return reply.code(400).send({
          error: { code: 'E_BAD_REQUEST', message: `Range '${h}': one range of bytes, 'bytes=START-END', expected` },
        });
      const start = Number(m[1]);
      // as RFC 9110 says: an end past the last byte is the last byte; a start past it is 416
      const end = m[2] === '' ? size - 1 : Math.min(size - 1, Number(m[2]));
      if (start >= size || end < start)
        return reply
          .code(416)
          .header('content-range', `bytes */${size}`)
          .send({
            error: {
              code: 'E_RANGE_NOT_SATISFIABLE',
              message: `Range '${h}' is not within shard '${name}' of ${size} bytes`,
            },
          });
      const bytes = await readShardBytes(s, name, start, end);
      return reply
        .code(206)
        .header('content-range', `bytes ${start}-${end}/${size}`)
        .type('application/octet-stream')
        .send(bytes);
    },
  );
}
