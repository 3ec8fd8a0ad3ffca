// GET /metrics: the app's Prometheus registry (server/metrics.ts), as text.

import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { NoQuery, replies } from './http-strict.ts';
import type { Metrics } from '../metrics.ts';

export async function metricsPlugin(app: FastifyInstance, opts: { metrics: Metrics }): Promise<void> {
  app.get(
    '/metrics',
    {
      config: { rateLimit: false },
      schema: { querystring: NoQuery, response: replies(Type.String({ description: 'Prometheus text format' })) },
    },
    async (_req, reply) => {
      reply.header('content-type', opts.metrics.registry.contentType);
      return opts.metrics.registry.metrics();
    },
  );
}
