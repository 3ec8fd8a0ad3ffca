// The island ⇄ server protocol: message types, error codes and small validators.
//
// Inbound messages are TypeBox schemas and their types derive from them (Static<>): the gateway
// compiles each schema once and checks every message against it before anything reads it. Shared
// by the coordinator (core/coord), the island runtime (client/island), the simulator
// (instruments/simulate) and the socket.io gateway. Every object is closed (additionalProperties:
// false) and every string, number and nesting level is bounded, so nothing an island sends can
// grow the server's state beyond these bounds.
//
// One island's life, in messages:
//
//   island → server   challenge                               → {challenge, bits, expiresAt}
//                                                                (a new identity's proof of work)
//   island → server   hello {protocolVersion, caps, pow}      → assignment (or error)
//   island → server   fetchModel                              → {version, hash, params (f32)}
//   island → server   delta {DeltaMeta, frame (codec bytes)}  → ack   (sent only once durable)
//   server → island   update {UpdateMsg}  (broadcast, one per version v → v+1)
//   island → server   nextAssignment                          → assignment, when one exists
//   island → server   updates {fromVersion}                   → UpdateMsg[] or "too old"
//   island → server   rename {name}                           → {}   (display name, while connected)
//   island → server   bye {reason}
//
// Binary payloads (delta frames, update frames, params) travel as Uint8Array / Float32Array.

import { Type, type Static } from '@sinclair/typebox';
import type { UpdateMsg } from './server-messages.ts';

export {
  type AckMsg,
  type AckStatus,
  type Assignment,
  type HelloAnswer,
  type InnerLrPlan,
  type ModelSnapshotMsg,
  type TrainingMode,
  type UpdateMsg,
  innerLearningRate,
} from './server-messages.ts';

/** Bumped on every incompatible change to the messages below. */
export const PROTOCOL_VERSION = 3;

/**
 * The events an island (or a validator) sends the server, each with an ack; butterfly mixing adds its own
 * (server/gateway/mix.ts MIX_EVENTS).
 */
export const ISLAND_EVENTS = [
  'challenge',
  'hello',
  'delta',
  'nextAssignment',
  'updates',
  'fetchModel',
  'rename',
  'bye',
  'validator',
  'auditJob',
  'verdict',
] as const;

/**
 * Every error code an island can see, with the layer that produces it. Codec codes are passed
 * through from core/codec unchanged (E_TRUNCATED, E_CRC, E_CORRUPT, ...).
 */
export const ErrorCode = {
  // coordinator validation of a delta (core/coord)
  UNKNOWN_ISLAND: 'E_UNKNOWN_ISLAND',
  BANNED: 'E_BANNED',
  WRONG_SIZE: 'E_WRONG_SIZE',
  NON_FINITE: 'E_NON_FINITE',
  STALE: 'E_STALE',
  FUTURE_VERSION: 'E_FUTURE_VERSION',
  DUPLICATE: 'E_DUPLICATE',
  NORM_BOUND: 'E_NORM_BOUND',
  /** A delta's claimed work does not fit its assignment (steps above it, tokens ≠ steps × batch × seqLen). */
  BAD_CLAIM: 'E_BAD_CLAIM',
  PAUSED: 'E_PAUSED',
  /** Butterfly mixing: an audit found this member's fragment, partial sum or replayed Δ wrong (core/mix). */
  MIX_MISMATCH: 'E_MIX_MISMATCH',
  /** The server holds its maximum number of islands (connected, or records kept): retry later. */
  FULL: 'E_FULL',
  /** The run reached its token budget: no more assignments. Not a failure. */
  DONE: 'E_DONE',
  /** A malformed message (missing field, wrong type, bad number). */
  BAD_REQUEST: 'E_BAD_REQUEST',
  /** hello from an island of another tokenizer than the run's (caps.tokenizer): it would train on other ids. */
  TOKENIZER_MISMATCH: 'E_TOKENIZER_MISMATCH',
  /** hello with a protocol version this server does not speak. */
  PROTOCOL_VERSION: 'E_PROTOCOL_VERSION',
  /** setConfig with an invalid value. */
  BAD_CONFIG: 'E_BAD_CONFIG',
  // codec (core/codec), passed through
  TRUNCATED: 'E_TRUNCATED',
  CRC: 'E_CRC',
  CORRUPT: 'E_CORRUPT',
  BAD_MAGIC: 'E_BAD_MAGIC',
  BAD_HEADER: 'E_BAD_HEADER',
  VERSION: 'E_VERSION',
  // transport / runtime (client/island, server gateway)
  TRANSPORT: 'E_TRANSPORT',
  /** The island's replica hash differs from the server's: it must fetch a snapshot. */
  HASH_MISMATCH: 'E_HASH_MISMATCH',
  /** Catch-up needs updates the server no longer keeps: fetch a snapshot. */
  TOO_OLD: 'E_TOO_OLD',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

// ── inbound schemas (island → server) ────────────────────────

/** A JSON-safe non-negative integer. */
const Int = (o: object = {}) => Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, ...o });
/** Island ids, resume tokens, contributor ids: short, printable, no separators. */
const Id = (maxLength: number) => Type.String({ minLength: 1, maxLength, pattern: '^[A-Za-z0-9_-]+$' });
const closed = { additionalProperties: false } as const;

