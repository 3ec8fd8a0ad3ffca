// Raw socket.io islands for the live mixing tests (mix-hostile, mix-rings-live): connect, ask with
// a timeout, and join with a deterministic Δ frame of the run's codec and its DeltaMeta.

import { type Socket, io } from 'socket.io-client';
import { encodeDelta } from '../../core/codec/index.ts';
import { sha256Hex } from '../../core/mix/commit.ts';
import { type Assignment, type DeltaMeta, PROTOCOL_VERSION } from '../../core/protocol.ts';
import { mulberry32 } from '../../core/random.ts';
import type { TestServer } from './server.ts';

export type Wire<T = unknown> = { ok: true; value: T } | { ok: false; error: { code: string; message: string } };

export const code = (w: Wire) => (w.ok ? 'ok' : w.error.code);

/** Asks `event` and waits for the answer (10 s); a timeout names the event. */
export function ask<T>(s: Socket, event: string, payload: unknown): Promise<Wire<T>> {
  return (s.timeout(10_000).emitWithAck(event, payload) as Promise<Wire<T>>).catch((e: Error) => {
    throw new Error(`${event} ${JSON.stringify(payload)?.slice(0, 80)}: ${e.message}`);
  });
}

export interface RawIsland {
  s: Socket;
  id: string;
  a: Assignment;
  meta: DeltaMeta;
  frame: Uint8Array;
  hash: string;
  mixGroup: number;
  resumeToken: string;
}

/** Islands on `ts`, each on its own socket (closeAll closes them). */
export function rawIslands(ts: () => TestServer) {
  const sockets: Socket[] = [];
  async function connect(listen?: (s: Socket) => void): Promise<Socket> {
    const s = io(`${ts().url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
    sockets.push(s);
    listen?.(s);
    await new Promise<void>((resolve, reject) => {
      s.once('connect', () => resolve());
      s.once('connect_error', reject);
    });
    return s;
  }
  /** A joined island with its first assignment, a Δ frame drawn from its name, its meta and commitment. */
  async function island(name: string, listen?: (s: Socket) => void): Promise<RawIsland> {
    const s = await connect(listen);
    const h = await ask<{ assignment: Assignment | null; mixGroup: number; resumeToken: string }>(s, 'hello', {
      protocolVersion: PROTOCOL_VERSION,
      caps: { engine: 'cpu', name },
    });
    if (!h.ok || !h.value.assignment) throw new Error(`hello: ${JSON.stringify(h)}`);
    const a = h.value.assignment;
    const r = mulberry32([...name].reduce((x, ch) => x * 31 + ch.charCodeAt(0), 7) >>> 0);
    const frame = encodeDelta(
      Float32Array.from({ length: ts().server.run.paramCount }, () => (r() - 0.5) * 1e-3),
      a.codec,
    );
    const meta: DeltaMeta = {
      islandId: a.islandId,
      roundId: a.roundId,
      baseVersion: a.baseVersion,
      seq: 1,
      steps: a.innerSteps,
      tokens: a.innerSteps * a.batchSize * a.seqLen,
      lossFirst: 5,
      lossLast: 4,
      lossMean: 4.5,
      elapsedMs: 60_000,
    };
    return {
      s,
      id: a.islandId,
      a,
      meta,
      frame,
      hash: sha256Hex(frame),
      mixGroup: h.value.mixGroup,
      resumeToken: h.value.resumeToken,
    };
  }
  return {
    connect,
    island,
    closeAll: () => {
      for (const s of sockets) s.close();
    },
  };
}
