// The Fastify app factory: one HTTP server carries the REST API, /metrics, /healthz, the built
// client, and socket.io (islands and dashboards). Each concern is a small plugin; this file only
// wires them to one Run.

import { resolve } from 'node:path';
import Fastify, { type FastifyInstance, LogController } from 'fastify';
import helmet from '@fastify/helmet';
import rateLimit from '@fastify/rate-limit';
import type { CoordinatorConfigPatch } from '../core/coord/index.ts';
import { Gateway, type GatewayOptions } from './gateway/gateway.ts';
import { adminPlugin } from './plugins/admin.ts';
import { apiPlugin } from './plugins/api.ts';
import { dataPlugin } from './plugins/data.ts';
import { modelPlugin } from './plugins/model.ts';
import { Metrics } from './metrics.ts';
import { metricsPlugin } from './plugins/metrics.ts';
import { staticPlugin } from './plugins/static.ts';
import { logCheckpoint, logRunEvent } from './run/ops-log.ts';
import { type OpenRunOptions, Run } from './run/run.ts';
import { NoQuery, STRICT_AJV, replies, strictHttp } from './plugins/http-strict.ts';
import { HealthSchema } from '../core/api.ts';
import { AuthLimiter } from './plugins/auth-limit.ts';
import { type RunPort, localMixHost, localPort } from './gateway/run-port.ts';
import { MixGateway } from './gateway/mix.ts';
import { type MixOptions, mixSettings } from './gateway/mix-settings.ts';
import { adminToken, lockRunFolder } from './run/folder.ts';
import { ok } from '../core/result.ts';
import type { RunConfig } from './run/config.ts';
import type { AuditOptions } from './run/audit.ts';
import { closeOnce } from './close-once.ts';

export interface AtollServerOptions {
  /** The run folder. */
  dir: string;
  config: RunConfig;
  resumePatch?: CoordinatorConfigPatch;
  /** Admin bearer token; when absent, the run folder's (created once: run-folder.ts). */
  adminToken?: string;
  /** The built client (default: dist/client next to the package). */
  clientDir?: string;
  /** Evaluate after updates (default true). */
  evaluate?: boolean;
  /** Worker threads for the outer step (0 or absent: on the event loop). */
  outerWorkers?: number;
  /** The operator's log (pino, on stderr) at this level; absent: no log. */
  logLevel?: string;
  /** Where the server listens, recorded in the run folder's lock. */
  listenOn?: { host: string; port: number };
  /** Verified work: audits of a sample of accepted deltas by validators holding this token (server/run/audit.ts). */
  audit?: AuditOptions;
  /** A connection idle this long is closed (default 30 s; tests shorten it). */
  idleTimeoutMs?: number;
  /** Gateway knobs for tests and the bench. */
  gateway?: { messagesPerSecond?: number; violationBudget?: number; heartbeatMs?: number };
  /** Butterfly mixing (server/gateway/mix.ts): group size k (0 or absent: off) and its knobs. */
  mix?: MixOptions;
  /** θ0 of a new run (`serve --init`), in place of the seed's init. */
  init?: OpenRunOptions['init'];
}

export interface AtollServer {
  app: FastifyInstance;
  run: Run;
  gateway: Gateway;
  /** Butterfly mixing (null: off). */
  mix: MixGateway | null;
  metrics: Metrics;
  adminToken: string;
  /** The file the admin token is kept in (null: it came from the caller, e.g. ATOLL_ADMIN_TOKEN). */
  adminTokenFile: string | null;
  /** Wrong admin tokens by address, with back-off (auth-limit.ts). */
  adminAuth: AuthLimiter;
  /** Listens; resolves with the bound address (port 0 picks a free one). */
  listen(port: number, host?: string): Promise<{ port: number; host: string; url: string }>;
  close(): Promise<void>;
}

export const DEFAULT_CLIENT_DIR = resolve(import.meta.dirname, '../dist/client');

/** The run and its REST API without the island gateway: what the aggregator role serves. */
export interface RunApp {
  app: FastifyInstance;
  run: Run;
  /** Butterfly mixing (null: off). */
  mix: MixGateway | null;
  metrics: Metrics;
  adminToken: string;
  adminTokenFile: string | null;
  adminAuth: AuthLimiter;
  close(): Promise<void>;
}