/** An island's numerics: f32, or f16 storage (the WebGPU engine's --precision f16; bf16 only in the simulator). */
export const NumericsSchema = Type.Union([Type.Literal('f32'), Type.Literal('f16'), Type.Literal('bf16')]);
export type Numerics = Static<typeof NumericsSchema>;

export const EngineKindSchema = Type.Union([Type.Literal('cpu'), Type.Literal('webgpu')]);
export type EngineKind = Static<typeof EngineKindSchema>;

/** What an island says about itself in `hello`. All of it is a claim: shown, or bounded before use. */
export const IslandCapsSchema = Type.Object(
  {
    /** Human-readable name, shown on the dashboard. */
    name: Type.Optional(Type.String({ maxLength: 64 })),
    /**
     * A stable anonymous id of the contributor (a browser keeps it in localStorage), so credit on
     * the leaderboard adds up across sessions and devices of one volunteer. Never personal data.
     */
    contributorId: Type.Optional(Id(64)),
    engine: EngineKindSchema,
    /** Adapter / device description ("cpu", "NVIDIA ...", "google / swiftshader"). */
    adapter: Type.Optional(Type.String({ maxLength: 256 })),
    /** Benchmarked training throughput, tokens/s. Seeds DyLU until the first delta is measured. */
    tokensPerSec: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1e12 })),
    /** Largest micro-batch the island can run; the server never assigns more. */
    maxBatch: Type.Optional(Int({ minimum: 1, maximum: 65536 })),
    /** Preferred micro-batch (≤ maxBatch); the server uses it when it fits its own bounds. */
    batchSize: Type.Optional(Int({ minimum: 1, maximum: 65536 })),
    /** Storage precision of its activations and weight copy (master weights are f32 everywhere); default f32. Shown. */
    numerics: Type.Optional(NumericsSchema),
    /** Devices it trains on data-parallel (one Δ for all of them); default 1. Shown. */
    devices: Type.Optional(Int({ minimum: 1, maximum: 64 })),
    /** The tokenizer whose ids it expects (`byte`, `gpt2`, …); absent: it takes the run's. Another is refused. */
    tokenizer: Type.Optional(Type.String({ minLength: 1, maxLength: 32, pattern: '^[A-Za-z0-9_.-]+$' })),
  },
  closed,
);
export type IslandCaps = Static<typeof IslandCapsSchema>;

export const HelloSchema = Type.Object(
  {
    protocolVersion: Int(),
    caps: IslandCapsSchema,
    /** Rejoin under a previous id (keeps the island's record, stats and data stream); needs resumeToken. */
    resumeIslandId: Type.Optional(Id(64)),
    /** The token the server handed out with that id in its answer to the first hello. */
    resumeToken: Type.Optional(Id(128)),
    /** false: no pushed `update` broadcasts (the island pulls with `updates` when it needs θ). */
    push: Type.Optional(Type.Boolean()),
    /** A new identity's proof of work (docs/protocol.md): a `challenge` answer and a nonce for it. */
    pow: Type.Optional(
      Type.Object(
        {
          challenge: Type.String({ minLength: 1, maxLength: 128 }),
          nonce: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$' }),
        },
        closed,
      ),
    ),
  },
  closed,
);
export type HelloMsg = Static<typeof HelloSchema>;

// JSON has no NaN: an island's NaN loss travels as null.
const Loss = Type.Union([Type.Number(), Type.Null()]);

