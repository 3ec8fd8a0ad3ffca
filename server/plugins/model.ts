// θ for the islands: GET /api/model, the safetensors file at the durable version (ETag: its hash),
// whole or one Range of it (byte-range.ts, as the shard route); and GET /api/model/manifest, the file in
// chunks with a CRC-32 each, so a page fetches θ chunk by chunk, checks each, and keeps them across
// reloads (client/volunteer/theta-cache.ts). A chunk asked with `If-Match: "<hash>"` of a version that
// moved on is 412 E_MODEL_MOVED: the page's chunks would mix two versions, so it starts again from the
// manifest (or catches up by updates from the version it holds).

import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import { ModelManifestSchema } from '../../core/api.ts';
import type { Run } from '../run/run.ts';
import { MODEL_CHUNK_BYTES } from '../run/views.ts';
import { Binary, NotModified, ifNoneMatch } from './api.ts';
import { RangeHeader, byteRange } from './byte-range.ts';
import { NoQuery, replies, type TypeBoxTypes } from './http-strict.ts';

const ModelHeaders = Type.Object({
  range: RangeHeader,
  'if-match': Type.Optional(Type.String({ maxLength: 128 })),
});

export async function modelPlugin(app: FastifyInstance, opts: { run: Run }): Promise<void> {
  const run = opts.run;
  const views = run.views;
  const api = app.withTypeProvider<TypeBoxTypes>();

  api.get(
    '/api/model/manifest',
    { schema: { querystring: NoQuery, response: replies(ModelManifestSchema) } },
    async (_req, reply) => {
      reply.header('cache-control', 'no-cache');
      return views.modelManifest(run.config.limits.modelChunkBytes ?? MODEL_CHUNK_BYTES);
    },
  );

  api.get(
    '/api/model',
    {
      schema: {
        querystring: NoQuery,
        headers: ModelHeaders,
        response: replies(Binary('θ as safetensors'), {
          206: Binary('the bytes of the Range asked'),
          304: NotModified,
        }),
      },
    },
    async (req, reply) => {
      const m = views.modelBytes();
      const etag = `"${m.hash}"`;
      reply
        .header('etag', etag)
        .header('accept-ranges', 'bytes')
        .header('cache-control', 'no-cache')
        .header('x-atoll-version', String(m.version))
        .header('x-atoll-hash', m.hash);
      const ifMatch = req.headers['if-match'];
      if (ifMatch !== undefined && ifMatch !== etag)
        return reply.code(412).send({
          error: {
            code: 'E_MODEL_MOVED',
            message: `θ is at version ${m.version} (${etag}), not ${ifMatch}: GET /api/model/manifest again`,
          },
        });
      if (ifNoneMatch(req, etag)) return reply.code(304).send();
      const h = req.headers.range;
      const r = h === undefined ? { start: 0, end: m.bytes.length - 1 } : byteRange(h, m.bytes.length, 'θ', reply);
      if (!r) return reply;
      const body = m.bytes.subarray(r.start, r.end + 1);
      run.islands.noteBytesOut(body.length, 'model');
      return reply.type('application/octet-stream').send(Buffer.from(body.buffer, body.byteOffset, body.byteLength));
    },
  );
}
