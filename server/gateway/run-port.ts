// What the gateway (socket.io, server/gateway/gateway.ts) asks of the run: the seam between the island
// protocol and the coordinator. `localPort` is the embedded default (one process: the Run itself);
// server/cluster/remote-port.ts is the same port over Redis, answered by the aggregator role
// (server/cluster/run-host.ts), which drives a `localPort` of its own Run.
//
// Every hook reports state only once it is durable, as Run does.

import type { HistoryPoint, IslandView, MixStatus, RunStatus } from '../../core/api.ts';
import {
  type AckMsg,
  type Assignment,
  type DeltaMeta,
  ErrorCode,
  type IslandCaps,
  type UpdateMsg,
} from '../../core/protocol.ts';
import { checkIslandTokenizer } from '../../core/data/tokenizer.ts';
import { type Result, err, ok } from '../../core/result.ts';
import type { AuditJobWire, VerdictAnswer } from '../run/audit.ts';
import { checkWork } from '../../core/coord/validate.ts';
import type { BytesOutKind } from '../metrics.ts';
import type { MixHost } from './mix.ts';
import type { Run } from '../run/run.ts';

export interface HelloRequest {
  caps: IslandCaps;
  protocolVersion: number;
  resumeIslandId?: string;
  resumeToken?: string;
  /** No proof of work was paid: only a resumed identity may join (E_POW otherwise). */
  resumeOnly?: boolean;
}

/** A joined island: its id (resumed when the token matched), first assignment and resume token. */
export interface HelloGrant {
  islandId: string;
  assignment: Assignment | null;
  resumeToken: string;
  resumed: boolean;
}

export interface DashboardFeed {
  status: RunStatus;
  islands: IslandView[];
  history: HistoryPoint[];
}

export interface RunListener {
  update(u: UpdateMsg): void;
  ban(islandId: string): void;
  /** The run was reopened elsewhere (an aggregator took over): every island must say hello again. */
  reset(): void;
}

export interface RunPort {
  /** The largest legal delta frame. */
  maxFrameBytes(): number;
  /** The durable version and θ hash. */
  durable(): { version: number; hash: string };
  /** Broadcasts and bans, each once the state it reports is durable. */
  listen(l: RunListener): void;
  hello(req: HelloRequest): Promise<Result<HelloGrant>>;
  /** The ack: at once when rejected, once the version holding it is durable when applied. */
  submit(meta: DeltaMeta, frame: Uint8Array): Promise<AckMsg>;
  nextAssignment(islandId: string): Promise<Result<Assignment>>;
  updatesSince(fromVersion: number): Promise<Result<UpdateMsg[]>>;
  /** θ at the durable version (read-only by contract). */
  durableParams(): Promise<{ version: number; hash: string; params: Float32Array }>;
  rename(islandId: string, name: string): Promise<Result<void>>;
  leave(islandId: string, reason: string): void;
  /** The islands this gateway holds are alive. */
  heartbeat(islandIds: string[]): void;
  /** Sockets this gateway holds for an island (0: none). */
  setConnected(islandId: string, sockets: number): void;
  forgetWaiters(islandId: string): void;
  noteRejected(code: string, bytes: number): void;
  noteBytesOut(bytes: number, kind: BytesOutKind): void;
  status(): Promise<RunStatus>;
  /**
   * History points changed since the last call, with the status and islands when a dashboard watches (else null:
   * dropped).
   */
  dashboardFeed(watching: boolean): Promise<DashboardFeed | null>;
  /** Verified work; absent where the run holds no audits (no validator token). */
  audits?: AuditPort;
}

/** The validators' side of the run (server/run/audit.ts). */
export interface AuditPort {
  auth(token: string): boolean;
  take(): Promise<AuditJobWire | null>;
  verdict(jobId: number, cosine: number | null, normRatio: number | null): Promise<Result<VerdictAnswer>>;
}

/** The embedded port: the gateway and the Run in one process (`mix`: butterfly mixing's figures, where it mixes). */
export function localPort(run: Run, mix?: () => MixStatus): RunPort {
  return {
    maxFrameBytes: () => run.maxFrameBytes,
    durable: () => ({ version: run.version, hash: run.hash }),
    listen(l) {
      run.on('update', (u) => l.update(u));
      run.on('ban', (id) => l.ban(id));
      run.on('reset', () => l.reset());
    },
    async hello(h) {
      const other = checkIslandTokenizer(h.caps.tokenizer, run.config.tokenizer);
      if (other) return err(ErrorCode.TOKENIZER_MISMATCH, other);
      // Resuming an identity needs the token the server handed out with it.
      const resume =
        h.resumeIslandId !== undefined && run.islands.checkResumeToken(h.resumeIslandId, h.resumeToken)
          ? h.resumeIslandId
          : undefined;
      if (!resume && h.resumeOnly)
        return err(
          'E_POW',
          'the resume token was not accepted, and a new identity needs a proof of work: ask `challenge`, ' +
            'then hello with pow',
        );
      const r = await run.islands.join({ caps: h.caps, protocolVersion: h.protocolVersion, resumeIslandId: resume });
      if (!r.ok) return r;
      return ok({ ...r.value, resumeToken: run.islands.resumeToken(r.value.islandId), resumed: resume !== undefined });
    },
    submit: (meta, frame) => run.islands.submit(meta, frame),
    nextAssignment: (id) => run.islands.nextAssignment(id),
    updatesSince: async (v) => run.updatesSince(v),
    durableParams: async () => run.durableParams(),
    rename: async (id, name) => run.islands.rename(id, name),
    leave: (id, reason) => run.islands.leave(id, reason),
    heartbeat: (ids) => {
      for (const id of ids) run.islands.heartbeat(id);
    },
    setConnected: (id, sockets) => run.islands.setConnected(id, sockets),
    forgetWaiters: (id) => run.islands.forgetWaiters(id),
    noteRejected: (code, bytes) => run.islands.noteRejected(code, bytes),
    noteBytesOut: (bytes, kind) => run.islands.noteBytesOut(bytes, kind),
    status: async () => run.views.status(Date.now(), mix),
    async dashboardFeed(watching) {
      const history = run.views.takeDirtyHistory();
      return watching ? { history, status: run.views.status(Date.now(), mix), islands: run.views.islands() } : null;
    },
    audits: run.audits
      ? {
          auth: (token) => run.audits!.auth(token),
          take: async () => run.audits!.take(),
          verdict: (jobId, cosine, normRatio) => run.audits!.verdict(jobId, cosine, normRatio),
        }
      : undefined,
  };
}

/** What butterfly mixing needs of the run, embedded (the Redis roles do not carry mixing: serve refuses it there). */
export function localMixHost(run: Run): MixHost {
  return {
    paramCount: run.paramCount,
    maxFrameBytes: () => run.maxFrameBytes,
    codec: () => run.coord.config().uplink,
    work(meta) {
      const isl = run.coord.island(meta.islandId);
      if (!isl) return err(ErrorCode.UNKNOWN_ISLAND, `no island ${meta.islandId}`);
      // the frame's encoding is checked when the group's mean is submitted
      const w = checkWork(meta, null, isl, run.coord.config(), Date.now());
      return w.ok ? ok(w.meta) : err(w.code, w.message);
    },
    busy: () => run.coord.roundsInProgress(),
    submitMixed: (meta, frame, delta, norm) => run.islands.submit(meta, frame, { delta, norm }),
    ban: (id, reason) => run.admin.ban(id, reason),
    noteBytesIn: (bytes) => run.islands.noteBytesIn(bytes),
    noteBytesOut: (bytes, kind) => run.islands.noteBytesOut(bytes, kind),
  };
}