/** Metadata sent with each delta frame. */
export const DeltaMetaSchema = Type.Object(
  {
    islandId: Id(64),
    /** The assignment's roundId, echoed. */
    roundId: Int(),
    /** The version the island actually trained from. */
    baseVersion: Int(),
    /** Per-island sequence number, strictly increasing over the island's life (replay guard). */
    seq: Int(),
    /** Inner steps run: at most the assignment's innerSteps. */
    steps: Int({ maximum: 1e9 }),
    /** Tokens trained on: exactly steps × batchSize × seqLen of the assignment. */
    tokens: Int({ maximum: 1e15 }),
    lossFirst: Loss,
    lossLast: Loss,
    lossMean: Loss,
    /** Compute time of the inner steps, ms (informational: shown, never used to weigh or credit). */
    elapsedMs: Type.Number({ minimum: 0, maximum: 1e12 }),
  },
  closed,
);
/** DeltaMeta as it arrives; `DeltaMeta` holds NaN where the wire has null. */
export type DeltaMetaWire = Static<typeof DeltaMetaSchema>;
export type DeltaMeta = Omit<DeltaMetaWire, 'lossFirst' | 'lossLast' | 'lossMean'> & {
  lossFirst: number;
  lossLast: number;
  lossMean: number;
};

/** `delta`: the metadata and the codec frame (binary). The frame's size is checked separately. */
export const DeltaSchema = Type.Object({ meta: DeltaMetaSchema, frame: Type.Uint8Array() }, closed);
/** `updates`: the update messages after `fromVersion`. */
export const UpdatesSchema = Type.Object({ fromVersion: Int() }, closed);
export const ByeSchema = Type.Object({ reason: Type.Optional(Type.String({ maxLength: 256 })) }, closed);
/** `rename`: the island's display name, changed while connected (the leaderboard shows it from its next update). */
export const RenameSchema = Type.Object({ name: Type.String({ minLength: 1, maxLength: 64 }) }, closed);
/** `validator`: a trusted validator's token (docs/protocol.md, "Verified work"). */
export const ValidatorSchema = Type.Object({ token: Type.String({ minLength: 1, maxLength: 256 }) }, closed);
/** `verdict`: a validator's measurement of an audit job; both null when it could not judge it. */
export const VerdictSchema = Type.Object(
  {
    jobId: Int(),
    cosine: Type.Union([Type.Number({ minimum: -1.001, maximum: 1.001 }), Type.Null()]),
    normRatio: Type.Union([Type.Number({ minimum: 0, maximum: 1e12 }), Type.Null()]),
  },
  closed,
);
/** `nextAssignment`, `fetchModel`, `auditJob`: no payload ({} or none). */
export const EmptySchema = Type.Union([Type.Object({}, closed), Type.Undefined(), Type.Null()]);

// ── butterfly mixing (docs/protocol.md, "Butterfly mixing"; core/mix) ──────────────

/** A SHA-256, 64 lowercase hex digits. */
const Sha256 = Type.String({ minLength: 64, maxLength: 64, pattern: '^[0-9a-f]{64}$' });

/**
 * `mix:ready`'s meta: DeltaMeta without what the server takes from the connection (`islandId`),
 * derives from the assignment (`tokens` = steps × batchSize × seqLen) or does not use (`lossFirst`,
 * `lossLast`); each may still be sent (an `islandId` must be the connection's, `tokens` the derived
 * figure). Steps, base version and the rest are checked against the island's assignment as for `delta`.
 */
export const MixReadyMetaSchema = Type.Object(
  {
    ...DeltaMetaSchema.properties,
    islandId: Type.Optional(Id(64)),
    tokens: Type.Optional(DeltaMetaSchema.properties.tokens),
    lossFirst: Type.Optional(Loss),
    lossLast: Type.Optional(Loss),
  },
  closed,
);
/**
 * `mix:ready`: the island's round is done; it commits to its Δ frame (SHA-256 of the exact bytes it
 * would send as `delta`) and asks to be grouped. Answered with a MixPlan, or null: send `delta`.
 */
export const MixReadySchema = Type.Object({ meta: MixReadyMetaSchema, frameHash: Sha256 }, closed);

/**
 * What a member sends as `mix:ready`'s meta: its Δ's meta less what the server does not need, the
 * informational figures rounded (loss to 1e-5, compute time to the ms): every byte here is paid per
 * member, where the fragment is paid once per group.
 */
export function mixReadyMeta(m: DeltaMeta): Static<typeof MixReadyMetaSchema> {
  const { islandId: _id, tokens: _tokens, lossFirst: _first, lossLast: _last, ...rest } = m;
  return {
    ...rest,
    lossMean: Number.isFinite(rest.lossMean) ? Math.round(rest.lossMean * 1e5) / 1e5 : null,
    elapsedMs: Math.round(rest.elapsedMs),
  };
}
/**
 * `mix:fragment`: the member's fragment (a codec frame of its range of the group's mean), or null when its exchange
 * failed.
 */
