// A static bucket for `serve --data-url`: a shard folder served by @fastify/static (HTTP Range, as a
// bucket or CDN answers it) on another origin, with the CORS a bucket must be given for the pages
// (any origin, the Range header, Content-Range exposed). It records every request it answered.

import fastifyStatic from '@fastify/static';
import Fastify from 'fastify';

export interface Bucket {
  /** The --data-url: <origin>/shards. */
  url: string;
  /** Each GET answered: its path, status and body bytes. */
  served: Array<{ path: string; status: number; bytes: number }>;
  close(): Promise<void>;
}

export async function startBucket(dir: string): Promise<Bucket> {
  const app = Fastify();
  const served: Bucket['served'] = [];
  app.addHook('onRequest', async (_req, reply) => {
    reply.header('access-control-allow-origin', '*');
    reply.header('access-control-expose-headers', 'Content-Range, Content-Length, Accept-Ranges');
  });
  // a preflight, where the browser sends one for the Range header
  app.options('/*', async (_req, reply) =>
    reply
      .code(204)
      .header('access-control-allow-methods', 'GET, HEAD')
      .header('access-control-allow-headers', 'Range')
      .send(),
  );
  app.addHook('onResponse', async (req, reply) => {
    if (req.method !== 'GET') return;
    served.push({ path: req.url, status: reply.statusCode, bytes: Number(reply.getHeader('content-length') ?? 0) });
  });
  await app.register(fastifyStatic, { root: dir, prefix: '/shards/', acceptRanges: true, cacheControl: false });
  const origin = await app.listen({ port: 0, host: '127.0.0.1' });
  return { url: `${origin}/shards`, served, close: () => app.close() };
}
