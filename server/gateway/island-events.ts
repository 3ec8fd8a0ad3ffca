// The island protocol's events (core/protocol.ts ISLAND_EVENTS, docs/protocol.md), declared like routes:
// each names its schema, whether it needs a hello, and its handler (socket-events.ts checks them).

import {
  ByeSchema,
  type DeltaMeta,
  DeltaSchema,
  EmptySchema,
  ErrorCode,
  type HelloAnswer,
  HelloSchema,
  type ISLAND_EVENTS,
  PROTOCOL_VERSION,
  RenameSchema,
  UpdatesSchema,
  ValidatorSchema,
  VerdictSchema,
} from '../../core/protocol.ts';
import { AuditError } from '../../core/coord/audit.ts';
import { err, ok } from '../../core/result.ts';
import type { AuthLimiter } from '../plugins/auth-limit.ts';
import type { IdentityCost } from './identity-cost.ts';
import type { IslandSockets } from './island-sockets.ts';
import type { MixGateway } from './mix.ts';
import type { RunPort } from './run-port.ts';
import { GatewayError, type IslandConn, type SocketEvent, defineEvent } from './socket-events.ts';
import type { TokenBuckets } from './token-buckets.ts';

/** What the island events need of the gateway. */
export interface IslandEventHost {
  readonly run: RunPort;
  readonly maxIslands: number;
  readonly mix?: MixGateway;
  readonly maxHttpBufferSize: number;
  /** The hellos counted per address. */
  readonly helloLimiter: TokenBuckets;
  readonly identities: IdentityCost;
  readonly validatorAuth: AuthLimiter;
  readonly sockets: IslandSockets;
  readonly stats: { oversize: number };
}

type IslandEvent = (typeof ISLAND_EVENTS)[number];

const notValidator = () =>
  err(AuditError.NOT_VALIDATOR, "this connection is not a validator (send `validator` with the server's token first)");

/** The bytes of a delta's frame, read before any check (what a refusal counts). */
const frameBytes = (payload: unknown): number =>
  payload && typeof payload === 'object' && (payload as { frame?: unknown }).frame instanceof Uint8Array
    ? (payload as { frame: Uint8Array }).frame.length
    : 0;