export const MixFragmentSchema = Type.Object(
  { groupId: Int(), frame: Type.Union([Type.Uint8Array(), Type.Null()]) },
  closed,
);
/** The answer to the server's `mix:replay`: the committed Δ frame; null: cannot. */
export const MixAnswerSchema = Type.Object(
  { groupId: Int(), frame: Type.Union([Type.Uint8Array(), Type.Null()]) },
  closed,
);
/**
 * The answer to the server's `mix:check`: the SHA-256 of fragment j's frame as this member recomputes it; null: cannot.
 */
export const MixCheckAnswerSchema = Type.Object({ groupId: Int(), hash: Type.Union([Sha256, Type.Null()]) }, closed);
/**
 * `mix:signal`: WebRTC signalling for one peer of the group, relayed by the server as it is: the
 * offer and answer SDP (non-trickle: gathered candidates inside), or one ICE candidate.
 */
export const MixSignalSchema = Type.Object(
  {
    groupId: Int(),
    /** The peer's member index. */
    to: Int({ maximum: 255 }),
    kind: Type.Union([Type.Literal('offer'), Type.Literal('answer'), Type.Literal('candidate')]),
    data: Type.String({ maxLength: 16384 }),
  },
  closed,
);

/** The server's answer to `mix:ready` when a group formed: who mixes, with what weights, over which ranges. */
export interface MixPlanMsg {
  groupId: number;
  /** This island's member index. */
  index: number;
  /** In member order: island id, the tokens the server assigned it (its weight), its Δ frame's SHA-256. */
  members: Array<{ islandId: string; tokens: number; frameHash: string }>;
  /** Fragment j covers parameters [ranges[j][0], ranges[j][1]). */
  ranges: Array<[number, number]>;
  /** ms: a group whose fragments are not all in by then falls back to direct uploads. */
  exchangeTimeoutMs: number;
  /** RTCPeerConnection iceServers the operator configured (empty on loopback). */
  iceServers: Array<{ urls: string | string[]; username?: string; credential?: string }>;
  /**
   * This member's butterfly partners (index XOR 2^s) whose data channel with it the server signalled
   * in an earlier group and nobody reported lost (`mix:lost`): use that channel, signal nothing. The
   * partners not listed are connected afresh through `mix:signal`.
   */
  linked?: number[];
}

/**
 * Data channels a member keeps open to other islands, at most (least recently used closed first); the server tracks as
 * many per island.
 */
export const MIX_LINKS_KEPT = 16;

/**
 * `mix:lost`: this island's data channel with island `peer`, made by group `groupId`'s signalling,
 * closed or never opened: the next group that pairs them signals it afresh.
 */
export const MixLostSchema = Type.Object({ peer: Id(64), groupId: Int() }, closed);

/**
 * `mix:piece`: one member's byte piece of an update frame; its ring (a downlink group, numbered with
 * the groups: not necessarily one the member mixed in) exchanges the rest.
 */
export interface MixPieceMsg {
  update: Omit<UpdateMsg, 'frame'>;
  /** SHA-256 of the whole update frame. */
  frameHash: string;
  /** The ring's id: the exchange key is `d<groupId>@<version>`, and `mix:signal` for its new links names it. */
  groupId: number;
  index: number;
  /** The ring's island ids in member order. */
  members: string[];
  piece: Uint8Array;
  /**
   * Present when the ring needs links not made yet: the partners already linked, as MixPlanMsg.linked;
   * the others are connected through `mix:signal` naming this ring. Absent: every partner is linked.
   */
  linked?: number[];
}

// ---------------------------------------------------------------------------------------------
// The coordinator's own check of a delta's numbers, for callers that bypass the gateway (the
// simulator, tests): only what keeps its arithmetic sound (integers where it counts, numbers where
// it divides). The shape check with the bounds is the gateway's compiled DeltaMetaSchema.
// Returns an error message, or null when valid.

const isNonNegInt = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0;

export function validateDeltaMeta(m: unknown): string | null {
  if (typeof m !== 'object' || m === null) return 'delta meta must be an object';
  const d = m as Partial<DeltaMeta>;
  if (typeof d.islandId !== 'string' || d.islandId.length === 0) return 'islandId must be a non-empty string';
  for (const k of ['roundId', 'baseVersion', 'seq', 'steps', 'tokens'] as const) {
    if (!isNonNegInt(d[k])) return `${k} must be a non-negative integer`;
  }
  for (const k of ['lossFirst', 'lossLast', 'lossMean', 'elapsedMs'] as const) {
    if (typeof d[k] !== 'number') return `${k} must be a number`;
  }
  if (!(d.elapsedMs! >= 0)) return 'elapsedMs must be ≥ 0';
  return null;
}
