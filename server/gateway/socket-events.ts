// The gateway's socket.io events declared like routes: each event names its schema (core/protocol.ts),
// whether it needs a hello first, the refusals checked before its schema, and its handler.
// `registerEvents` is the one place that checks them, in this order, for every event:
//   one payload and an ack callback (else a `protocol_error` emit) → the socket's rate limit →
//   hello (E_NO_HELLO) → the event's guard → the schema (E_BAD_REQUEST) → the handler.
// The ack gets a Result; nothing a handler throws escapes (E_INTERNAL).

import type { Socket } from 'socket.io';
import type { Static, TSchema } from '@sinclair/typebox';
import { TypeCompiler, type TypeCheck } from '@sinclair/typebox/compiler';
import { ErrorCode } from '../../core/protocol.ts';
import { type Err, err } from '../../core/result.ts';

/** Gateway-level error codes (besides core/protocol's). */
export const GatewayError = {
  /** A frame above the largest legal frame for this model. */
  OVERSIZE: 'E_OVERSIZE',
  RATE_LIMIT: 'E_RATE_LIMIT',
  /** A request that needs an identity (hello first). */
  NO_HELLO: 'E_NO_HELLO',
  UNKNOWN_EVENT: 'E_UNKNOWN_EVENT',
  INTERNAL: 'E_INTERNAL',
} as const;

export type Ack = (r: unknown) => void;

/** One island socket's state: its identity once it said hello, its rate limit and violations. */
export interface IslandConn {
  readonly socket: Socket;
  readonly ip: string;
  islandId: string | null;
  tokens: number;
  refilledAt: number;
  violations: number;
  /** Authenticated with the validator token. */
  validator?: boolean;
}

/** An event as declared; `H`: whether it needs a hello (its handler then gets the island's id). */
export interface EventSpec<C, S extends TSchema, H extends boolean> {
  schema: S;
  needsHello: H;
  /** The refusal of a payload the schema fails; absent: `<event>: <the schema's first error>`. */
  invalid?: string;
  /** An absent (undefined or null) payload reads as `{}`. */
  optional?: boolean;
  /** A refusal checked after hello, before the schema (rate limits, roles); undefined: go on. */
  guard?: (c: C) => Err | undefined;
  /** Sees a payload the schema refused (to count it). */
  refused?: (c: C, payload: unknown) => void;
  handle(c: C, payload: Static<S>, ack: Ack, islandId: H extends true ? string : string | null): Promise<void> | void;
}

/** An event with its schema's type erased, as the table holds it. */
export interface SocketEvent<C> {
  schema: TSchema;
  needsHello: boolean;
  invalid?: string;
  optional?: boolean;
  guard?: (c: C) => Err | undefined;
  refused?: (c: C, payload: unknown) => void;
  handle(c: C, payload: unknown, ack: Ack, islandId: string | null): Promise<void> | void;
}

export type EventTable<C> = Record<string, SocketEvent<C>>;

/** Declares one event (the schema types its handler's payload). */
export function defineEvent<C, S extends TSchema, H extends boolean>(spec: EventSpec<C, S, H>): SocketEvent<C> {
  return spec as unknown as SocketEvent<C>;
}

const compiled = new WeakMap<TSchema, TypeCheck<TSchema>>();

/** The schema's compiled check, compiled once. */
function checkOf(schema: TSchema): TypeCheck<TSchema> {
  let c = compiled.get(schema);
  if (!c) {
    c = TypeCompiler.Compile(schema);
    compiled.set(schema, c);
  }
  return c;
}

export function firstError(c: { Errors(v: unknown): Iterable<{ path: string; message: string }> }, v: unknown): string {
  for (const e of c.Errors(v)) return `${e.path || '(message)'}: ${e.message}`;
  return 'invalid message';
}

/** What registering needs of the socket's owner: its rate limit, its violations, its log. */
export interface SocketPolicy {
  /** Takes one message from the socket's budget; false: over the rate limit. */
  allow(): boolean;
  /** A protocol violation (a `protocol_error` emit, past a budget a disconnect). */
  violation(code: string, message: string): void;
  log(line: string): void;
}

/** Registers every event of the table on the socket, each checked as the header says. */
export function registerEvents<C extends { islandId: string | null }>(
  socket: Socket,
  events: EventTable<C>,
  c: C,
  policy: SocketPolicy,
): void {
  for (const [event, spec] of Object.entries(events)) {
    const check = checkOf(spec.schema);
    const run = (raw: unknown, ack: Ack): Promise<void> | void => {
      const id = c.islandId;
      if (spec.needsHello && !id) return ack(err(GatewayError.NO_HELLO, 'say hello first'));
      const refusal = spec.guard?.(c);
      if (refusal) return ack(refusal);
      const payload = spec.optional ? (raw ?? {}) : raw;
      if (!check.Check(payload)) {
        spec.refused?.(c, payload);
        return ack(err(ErrorCode.BAD_REQUEST, spec.invalid ?? `${event}: ${firstError(check, payload)}`));
      }
      return spec.handle(c, payload, ack, id);
    };
    socket.on(event, (...args: unknown[]) => {
      const ack = args[args.length - 1];
      if (typeof ack !== 'function' || args.length > 2) {
        policy.violation(ErrorCode.BAD_REQUEST, `'${event}' must be sent with one payload and an ack callback`);
        return;
      }
      const reply = ack as Ack;
      if (!policy.allow()) {
        reply(err(GatewayError.RATE_LIMIT, 'too many messages: slow down'));
        return;
      }
      const payload = args.length === 2 ? args[0] : undefined;
      Promise.resolve()
        .then(() => run(payload, reply))
        .catch((e: unknown) => {
          policy.log(`gateway: '${event}' handler failed: ${(e as Error)?.stack ?? String(e)}`);
          try {
            reply(err(GatewayError.INTERNAL, 'internal error'));
          } catch {
            /* socket gone */
          }
        });
    });
  }
}
