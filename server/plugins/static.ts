// The built client (dist/client): `/` is the volunteer page, `/dashboard` the dashboard, hashed
// assets under /assets are cached for good. Without a build, both pages explain how to make one.

import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import fastifyStatic from '@fastify/static';

export interface StaticOptions {
  /** Folder with index.html and dashboard.html (vite's outDir). */
  root: string;
}

const placeholder = (page: string) => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Atoll</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40em; margin: 3em auto">
<h1>Atoll</h1>
<p>The server is running, but the ${page} is not built.</p>
<p>Run <code>npm run build</code> (or <code>npm start</code>, which builds when needed), then reload.</p>
<p>The API is live: <a href="/api/status">/api/status</a>, <a href="/metrics">/metrics</a>.</p>
</body></html>
`;

export async function staticPlugin(app: FastifyInstance, opts: StaticOptions): Promise<void> {
  const built = existsSync(join(opts.root, 'index.html'));
  if (!built) {
    app.get('/', async (_req, reply) => reply.type('text/html').send(placeholder('volunteer page')));
    app.get('/dashboard', async (_req, reply) => reply.type('text/html').send(placeholder('dashboard')));
    return;
  }
  await app.register(fastifyStatic, {
    root: opts.root,
    prefix: '/',
    index: false,
    wildcard: true,
    // Vite names assets by content hash: safe to cache forever. HTML is revalidated every time.
    maxAge: '365d',
    immutable: true,
  });
  const page = (file: string) => async (_req: unknown, reply: import('fastify').FastifyReply) =>
    reply.sendFile(file, { maxAge: 0, immutable: false });
  app.get('/', page('index.html'));
  app.get('/index.html', page('index.html'));
  app.get('/dashboard', page('dashboard.html'));
  app.get('/dashboard/', page('dashboard.html'));
}