/** Fastify with the security headers and the REST rate limit every role shares. */
export async function baseApp(o: {
  logLevel?: string;
  restPerMinute: number;
  idleTimeoutMs?: number;
  /** A shard run's --data-url: the pages fetch their ranges there (the CSP's connect-src names its origin). */
  dataUrl?: string;
}): Promise<FastifyInstance> {
  const app = Fastify({
    logger: o.logLevel ? { level: o.logLevel, stream: process.stderr } : false,
    // per-request lines off: the ops log (ops-log.ts) says what matters
    logController: new LogController({ disableRequestLogging: true }),
    // a delta never travels over REST; JSON bodies are admin patches
    bodyLimit: 64 * 1024,
    forceCloseConnections: true,
    // route schemas are closed and nothing is coerced: an unknown key or a wrong type is a 400 (http-strict.ts)
    ajv: STRICT_AJV,
    // an idle keep-alive connection, or one that sends no request, is closed
    connectionTimeout: o.idleTimeoutMs ?? 30_000,
    keepAliveTimeout: Math.min(10_000, o.idleTimeoutMs ?? 10_000),
    requestTimeout: 60_000,
  });
  // errors as { error: { code, message } } (validation, 404, 405, 429), before any route is added
  strictHttp(app);
  await app.register(helmet, {
    contentSecurityPolicy: {
      directives: {
        defaultSrc: ["'self'"],
        // 'wasm-unsafe-eval': the CPU engine compiles its WebAssembly SIMD kernels (no JS eval is allowed)
        scriptSrc: ["'self'", "'wasm-unsafe-eval'"],
        // the island runs in a Web Worker; Vite may emit it as a blob: URL
        workerSrc: ["'self'", 'blob:'],
        // socket.io: same origin over ws(s)
        connectSrc: ["'self'", (req) => wsOrigins(req.headers.host), ...(o.dataUrl ? [new URL(o.dataUrl).origin] : [])],
        styleSrc: ["'self'", "'unsafe-inline'"],
        imgSrc: ["'self'", 'data:', 'blob:'],
        objectSrc: ["'none'"],
        baseUri: ["'self'"],
        frameAncestors: ["'none'"],
        upgradeInsecureRequests: null,
      },
    },
    // cross-origin isolation (with helmet's COOP same-origin): the page's Wasm engine shares its memory
    // with its helper threads (SharedArrayBuffer). Everything the pages load is same-origin, but a
    // --data-url's ranges: fetched in CORS mode, which COEP admits (the bucket's CORS must allow the page).
    crossOriginEmbedderPolicy: { policy: 'require-corp' },
    crossOriginOpenerPolicy: { policy: 'same-origin' },
  });

  // REST rate limit per IP (the island protocol has its own limiter in the gateway).
  await app.register(rateLimit, {
    global: true,
    max: o.restPerMinute,
    timeWindow: 60_000,
    allowList: (req) => req.url === '/healthz' || req.url === '/metrics',
    errorResponseBuilder: (_req, ctx) => ({
      statusCode: 429,
      code: 'E_RATE_LIMIT',
      message: `more than ${ctx.max} requests a minute from this address: retry in ${ctx.after}`,
    }),
  });
  return app;
}

/** The pages; then the app is ready. */
export async function finishApp(app: FastifyInstance, clientDir: string | undefined): Promise<void> {
  await app.register(staticPlugin, { root: clientDir ?? DEFAULT_CLIENT_DIR });
  // CORS stays closed: no Access-Control-Allow-Origin is ever sent, so browsers keep other origins out.
  await app.ready();
}

/**
 * The run, its folder and its REST API. `lock: false` skips the run folder's pid lock: the
 * aggregator role holds the Redis lease instead, which also covers a standby on another host.
 */
