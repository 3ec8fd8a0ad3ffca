// HTTP input is refused, never converted: AJV coerces nothing (a body's `null`, `"0.5"`, `true` or
// `[0.25]` where a number belongs is a 400), and a query string's number is read here, strictly: a
// plain decimal (no NaN, no ±Infinity, no hex, no blank), then the route's schema checks its range.
// Every error leaves as `{ error: { code, message } }`; a known path asked with a method it does
// not serve is a 405 with `Allow`. A path only a wildcard route matches (the static files' `/*`) is
// not a known one: another method there is a 404 (POST /api/nothing, like GET /api/nothing).

import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { ApiErrorSchema } from '../../core/api.ts';
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyTypeProvider } from 'fastify';

/** AJV options for every route: no coercion, no defaults filled in, nothing removed. */
export const STRICT_AJV = {
  customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: false, allErrors: false },
} as const;

/**
 * Route types from the routes' TypeBox schemas (`app.withTypeProvider<TypeBoxTypes>()`): params, query and body as
 * validated, replies as serialized.
 */
export interface TypeBoxTypes extends FastifyTypeProvider {
  validator: this['schema'] extends TSchema ? Static<this['schema']> : unknown;
  serializer: this['schema'] extends TSchema ? Static<this['schema']> : unknown;
}

/** The query schema of a route that takes no input: any key is a 400. */
export const NoQuery = Type.Object({}, { additionalProperties: false });

/** A route's response schemas: `ok` for 200, `more` by status, the one error body for 4xx and 5xx. */
export const replies = <T extends TSchema, M extends Record<number, TSchema> = Record<never, TSchema>>(
  ok: T,
  more?: M,
) => ({ 200: ok, ...(more as M), '4xx': ApiErrorSchema, '5xx': ApiErrorSchema });

/** A decimal number as a query string may spell it. */
const DECIMAL = /^-?(?:0|[1-9][0-9]{0,20})(?:\.[0-9]{1,20})?(?:[eE][-+]?[0-9]{1,3})?$/;

/**
 * The query string's numbers as numbers, where the route's schema asks for one (else left for the schema to refuse).
 */
function readQueryNumbers(req: FastifyRequest): void {
  const schema = req.routeOptions.schema?.querystring as { properties?: Record<string, { type?: string }> } | undefined;
  const q = req.query as Record<string, unknown> | undefined;
  if (!schema?.properties || !q || typeof q !== 'object') return;
  for (const [k, v] of Object.entries(q)) {
    const t = schema.properties[k]?.type;
    if ((t === 'integer' || t === 'number') && typeof v === 'string' && DECIMAL.test(v)) {
      const n = Number(v);
      if (Number.isFinite(n)) q[k] = n;
    }
  }
}

/** HTTP status → the code an error body carries when the error has none of ours. */
function codeFor(status: number, code: string | undefined): string {
  if (status === 429) return 'E_RATE_LIMIT';
  if (status >= 500) return 'E_INTERNAL';
  if (code?.startsWith('E_')) return code;
  if (status === 413) return 'E_TOO_LARGE';
  if (status === 415) return 'E_BAD_MEDIA_TYPE';
  if (status === 404) return 'E_NOT_FOUND';
  if (status === 405) return 'E_METHOD';
  return 'E_BAD_REQUEST';
}

export function sendError(reply: FastifyReply, status: number, code: string, message: string): FastifyReply {
  return reply.code(status).send({ error: { code, message } });
}

/** Installs the strict query numbers, the error shape, 404 and 405. Call before any route is added. */
export function strictHttp(app: FastifyInstance): void {
  app.addHook('preValidation', async (req) => readQueryNumbers(req));
  app.setErrorHandler((e: Error & { statusCode?: number; code?: string }, _req, reply) => {
    const status = e.statusCode && e.statusCode >= 400 && e.statusCode < 600 ? e.statusCode : 500;
    if (status >= 500) app.log.warn(`http error: ${e.stack ?? e.message}`);
    return sendError(reply, status, codeFor(status, e.code), status >= 500 ? 'internal error' : e.message);
  });
  // every route's pattern and methods, to tell a wrong method (405) from a wrong path (404)
  const routes: Array<{ re: RegExp; methods: Set<string> }> = [];
  app.addHook('onRoute', (r) => {
    if (r.url.includes('*')) return; // a wildcard names no path: POST /api/nothing is 404, not 405
    const re = new RegExp(`^${r.url.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/:[A-Za-z0-9_]+/g, '[^/]+')}$`);
    let entry = routes.find((x) => x.re.source === re.source);
    if (!entry) routes.push((entry = { re, methods: new Set() }));
    for (const m of [r.method].flat()) entry.methods.add(m);
  });
  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split('?')[0];
    const allow = new Set<string>();
    for (const r of routes) if (r.re.test(path)) for (const m of r.methods) allow.add(m);
    if (allow.size > 0 && !allow.has(req.method)) {
      reply.header('allow', [...allow].sort().join(', '));
      return sendError(
        reply,
        405,
        'E_METHOD',
        `${req.method} is not allowed on ${path.slice(0, 200)} (allowed: ${[...allow].sort().join(', ')})`,
      );
    }
    return sendError(reply, 404, 'E_NOT_FOUND', `no route ${req.method} ${path.slice(0, 200)}`);
  });
}
