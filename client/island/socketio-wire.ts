// The socket.io transport's wire (transport-socketio.ts): its options, the ack's Result as it arrives,
// one emit with an ack that a dropped connection or a timeout ends, and the update messages' bytes.

import type { Socket } from 'socket.io-client';
import { ErrorCode, type UpdateMsg } from '../../core/protocol.ts';
import type { ChunkStore } from './model-download.ts';

export interface SocketIoTransportOptions {
  /**
   * Server base URL, e.g. http://localhost:8080 (the page's origin in a browser). Several gateways
   * of one run, comma-separated: after `failoverMs` without a connection the transport moves to
   * the next one and resumes the same identity there.
   */
  url: string;
  failoverMs?: number;
  /** Reconnection backoff: first delay, cap, and jitter (± fraction). */
  reconnectDelayMs?: number;
  reconnectDelayMaxMs?: number;
  jitter?: number;
  /** Give a request up (E_TRANSPORT) after the server has been unreachable this long. */
  maxOutageMs?: number;
  /** Requests that should answer quickly (hello, updates) are re-sent after this long. */
  requestTimeoutMs?: number;
  /**
   * An identity from an earlier session (the `island` getter's islandId + resumeToken, saved by the
   * page): the first hello resumes it, so a reloaded tab or a restarted process stays one island.
   */
  resume?: { islandId: string; resumeToken: string };
  /** Called when the connection goes up or down (progress lines, the volunteer page). */
  onConnection?: (state: 'connected' | 'disconnected' | 'resumed' | 'failed', detail: string) => void;
  fetch?: typeof fetch;
  /** Where θ's chunks are kept as they download (a page: across reloads and visits); absent: none. */
  modelStore?: ChunkStore;
}

export type Wire<T> = { ok: true; value: T } | { ok: false; error: { code: string; message: string } };

export const DISCONNECTED = Symbol('disconnected');
export const TIMEOUT = Symbol('timeout');

/** socket.io gives Node a Buffer and browsers an ArrayBuffer: both become a Uint8Array. */
export function bytes(x: unknown): Uint8Array | null {
  if (x instanceof Uint8Array) return x;
  if (x instanceof ArrayBuffer) return new Uint8Array(x);
  if (ArrayBuffer.isView(x)) return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  return null;
}

export function toUpdate(m: unknown): UpdateMsg | null {
  if (!m || typeof m !== 'object') return null;
  const u = m as UpdateMsg;
  const frame = bytes(u.frame);
  if (!frame || typeof u.version !== 'number' || typeof u.prevVersion !== 'number' || typeof u.hash !== 'string')
    return null;
  return { ...u, frame, trainLoss: typeof u.trainLoss === 'number' ? u.trainLoss : NaN };
}

/** What an emit ends with: the server's answer, or why none came. */
export type Emitted<T> = Wire<T> | typeof DISCONNECTED | typeof TIMEOUT;

/** One emit with an ack; DISCONNECTED if the connection drops first, TIMEOUT after `timeoutMs` (0: none). */
export function emitWithAck<T>(
  socket: Socket,
  /** The drop callbacks of the emits in flight (all told DISCONNECTED when the connection drops). */
  inflight: Set<(v: typeof DISCONNECTED) => void>,
  event: string,
  payload: unknown,
  timeoutMs: number,
): Promise<Emitted<T>> {
  return new Promise((resolve) => {
    let done = false;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const finish = (v: Wire<T> | typeof DISCONNECTED | typeof TIMEOUT) => {
      if (done) return;
      done = true;
      if (timer) clearTimeout(timer);
      inflight.delete(onDrop);
      resolve(v);
    };
    const onDrop = (v: typeof DISCONNECTED) => finish(v);
    if (!socket.connected) return finish(DISCONNECTED);
    inflight.add(onDrop);
    if (timeoutMs > 0) timer = setTimeout(() => finish(TIMEOUT), timeoutMs);
    socket.emit(event, payload, (res: unknown) => {
      if (res && typeof res === 'object' && typeof (res as { ok?: unknown }).ok === 'boolean') finish(res as Wire<T>);
      else finish({ ok: false, error: { code: ErrorCode.BAD_REQUEST, message: 'malformed answer from the server' } });
    });
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