export async function createRunApp(o: AtollServerOptions & { lock?: boolean }): Promise<RunApp> {
  const app = await baseApp({
    logLevel: o.logLevel,
    restPerMinute: o.config.limits.restPerMinute,
    idleTimeoutMs: o.idleTimeoutMs,
    dataUrl: o.config.dataUrl,
  });
  const log = (line: string) => app.log.warn(line);
  // One server per run folder: refuse before anything in it is written.
  const lock = o.lock === false ? ok(() => {}) : lockRunFolder(o.dir, o.listenOn);
  if (!lock.ok) throw Object.assign(new Error(lock.error.message), { code: lock.error.code });
  const metrics = new Metrics();
  let run: Run;
  try {
    run = await Run.open({
      dir: o.dir,
      config: o.config,
      resumePatch: o.resumePatch,
      metrics,
      evaluate: o.evaluate,
      outerWorkers: o.outerWorkers,
      audit: o.audit,
      init: o.init,
      log,
    });
  } catch (e) {
    lock.value();
    throw e;
  }
  // butterfly mixing: its gateway serves the islands' sockets (createServer), its figures the status
  const mix =
    o.mix && o.mix.k > 0
      ? new MixGateway(mixSettings(o.mix, run.coord.config()), localMixHost(run), () => run.version, log)
      : null;
  const mixStatus = mix ? () => mix.status() : undefined;
  run.store.on('event', (e) => logRunEvent(app.log, e));
  run.store.on('checkpoint', (v, path, bytes) => logCheckpoint(app.log, v, path, bytes));
  const token = o.adminToken ? { token: o.adminToken, file: null } : adminToken(o.dir, undefined);

  app.get(
    '/healthz',
    { config: { rateLimit: false }, schema: { querystring: NoQuery, response: replies(HealthSchema) } },
    async () => ({ ok: true, version: run.version, hash: run.hash }),
  );
  await app.register(metricsPlugin, { metrics });
  await app.register(apiPlugin, { run, mix: mixStatus });
  await app.register(dataPlugin, { run });
  await app.register(modelPlugin, { run });
  const adminAuth = new AuthLimiter('admin token', log);
  await app.register(adminPlugin, { run, token: token.token, limiter: adminAuth });
  await finishApp(app, o.clientDir);
  return {
    app,
    run,
    mix,
    metrics,
    adminToken: token.token,
    adminTokenFile: token.file,
    adminAuth,
    close: closeOnce(async () => {
      await app.close();
      await run.close();
      lock.value();
    }),
  };
}

/** Resolves with the bound address (port 0 picks a free one). */
export async function listenOn(
  app: FastifyInstance,
  port: number,
  host = '0.0.0.0',
): Promise<{ port: number; host: string; url: string }> {
  await app.listen({ port, host });
  const addr = app.server.address();
  const p = typeof addr === 'object' && addr ? addr.port : port;
  const shown = host === '0.0.0.0' || host === '::' ? 'localhost' : host;
  return { port: p, host, url: `http://${shown}:${p}` };
}

/** The island gateway on `app`'s HTTP server, with the run's limits. */
export function attachGateway(
  app: FastifyInstance,
  run: RunPort,
  c: Pick<RunConfig, 'limits' | 'allowOrigins'>,
  knobs: (AtollServerOptions['gateway'] & Pick<GatewayOptions, 'mix' | 'wire'>) | undefined,
): Gateway {
  return new Gateway(app.server, {
    run,
    helloPerMinute: c.limits.helloPerMinute,
    maxIslands: c.limits.maxIslands,
    allowOrigins: c.allowOrigins,
    powBits: c.limits.powBits,
    newIslandsPerHour: c.limits.newIslandsPerHour,
    log: (line) => app.log.warn(line),
    ...knobs,
  });
}

/** The embedded default: the run, its REST API and the island gateway in one process. */
export async function createServer(o: AtollServerOptions): Promise<AtollServer> {
  const core = await createRunApp(o);
  const mix = core.mix ?? undefined;
  const port = localPort(core.run, mix && (() => mix.status()));
  const gateway = attachGateway(core.app, port, o.config, { ...o.gateway, mix, wire: core.metrics });
  return {
    ...core,
    gateway,
    listen: (port, host) => listenOn(core.app, port, host),
    close: closeOnce(async () => {
      await gateway.close();
      await core.close();
    }),
  };
}

function wsOrigins(host: string | undefined): string {
  if (!host || !/^[\w.:[\]-]+$/.test(host)) return "'self'";
  return `ws://${host} wss://${host}`;
}