export function islandEvents(gw: IslandEventHost): Record<IslandEvent, SocketEvent<IslandConn>> {
  const { run } = gw;
  return {
    // a new identity's proof of work: the challenge to solve (before hello; docs/protocol.md)
    challenge: defineEvent({
      schema: EmptySchema,
      needsHello: false,
      invalid: 'challenge takes no payload',
      handle: (_c: IslandConn, _p, ack) => ack(ok(gw.identities.challenge())),
    }),

    hello: defineEvent({
      schema: HelloSchema,
      needsHello: false,
      guard: (c: IslandConn) => {
        if (c.islandId) return err(ErrorCode.BAD_REQUEST, 'this connection already said hello');
        if (!gw.helloLimiter.take(c.ip, Date.now()))
          return err(GatewayError.RATE_LIMIT, 'too many hellos from this address: retry later');
      },
      handle: async (c, h, ack) => {
        if (h.protocolVersion !== PROTOCOL_VERSION) {
          return ack(
            err(
              ErrorCode.PROTOCOL_VERSION,
              `this server speaks protocol ${PROTOCOL_VERSION}, the island ${h.protocolVersion}: ` +
                'reload the page / update atoll',
            ),
          );
        }
        if (gw.sockets.size >= gw.maxIslands)
          return ack(err(ErrorCode.FULL, 'the server holds its maximum number of islands: retry later'));
        // a new identity costs work (and the address's budget); a resume with its token costs nothing
        const resuming = h.resumeIslandId !== undefined && h.resumeToken !== undefined;
        let paid = false;
        if (!resuming || h.pow) {
          const p = gw.identities.pay(c.ip, h.pow);
          if (!p.ok && !resuming) return ack(err(p.error.code, p.error.message));
          paid = p.ok;
        }
        const r = await run.hello({
          caps: h.caps,
          protocolVersion: h.protocolVersion,
          resumeIslandId: h.resumeIslandId,
          resumeToken: h.resumeToken,
          resumeOnly: !paid,
        });
        if (!r.ok) return ack(err(r.error.code, r.error.message));
        const id = r.value.islandId;
        const { socket } = c;
        if (!socket.connected) {
          // gone while joining: it must not count as online (nor hold a sync round)
          if (!gw.sockets.has(id)) run.leave(id, 'disconnected during hello');
          return;
        }
        // bind first, so the replaced connection's disconnect does not read as the island leaving
        c.islandId = id;
        gw.sockets.bind(id, socket);
        for (const old of [...gw.sockets.of(id)]) {
          if (old === socket) continue;
          old.emit('protocol_error', { code: 'E_REPLACED', message: 'a newer connection took over this island' });
          old.disconnect(true);
        }
        if (h.push !== false) socket.join('islands');
        const d = run.durable();
        ack(
          ok<HelloAnswer>({
            islandId: id,
            resumeToken: r.value.resumeToken,
            assignment: r.value.assignment,
            version: d.version,
            hash: d.hash,
            protocolVersion: PROTOCOL_VERSION,
            maxFrameBytes: run.maxFrameBytes(),
            maxHttpBufferSize: gw.maxHttpBufferSize,
            serverTime: Date.now(),
            resumed: r.value.resumed,
            mixGroup: gw.mix?.k ?? 0,
          }),
        );
      },
    }),

    delta: defineEvent({
      schema: DeltaSchema,
      needsHello: true,
      refused: (_c: IslandConn, payload) => run.noteRejected(ErrorCode.BAD_REQUEST, frameBytes(payload)),
      handle: async (_c, { meta: raw, frame }, ack, islandId) => {
        const bytes = frame.length;
        const maxFrame = run.maxFrameBytes();
        if (frame.length > maxFrame) {
          gw.stats.oversize++;
          run.noteRejected(GatewayError.OVERSIZE, bytes);
          return ack(
            err(
              GatewayError.OVERSIZE,
              `frame of ${frame.length} bytes exceeds the largest legal frame (${maxFrame} bytes)`,
            ),
          );
        }
        const meta: DeltaMeta = {
          ...raw,
          lossFirst: raw.lossFirst ?? NaN,
          lossLast: raw.lossLast ?? NaN,
          lossMean: raw.lossMean ?? NaN,
        };
        if (meta.islandId !== islandId) {
          run.noteRejected(ErrorCode.BAD_REQUEST, bytes);
          return ack(err(ErrorCode.BAD_REQUEST, `delta for island ${meta.islandId} on the connection of ${islandId}`));
        }
        const a = await run.submit(meta, frame);
        ack(ok(a));
      },
    }),

    nextAssignment: defineEvent({
      schema: EmptySchema,
      needsHello: true,
      invalid: 'nextAssignment takes no payload',
      handle: async (c: IslandConn, _p, ack, islandId) => {
        const r = await run.nextAssignment(islandId);
        if (c.socket.connected) ack(r);
      },
    }),

    updates: defineEvent({
      schema: UpdatesSchema,
      needsHello: true,
      handle: async (_c: IslandConn, { fromVersion }, ack, islandId) => {
        gw.mix?.caughtUp(islandId, fromVersion);
        const r = await run.updatesSince(fromVersion);
        if (!r.ok) return ack(err(r.error.code, r.error.message));
        let bytes = 0;
        for (const u of r.value) bytes += u.frame.length + 256;
        run.noteBytesOut(bytes, 'catchup');
        ack(ok(r.value));
      },
    }),

    fetchModel: defineEvent({
      schema: EmptySchema,
      needsHello: true,
      invalid: 'fetchModel takes no payload',
      handle: async (_c: IslandConn, _p, ack) => {
        const d = await run.durableParams();
        const bytes = new Uint8Array(d.params.buffer, d.params.byteOffset, d.params.byteLength);
        run.noteBytesOut(bytes.length, 'model');
        ack(ok({ version: d.version, hash: d.hash, params: bytes }));
      },
    }),

    rename: defineEvent({
      schema: RenameSchema,
      needsHello: true,
      handle: async (_c: IslandConn, { name }, ack, islandId) => {
        const r = await run.rename(islandId, name);
        ack(r.ok ? ok({}) : err(r.error.code, r.error.message));
      },
    }),

    bye: defineEvent({
      schema: ByeSchema,
      needsHello: false,
      optional: true,
      handle: async (c: IslandConn, payload, ack) => {
        const reason = payload.reason ?? 'bye';
        if (c.islandId) {
          const id = c.islandId;
          gw.sockets.unbind(id, c.socket);
          gw.mix?.left(id, c.socket);
          c.islandId = null;
          if (!gw.sockets.has(id)) run.leave(id, reason.slice(0, 256));
        }
        ack(ok({}));
        setTimeout(() => c.socket.disconnect(true), 50);
      },
    }),

    // verified work: a validator authenticates with the token, then takes jobs and sends verdicts
    validator: defineEvent({
      schema: ValidatorSchema,
      needsHello: false,
      guard: (c: IslandConn) => {
        const wait = gw.validatorAuth.retryAfter(c.ip);
        if (wait > 0)
          return err(
            GatewayError.RATE_LIMIT,
            `too many wrong validator tokens from this address: retry in ${Math.ceil(wait / 1000)} s`,
          );
      },
      handle: (c, { token }, ack) => {
        const audits = run.audits;
        if (!audits) return ack(err(AuditError.NOT_VALIDATOR, 'this server runs no audits (no validator token)'));
        if (!audits.auth(token)) {
          gw.validatorAuth.failed(c.ip);
          return ack(err(AuditError.NOT_VALIDATOR, 'wrong validator token'));
        }
        gw.validatorAuth.succeeded(c.ip);
        c.validator = true;
        ack(ok({}));
      },
    }),

    auditJob: defineEvent({
      schema: EmptySchema,
      needsHello: false,
      invalid: 'auditJob takes no payload',
      guard: (c: IslandConn) => (!c.validator || !run.audits ? notValidator() : undefined),
      handle: async (_c, _p, ack) => ack(ok(await run.audits!.take())),
    }),

    verdict: defineEvent({
      schema: VerdictSchema,
      needsHello: false,
      guard: (c: IslandConn) => (!c.validator || !run.audits ? notValidator() : undefined),
      handle: async (_c, v, ack) => ack(await run.audits!.verdict(v.jobId, v.cosine, v.normRatio)),
    }),
  };
}
