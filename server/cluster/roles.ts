// `atoll serve --redis URL --role gateway|aggregator|all`: the two roles as servers.
//
//   gateway      Fastify (pages, /healthz) + the socket.io gateway on a RemotePort; /api/* and
//                /metrics are the aggregator's, forwarded over Redis. Any number of them.
//   aggregator   a RunHost: a standby until it holds the lease, then the run's single writer.
//                No HTTP of its own: everything reaches it through a gateway.

import { hostname } from 'node:os';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  type AtollServerOptions,
  type RunApp,
  attachGateway,
  baseApp,
  createRunApp,
  finishApp,
  listenOn,
} from '../app.ts';
import type { Gateway } from '../gateway/gateway.ts';
import { connectRedis } from './keys.ts';
import { RemotePort } from './remote-port.ts';
import { RunHost } from './run-host.ts';
import { closeOnce } from '../close-once.ts';
import { NoQuery, replies } from '../plugins/http-strict.ts';
import { HealthSchema } from '../../core/api.ts';

export interface GatewayRole {
  app: FastifyInstance;
  gateway: Gateway;
  port: RemotePort;
  listen(port: number, host?: string): Promise<{ port: number; host: string; url: string }>;
  close(): Promise<void>;
}

/** Request headers the run's API reads. */
// range and the conditionals: θ's chunks and the shards are fetched by Range (If-Match pins θ's version)
const FORWARDED_REQUEST_HEADERS = ['authorization', 'content-type', 'accept', 'range', 'if-match', 'if-none-match'];

export async function startGatewayRole(o: {
  redis: string;
  run: string;
  clientDir?: string;
  logLevel?: string;
  gateway?: { messagesPerSecond?: number; violationBudget?: number; heartbeatMs?: number };
}): Promise<GatewayRole> {
  const redis = connectRedis(o.redis);
  const port = new RemotePort(redis, o.run);
  let desc: Awaited<ReturnType<RemotePort['start']>>;
  try {
    desc = await port.start();
  } catch (e) {
    port.close();
    redis.disconnect();
    throw e;
  }
  const app = await baseApp({
    logLevel: o.logLevel,
    restPerMinute: desc.limits.restPerMinute,
    dataUrl: desc.dataUrl,
  });
  app.get(
    '/healthz',
    { config: { rateLimit: false }, schema: { querystring: NoQuery, response: replies(HealthSchema) } },
    async () => ({ ok: true, ...port.durable() }),
  );
  await app.register(async (api) => {
    // bodies travel as they came: the run's API parses them
    api.removeAllContentTypeParsers();
    api.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    const forward = async (req: FastifyRequest, reply: FastifyReply) => {
      const headers: Record<string, string> = {};
      for (const h of FORWARDED_REQUEST_HEADERS)
        if (typeof req.headers[h] === 'string') headers[h] = req.headers[h] as string;
      const r = await port.forward({
        method: req.method,
        url: req.url,
        headers,
        body: req.body as Buffer | undefined,
        remoteAddress: req.ip,
      });
      reply.code(r.statusCode).headers(r.headers);
      return reply.send(Buffer.from(r.body.buffer, r.body.byteOffset, r.body.byteLength));
    };
    api.all('/api/*', forward);
    api.get('/metrics', { config: { rateLimit: false } }, forward);
  });
  await finishApp(app, o.clientDir);
  const gateway = attachGateway(app, port, desc, o.gateway);
  return {
    app,
    gateway,
    port,
    listen: (p, host) => listenOn(app, p, host),
    close: closeOnce(async () => {
      await gateway.close();
      await app.close();
      port.close();
      redis.disconnect();
    }),
  };
}

export interface AggregatorRole {
  host: RunHost;
  /** Resolves once this aggregator is active (false: stopped while a standby). */
  active: Promise<boolean>;
  close(): Promise<void>;
}

/** An aggregator: a standby until the lease is ours, then the run's writer. */
export function startAggregatorRole(
  o: AtollServerOptions & {
    redis: string;
    run: string;
    leaseMs: number;
    onFenced: (why: string) => void;
    log?: (line: string) => void;
  },
): AggregatorRole {
  const redis = connectRedis(o.redis);
  const host = new RunHost({
    redis,
    run: o.run,
    owner: `${hostname()}:${process.pid}`,
    ttlMs: o.leaseMs,
    log: o.log,
    onFenced: o.onFenced,
    validatorToken: o.audit?.token,
    // the lease is the lock: a standby on another host may take this run folder over
    open: (): Promise<RunApp> => createRunApp({ ...o, lock: false }),
  });
  const active = host.start();
  return {
    host,
    active,
    async close() {
      await host.stop();
      redis.disconnect();
    },
  };
}
