// Admin routes under /api/admin, behind `Authorization: Bearer <ATOLL_ADMIN_TOKEN>`. Wrong tokens
// are counted per address with back-off (auth-limit.ts). Every change is durable (checkpointed,
// logged) before the 200 goes out; the operations themselves are server/run/admin.ts.

import { timingSafeEqual, createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { ENCODINGS, type Encoding } from '../../core/codec/index.ts';
import { type CoordinatorConfig, type CoordinatorConfigPatch, codecSetting } from '../../core/coord/index.ts';
import type { AuthLimiter } from './auth-limit.ts';
import { replies, sendError } from './http-strict.ts';
import type { Run } from '../run/run.ts';

export interface AdminOptions {
  run: Run;
  token: string;
  /** Wrong tokens by address (the app keeps it, so the operator's log and tests can read it). */
  limiter: AuthLimiter;
}

/** The hyperparameters an admin may change while the run is live. */
export const ConfigPatchSchema = Type.Object(
  {
    outerLr: Type.Optional(Type.Number({ minimum: 0, maximum: 10 })),
    outerMomentum: Type.Optional(Type.Number({ minimum: 0, maximum: 0.999 })),
    /** Target round time, seconds (0: fixed inner steps). */
    roundTime: Type.Optional(Type.Number({ minimum: 0, maximum: 86_400 })),
    quorum: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
    maxStaleness: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
    codec: Type.Optional(Type.Union(ENCODINGS.map((e) => Type.Literal(e)))),
    innerSteps: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type ConfigPatch = Static<typeof ConfigPatchSchema>;

/** Each key of the schema, and the coordinator patch it makes (the compiler holds the two lists together). */
const PATCH_KEYS: {
  [K in keyof ConfigPatch]-?: (v: NonNullable<ConfigPatch[K]>, cur: CoordinatorConfig) => CoordinatorConfigPatch;
} = {
  outerLr: (v, cur) => ({ outer: { ...cur.outer, lr: v } }),
  outerMomentum: (v, cur) => ({ outer: { ...cur.outer, momentum: v } }),
  roundTime: (v) => ({ targetRoundMs: Math.round(v * 1000) }),
  quorum: (v) => ({ quorum: v }),
  maxStaleness: (v) => ({ maxStaleness: v }),
  // the same uplink and downlink as `serve --codec v`
  codec: (v) => codecSetting(v as Encoding),
  innerSteps: (v) => ({ innerSteps: v }),
};

/** The body's keys as one coordinator patch (outerLr and outerMomentum merge into one `outer`). */
export function toCoordinatorPatch(b: ConfigPatch, cur: CoordinatorConfig): CoordinatorConfigPatch {
  const out: CoordinatorConfigPatch = {};
  const now = structuredClone(cur);
  for (const k of Object.keys(b) as Array<keyof ConfigPatch>) {
    const p = (PATCH_KEYS[k] as (v: unknown, c: CoordinatorConfig) => CoordinatorConfigPatch)(b[k], now);
    Object.assign(out, p);
    Object.assign(now, p);
  }
  return out;
}

const IdParams = Type.Object(
  { id: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }) },
  { additionalProperties: false },
);
const BanBody = Type.Union([
  Type.Object({ reason: Type.Optional(Type.String({ maxLength: 256 })) }, { additionalProperties: false }),
  Type.Null(),
]);
const NoBody = Type.Union([Type.Object({}, { additionalProperties: false }), Type.Null()]);
const Any = Type.Object({}, { additionalProperties: true });
const IslandDelta = Type.Object({
  version: Type.Integer(),
  seq: Type.Integer(),
  roundId: Type.Integer(),
  baseVersion: Type.Integer(),
  tokens: Type.Integer(),
});

const Paused = Type.Object({ ok: Type.Literal(true), paused: Type.Boolean(), version: Type.Integer() });
const Checkpointed = Type.Object({
  ok: Type.Literal(true),
  version: Type.Integer(),
  path: Type.String(),
  bytes: Type.Integer(),
});
const Banned = Type.Object({
  ok: Type.Literal(true),
  island: Type.String(),
  status: Type.Literal('banned'),
  revokedTokens: Type.Integer(),
  deltas: Type.Array(IslandDelta),
});
const Deltas = Type.Object({
  island: Type.String(),
  lastPassedSeq: Type.Union([Type.Integer(), Type.Null()]),
  deltas: Type.Array(IslandDelta),
});
const Reverted = Type.Object({
  ok: Type.Literal(true),
  islandId: Type.String(),
  removed: Type.Array(IslandDelta),
  fromCheckpoint: Type.Integer(),
  replayed: Type.Integer(),
  version: Type.Integer(),
  hash: Type.String(),
  ms: Type.Number(),
});

export async function adminPlugin(app: FastifyInstance, opts: AdminOptions): Promise<void> {
  const run = opts.run;
  // Compare digests, so neither the length nor the content of the token leaks through timing.
  const want = createHash('sha256').update(opts.token).digest();
  const limiter = opts.limiter;

  app.addHook('onRequest', async (req, reply) => {
    const wait = limiter.retryAfter(req.ip);
    if (wait > 0) {
      reply.header('retry-after', String(Math.ceil(wait / 1000)));
      return sendError(
        reply,
        429,
        'E_RATE_LIMIT',
        `too many wrong admin tokens from this address: retry in ${Math.ceil(wait / 1000)} s`,
      );
    }
    const h = req.headers.authorization;
    const m = typeof h === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
    const got = createHash('sha256')
      .update(m ? m[1] : '')
      .digest();
    if (!m || !timingSafeEqual(got, want)) {
      limiter.failed(req.ip);
      reply.header('www-authenticate', 'Bearer realm="atoll-admin"');
      return sendError(reply, 401, 'E_UNAUTHORIZED', 'admin routes need Authorization: Bearer <ATOLL_ADMIN_TOKEN>');
    }
    limiter.succeeded(req.ip);
  });

  // A side-effect-free token check: the dashboard flags a wrong token when it is entered.
  app.get(
    '/api/admin/whoami',
    { schema: { response: replies(Type.Object({ ok: Type.Literal(true), role: Type.Literal('admin') })) } },
    async () => ({ ok: true as const, role: 'admin' as const }),
  );

  app.post<{ Body: Static<typeof NoBody> }>(
    '/api/admin/pause',
    { schema: { body: NoBody, response: replies(Paused) } },
    async () => {
      await run.admin.pause();
      return { ok: true as const, paused: true, version: run.version };
    },
  );

  app.post<{ Body: Static<typeof NoBody> }>(
    '/api/admin/resume',
    { schema: { body: NoBody, response: replies(Paused) } },
    async () => {
      await run.admin.resume();
      return { ok: true as const, paused: false, version: run.version };
    },
  );

  // a body outside the schema is a 400 E_BAD_REQUEST (the app's error handler); one the coordinator refuses, E_BAD_CONFIG
  app.patch<{ Body: ConfigPatch }>(
    '/api/admin/config',
    { schema: { body: ConfigPatchSchema, response: replies(Type.Object({ ok: Type.Literal(true), config: Any })) } },
    async (req, reply) => {
      const r = await run.admin.setConfig(toCoordinatorPatch(req.body, run.coord.config()));
      if (!r.ok) return sendError(reply, 400, r.error.code, r.error.message);
      return { ok: true as const, config: r.value.coordinator };
    },
  );

  app.post<{ Body: Static<typeof NoBody> }>(
    '/api/admin/checkpoint',
    { schema: { body: NoBody, response: replies(Checkpointed) } },
    async () => {
      const c = await run.admin.checkpointNow();
      return { ok: true as const, ...c };
    },
  );

  app.post<{ Params: Static<typeof IdParams>; Body: Static<typeof BanBody> }>(
    '/api/admin/islands/:id/ban',
    { schema: { params: IdParams, body: BanBody, response: replies(Banned) } },
    async (req, reply) => {
      const id = req.params.id;
      const r = await run.admin.ban(id, req.body?.reason ?? 'banned by admin');
      if (!r.ok)
        return sendError(reply, r.error.code === 'E_UNKNOWN_ISLAND' ? 404 : 400, r.error.code, r.error.message);
      return {
        ok: true as const,
        island: id,
        status: 'banned' as const,
        revokedTokens: r.value.revokedTokens,
        deltas: r.value.deltas,
      };
    },
  );

  // what a revert would take out: the island's applied deltas since its last passed audit
  app.get<{ Params: Static<typeof IdParams> }>(
    '/api/admin/islands/:id/deltas',
    { schema: { params: IdParams, response: replies(Deltas) } },
    async (req, reply) => {
      const rec = run.coord.island(req.params.id);
      if (!rec) return sendError(reply, 404, 'E_UNKNOWN_ISLAND', `no island ${req.params.id}`);
      return { island: rec.id, lastPassedSeq: rec.audits?.lastPassedSeq ?? null, deltas: run.admin.deltas(rec.id) };
    },
  );

  app.post<{ Params: Static<typeof IdParams>; Body: Static<typeof NoBody> }>(
    '/api/admin/islands/:id/revert',
    { schema: { params: IdParams, body: NoBody, response: replies(Reverted) } },
    async (req, reply) => {
      const r = await run.admin.revert(req.params.id);
      if (!r.ok)
        return sendError(
          reply,
          r.error.code === 'E_UNKNOWN_ISLAND' ? 404 : r.error.code === 'E_NOT_KEPT' ? 409 : 400,
          r.error.code,
          r.error.message,
        );
      return { ok: true as const, ...r.value };
    },
  );
}
