// GET /metrics: the app's Prometheus registry (server/metrics.ts), as text.

import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../metrics.ts';

export async function metricsPlugin(app: FastifyInstance, opts: { metrics: Metrics }): Promise<void> {
  app.get('/metrics', { config: { rateLimit: false } }, async (_req, reply) => {
    reply.header('content-type', opts.metrics.registry.contentType);
    return opts.metrics.registry.metrics();
  });
}
