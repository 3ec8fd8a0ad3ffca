// Admin routes under /api/admin, behind `Authorization: Bearer <ATOLL_ADMIN_TOKEN>`.
// Every change is durable (checkpointed, logged) before the 200 goes out.

import { timingSafeEqual, createHash } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { ENCODINGS, type Encoding } from '../../core/codec/index.ts';
import type { CoordinatorConfigPatch } from '../../core/coord/index.ts';
import type { Run } from '../run.ts';

export interface AdminOptions {
  run: Run;
  token: string;
}

/** The hyperparameters an admin may change while the run is live. */
export const ConfigPatchSchema = Type.Object({
  outerLr: Type.Optional(Type.Number({ minimum: 0, maximum: 10 })),
  outerMomentum: Type.Optional(Type.Number({ minimum: 0, maximum: 0.999 })),
  /** Target round time, seconds (0: fixed inner steps). */
  roundTime: Type.Optional(Type.Number({ minimum: 0, maximum: 86_400 })),
  quorum: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  maxStaleness: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
  codec: Type.Optional(Type.Union(ENCODINGS.map((e) => Type.Literal(e)))),
  innerSteps: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
}, { additionalProperties: false, minProperties: 1 });

const IdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) }, { additionalProperties: false });
const BanBody = Type.Union([Type.Object({ reason: Type.Optional(Type.String({ maxLength: 256 })) }, { additionalProperties: false }), Type.Null()]);

function toCoordinatorPatch(b: Static<typeof ConfigPatchSchema>, current: { outer: object; uplink: object }): CoordinatorConfigPatch {
  const p: CoordinatorConfigPatch = {};
  if (b.outerLr !== undefined || b.outerMomentum !== undefined) {
    p.outer = { ...current.outer, ...(b.outerLr !== undefined ? { lr: b.outerLr } : {}), ...(b.outerMomentum !== undefined ? { momentum: b.outerMomentum } : {}) };
  }
  if (b.roundTime !== undefined) p.targetRoundMs = Math.round(b.roundTime * 1000);
  if (b.quorum !== undefined) p.quorum = b.quorum;
  if (b.maxStaleness !== undefined) p.maxStaleness = b.maxStaleness;
  // another encoding starts from its own defaults (sparse's block of 4096 is no int4 setting)
  if (b.codec !== undefined) p.uplink = b.codec === (current.uplink as { encoding: string }).encoding ? { ...current.uplink } : { encoding: b.codec as Encoding };
  if (b.innerSteps !== undefined) p.innerSteps = b.innerSteps;
  return p;
}

export async function adminPlugin(app: FastifyInstance, opts: AdminOptions): Promise<void> {
  const run = opts.run;
  // Compare digests, so neither the length nor the content of the token leaks through timing.
  const want = createHash('sha256').update(opts.token).digest();

  app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
    const h = req.headers.authorization;
    const m = typeof h === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
    const got = createHash('sha256').update(m ? m[1] : '').digest();
    if (!m || !timingSafeEqual(got, want)) {
      reply.header('www-authenticate', 'Bearer realm="atoll-admin"');
      return reply.code(401).send({ error: { code: 'E_UNAUTHORIZED', message: 'admin routes need Authorization: Bearer <ATOLL_ADMIN_TOKEN>' } });
    }
  });

  // A side-effect-free token check: the dashboard flags a wrong token when it is entered.
  app.get('/api/admin/whoami', async () => ({ ok: true, role: 'admin' }));

  app.post('/api/admin/pause', async () => {
    await run.pause();
    return { ok: true, paused: true, version: run.version };
  });

  app.post('/api/admin/resume', async () => {
    await run.resume();
    return { ok: true, paused: false, version: run.version };
  });

  // attachValidation: a bad patch answers E_BAD_CONFIG, like a patch the coordinator refuses.
  app.patch('/api/admin/config', { schema: { body: ConfigPatchSchema }, attachValidation: true }, async (req, reply) => {
    if (req.validationError) return reply.code(400).send({ error: { code: 'E_BAD_CONFIG', message: req.validationError.message } });
    const cur = run.coord.config();
    const r = await run.setConfig(toCoordinatorPatch(req.body as Static<typeof ConfigPatchSchema>, cur));
    if (!r.ok) return reply.code(400).send({ error: r.error });
    return { ok: true, config: r.value.coordinator };
  });

  app.post('/api/admin/checkpoint', async () => {
    const c = await run.checkpointNow();
    return { ok: true, ...c };
  });

  app.post('/api/admin/islands/:id/ban', { schema: { params: IdParams, body: BanBody } }, async (req, reply) => {
    const id = (req.params as Static<typeof IdParams>).id;
    const reason = (req.body as Static<typeof BanBody> | undefined)?.reason ?? 'banned by admin';
    const r = await run.ban(id, reason);
    if (!r.ok) return reply.code(r.error.code === 'E_UNKNOWN_ISLAND' ? 404 : 400).send({ error: r.error });
    return { ok: true, island: id, status: 'banned' };
  });
}
