// The island's Transport (client/island/transport.ts) over socket.io, for the Node island and the
// browser's worker alike: no node: imports, only socket.io-client and fetch.
//
// It hides the network's moods from the runtime: socket.io-client reconnects with jittered
// exponential backoff; on every reconnection this transport says hello again with the island's id
// and resume token before anything else goes out, then re-sends whatever was in flight (every
// request is idempotent on the server: a re-sent delta gets the original delta's ack). An answer of
// E_TRANSPORT (a gateway whose aggregator is failing over) or E_RATE_LIMIT is asked again. A request
// fails with E_TRANSPORT only after the server has been unreachable, or answered only E_TRANSPORT,
// for `maxOutageMs`.

import { io, type Socket } from 'socket.io-client';
import { decodeCheckpoint } from '../../core/checkpoint.ts';
import {
  type AckMsg,
  type Assignment,
  type DeltaMeta,
  ErrorCode,
  type HelloAnswer,
  type HelloMsg,
  type ModelSnapshotMsg,
  type UpdateMsg,
} from '../../core/protocol.ts';
import { backoff } from '../../core/random.ts';
import { type Result, err, ok } from '../../core/result.ts';
import type { HelloResult, Transport } from './transport.ts';
import {
  DISCONNECTED,
  type Emitted,
  type SocketIoTransportOptions,
  TIMEOUT,
  emitWithAck,
  sleep,
  toUpdate,
} from './socketio-wire.ts';
import { solvePow } from '../../core/pow.ts';
import { downloadModel } from './model-download.ts';

export { bytes, type SocketIoTransportOptions } from './socketio-wire.ts';

/** What the server's hello ack carries besides the assignment (core/protocol.ts, HelloAnswer). */
export type HelloIdentity = Omit<HelloAnswer, 'assignment'>;

export class SocketIoTransport implements Transport {
  private readonly opts: Required<Omit<SocketIoTransportOptions, 'onConnection' | 'fetch' | 'resume' | 'modelStore'>> &
    Pick<SocketIoTransportOptions, 'onConnection' | 'resume' | 'modelStore'>;
  private socket: Socket;
  private readonly urls: string[];
  private at = 0;
  private switchedAt = 0;
  private readonly fetchFn: typeof fetch;
  private identity: HelloIdentity | null = null;
  private helloMsg: HelloMsg | null = null;
  /** Connected and (after the first hello) identified: requests may go out. */
  private ready = false;
  private readyWaiters: Array<() => void> = [];
  private inflight = new Set<(v: typeof DISCONNECTED) => void>();
  private readonly listeners = new Set<(m: UpdateMsg) => void>();
  private downSince: number | null = Date.now();
  /** Since when the gateway has answered only E_TRANSPORT (its aggregator away); null: it answers. */
  private behindSince: number | null = null;
  private fatal: { code: string; message: string } | null = null;
  private closed = false;
  /** Extra server events handled on every socket (serve()). */
  private readonly served: Array<[string, (...args: unknown[]) => void]> = [];
  /** Traffic and connection counters (progress lines, tests); modelReused: θ bytes from the model store. */
  readonly stats = { bytesSent: 0, bytesReceived: 0, connects: 0, reconnects: 0, resumes: 0, modelReused: 0 };

  constructor(opts: SocketIoTransportOptions) {
    this.opts = {
      url: opts.url,
      failoverMs: opts.failoverMs ?? 3_000,
      reconnectDelayMs: opts.reconnectDelayMs ?? 500,
      reconnectDelayMaxMs: opts.reconnectDelayMaxMs ?? 5_000,
      jitter: opts.jitter ?? 0.5,
      maxOutageMs: opts.maxOutageMs ?? 120_000,
      requestTimeoutMs: opts.requestTimeoutMs ?? 60_000,
      onConnection: opts.onConnection,
      resume: opts.resume,
      modelStore: opts.modelStore,
    };
    this.fetchFn = opts.fetch ?? ((...a: Parameters<typeof fetch>) => fetch(...a));
    this.urls = opts.url
      .split(',')
      .map((u) => u.trim().replace(/\/+$/, ''))
      .filter(Boolean);
    this.socket = this.openSocket();
  }

  /** The gateway in use. */
  get url(): string {
    return this.urls[this.at];
  }

  private openSocket(): Socket {
    const socket = io(`${this.url}/island`, {
      path: '/socket.io',
      transports: ['websocket'],
      reconnection: true,
      reconnectionAttempts: Infinity,
      reconnectionDelay: this.opts.reconnectDelayMs,
      reconnectionDelayMax: this.opts.reconnectDelayMaxMs,
      randomizationFactor: this.opts.jitter,
      timeout: 20_000,
    });
    socket.on('connect', () => void this.onConnect());
    socket.on('disconnect', (reason) => this.onDisconnect(String(reason)));
    socket.on('connect_error', (e) => {
      this.opts.onConnection?.('disconnected', `cannot reach ${this.url}: ${e.message}`);
      this.maybeFailover();
    });
    socket.on('update', (m: unknown) => {
      const u = toUpdate(m);
      if (!u) return;
      this.stats.bytesReceived += u.frame.length;
      for (const l of this.listeners) l(u);
    });
    socket.on('banned', (e: { code?: string; message?: string }) => {
      this.fatal = { code: ErrorCode.BANNED, message: e?.message ?? 'banned' };
    });
    socket.on('protocol_error', (e: { code?: string; message?: string }) => {
      if (e?.code === 'E_REPLACED')
        this.fatal = { code: 'E_REPLACED', message: e.message ?? 'a newer connection took over this island' };
    });
    for (const [event, handler] of this.served) socket.on(event, handler);
    return socket;
  }

  /** Down for failoverMs with another gateway to try: move to it (the next 'connect' resumes the identity). */
  private maybeFailover(): void {
    const now = Date.now();
    if (this.urls.length < 2 || this.closed || this.downSince === null) return;
    if (now - this.downSince < this.opts.failoverMs || now - this.switchedAt < this.opts.failoverMs) return;
    this.switchedAt = now;
    const old = this.socket;
    old.removeAllListeners();
    old.close();
    this.at = (this.at + 1) % this.urls.length;
    this.opts.onConnection?.('disconnected', `failing over to ${this.url}`);
    this.socket = this.openSocket();
  }

  /** The identity the server gave (null before the first hello). */
  get island(): HelloIdentity | null {
    return this.identity;
  }
  get connected(): boolean {
    return this.ready;
  }

  // ── Transport ────────────────────────────────

  async hello(msg: HelloMsg): Promise<Result<HelloResult>> {
    this.helloMsg = msg;
    // a new identity pays a proof of work (docs/protocol.md); a saved one resumes for free, and pays
    // only when the server does not take its token (E_POW)
    let payWork = false;
    for (let powTries = 0; ; ) {
      const up = await this.waitConnected();
      if (!up.ok) return up;
      const payload = this.helloPayload();
      if (payWork || payload.resumeToken === undefined) {
        const pow = await this.proofOfWork();
        if (pow === DISCONNECTED || pow === TIMEOUT) continue;
        if (!pow.ok) return pow;
        payload.pow = pow.value;
      }
      const r = await this.emit<HelloAnswer>('hello', payload, this.opts.requestTimeoutMs);
      if (r === DISCONNECTED || r === TIMEOUT) continue;
      // E_POW: the token was not taken (pay, and start as a new island), or the challenge expired meanwhile
      if (!r.ok && r.error.code === 'E_POW' && powTries++ < 3) {
        payWork = true;
        continue;
      }
      if (!r.ok && (await this.askAgain(r.error.code))) continue;
      if (!r.ok) return err(r.error.code, r.error.message);
      this.setIdentity(r.value);
      this.markReady();
      return ok({ islandId: r.value.islandId, assignment: r.value.assignment });
    }
  }

  /** A new display name: sent at once when connected, and in every later hello (a resume carries it). */
  async rename(name: string): Promise<Result<void>> {
    if (this.helloMsg) this.helloMsg = { ...this.helloMsg, caps: { ...this.helloMsg.caps, name } };
    if (!this.ready) return ok(undefined);
    const r = await this.emit<unknown>('rename', { name }, this.opts.requestTimeoutMs);
    if (r === DISCONNECTED || r === TIMEOUT) return ok(undefined); // the resuming hello carries it
    return r.ok ? ok(undefined) : err(r.error.code, r.error.message);
  }

  async fetchModel(): Promise<Result<ModelSnapshotMsg>> {
    for (let attempt = 0; ; attempt++) {
      const up = await this.waitReady();
      if (!up.ok) return up;
      try {
        const d = await downloadModel(this.url, this.fetchFn, this.opts.modelStore ?? null);
        this.stats.bytesReceived += d.fetched;
        this.stats.modelReused += d.reused;
        const ck = decodeCheckpoint(d.bytes);
        if (!ck.ok) return ck;
        const version = Number(ck.value.meta.version);
        const hash = ck.value.meta.hash;
        if (!Number.isInteger(version) || typeof hash !== 'string')
          return err(ErrorCode.BAD_REQUEST, 'the model download has no version/hash');
        return ok({ version, hash, params: ck.value.params, fetchedBytes: d.fetched });
      } catch (e) {
        if (this.closed) return err(ErrorCode.TRANSPORT, 'transport closed');
        if (this.outageTooLong()) return err(ErrorCode.TRANSPORT, `model download failed: ${(e as Error).message}`);
        await sleep(backoff(attempt, this.opts.reconnectDelayMs, this.opts.reconnectDelayMaxMs, this.opts.jitter));
      }
    }
  }

  async submitDelta(meta: DeltaMeta, frame: Uint8Array): Promise<Result<AckMsg>> {
    const limit = this.identity?.maxFrameBytes;
    if (limit !== undefined && frame.length > limit) {
      // Never send what the server must refuse: say why here instead of a cut connection there.
      return ok({
        islandId: meta.islandId,
        seq: meta.seq,
        roundId: meta.roundId,
        status: 'rejected',
        version: meta.baseVersion,
        error: { code: 'E_OVERSIZE', message: `frame of ${frame.length} bytes exceeds the server's limit of ${limit}` },
      });
    }
    for (;;) {
      const up = await this.waitReady();
      if (!up.ok) return up;
      const r = await this.emit<AckMsg>('delta', { meta, frame }, 0);
      if (r === DISCONNECTED || r === TIMEOUT) continue; // re-sent on the next connection: same seq, same ack
      this.stats.bytesSent += frame.length;
      if (r.ok) return ok(r.value);
      if (await this.askAgain(r.error.code)) continue;
      if (r.error.code === 'E_NO_HELLO') {
        await this.resumeIdentity();
        continue;
      }
      // refused before the coordinator saw it (malformed, oversize): a rejection, not a network failure
      return ok({
        islandId: meta.islandId,
        seq: meta.seq,
        roundId: meta.roundId,
        status: 'rejected',
        version: meta.baseVersion,
        error: r.error,
      });
    }
  }

  async nextAssignment(): Promise<Result<Assignment>> {
    for (;;) {
      const up = await this.waitReady();
      if (!up.ok) return up;
      const r = await this.emit<Assignment>('nextAssignment', {}, 0);
      if (r === DISCONNECTED || r === TIMEOUT) continue;
      if (r.ok) return ok(r.value);
      if (r.error.code === 'E_NO_HELLO') {
        await this.resumeIdentity();
        continue;
      }
      if (await this.askAgain(r.error.code)) continue;
      return err(r.error.code, r.error.message);
    }
  }

  async fetchUpdates(fromVersion: number): Promise<Result<UpdateMsg[]>> {
    for (;;) {
      const up = await this.waitReady();
      if (!up.ok) return up;
      const r = await this.emit<unknown[]>('updates', { fromVersion }, this.opts.requestTimeoutMs);
      if (r === DISCONNECTED || r === TIMEOUT) continue;
      if (!r.ok) {
        if (await this.askAgain(r.error.code)) continue;
        return err(r.error.code, r.error.message);
      }
      const out: UpdateMsg[] = [];
      for (const m of r.value) {
        const u = toUpdate(m);
        if (!u) return err(ErrorCode.BAD_REQUEST, 'malformed update message from the server');
        this.stats.bytesReceived += u.frame.length;
        out.push(u);
      }
      return ok(out);
    }
  }

  onUpdate(listener: (msg: UpdateMsg) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async close(reason: string): Promise<void> {
    if (this.closed) return;
    if (this.ready && this.socket.connected) {
      await this.emit('bye', { reason: reason.slice(0, 256) }, 2000);
    }
    this.closed = true;
    this.ready = false;
    this.socket.disconnect();
    this.wakeAll();
  }

  /**
   * A request beside the Transport's (butterfly mixing's `mix:*`): sent once identified, answered by
   * its ack; a dropped connection or no answer within `timeoutMs` is E_TRANSPORT (not re-sent).
   */
  async request<T>(event: string, payload: unknown, timeoutMs = this.opts.requestTimeoutMs): Promise<Result<T>> {
    const up = await this.waitReady();
    if (!up.ok) return up;
    const r = await this.emit<T>(event, payload, timeoutMs);
    if (r === DISCONNECTED) return err(ErrorCode.TRANSPORT, `${event}: the connection dropped`);
    if (r === TIMEOUT) return err(ErrorCode.TRANSPORT, `${event}: no answer in ${timeoutMs} ms`);
    return r.ok ? ok(r.value) : err(r.error.code, r.error.message);
  }

  /** Handles a server event on this and every later connection (`mix:piece`, `mix:check`, …). */
  serve(event: string, handler: (...args: unknown[]) => void): void {
    this.served.push([event, handler]);
    this.socket.on(event, handler);
  }

  /** Drops the connection without a bye (tests: a network cut; socket.io reconnects by itself). */
  simulateDrop(): void {
    this.socket.io.engine?.close();
  }

  /** One emit with an ack; DISCONNECTED if the connection drops first, TIMEOUT after `timeoutMs` (0: none). */
  private async emit<T>(event: string, payload: unknown, timeoutMs: number): Promise<Emitted<T>> {
    const r = await emitWithAck<T>(this.socket, this.inflight, event, payload, timeoutMs);
    if (r !== DISCONNECTED && r !== TIMEOUT && (r.ok || r.error.code !== ErrorCode.TRANSPORT)) this.behindSince = null;
    return r;
  }

  /**
   * A server answer that means "not now": E_RATE_LIMIT (wait 1 s), or E_TRANSPORT, the gateway's
   * own backend lost mid-call (an aggregator failing over): wait 200 ms. True: ask again; false once
   * such answers have come for maxOutageMs in a row, or for any other code.
   */
  private async askAgain(code: string): Promise<boolean> {
    if (code === 'E_RATE_LIMIT') {
      await sleep(1000);
      return true;
    }
    if (code !== ErrorCode.TRANSPORT || this.closed) return false;
    this.behindSince ??= Date.now();
    if (Date.now() - this.behindSince > this.opts.maxOutageMs) return false;
    await sleep(200);
    return true;
  }

  // ── internals ────────────────────────────────

  /** A new identity's proof of work: the server's challenge, solved (core/pow.ts). */
  private async proofOfWork(): Promise<Emitted<{ challenge: string; nonce: string }>> {
    const c = await this.emit<{ challenge: string; bits: number }>('challenge', {}, this.opts.requestTimeoutMs);
    if (c === DISCONNECTED || c === TIMEOUT || !c.ok) return c;
    const self = this; // the search stops when the transport is closed
    const nonce = await solvePow(c.value.challenge, c.value.bits, {
      get aborted() {
        return self.closed;
      },
    });
    return nonce === null ? err('E_POW', 'no nonce found') : ok({ challenge: c.value.challenge, nonce });
  }

  private helloPayload(): HelloMsg {
    const base = this.helloMsg!;
    if (!this.identity) {
      const r = this.opts.resume;
      return r && (base.resumeIslandId === undefined || base.resumeIslandId === r.islandId)
        ? { ...base, resumeIslandId: r.islandId, resumeToken: r.resumeToken }
        : base;
    }
    return { ...base, resumeIslandId: this.identity.islandId, resumeToken: this.identity.resumeToken };
  }

  private setIdentity(v: HelloIdentity): void {
    this.identity = {
      islandId: v.islandId,
      resumeToken: v.resumeToken,
      version: v.version,
      hash: v.hash,
      maxFrameBytes: v.maxFrameBytes,
      maxHttpBufferSize: v.maxHttpBufferSize,
      protocolVersion: v.protocolVersion,
      serverTime: v.serverTime,
      resumed: v.resumed,
      mixGroup: typeof v.mixGroup === 'number' ? v.mixGroup : 0,
    };
  }

  private async onConnect(): Promise<void> {
    this.stats.connects++;
    if (this.stats.connects > 1) this.stats.reconnects++;
    this.downSince = null;
    if (!this.identity) {
      // first connection: hello() is (or will be) sending; requests wait for it
      this.opts.onConnection?.('connected', this.url);
      this.wakeAll();
      return;
    }
    await this.resumeIdentity();
  }

  /** Says hello again as the same island (after a reconnection) before anything else goes out. */
  private async resumeIdentity(): Promise<void> {
    if (!this.identity) return;
    this.ready = false;
    for (let attempt = 0; this.socket.connected && !this.closed; attempt++) {
      const r = await this.emit<HelloAnswer>('hello', this.helloPayload(), this.opts.requestTimeoutMs);
      if (r === DISCONNECTED) return; // the next 'connect' tries again
      if (r === TIMEOUT) continue;
      if (!r.ok) {
        if (r.error.code === 'E_RATE_LIMIT') {
          await sleep(backoff(attempt, 1000, 15_000, this.opts.jitter));
          continue;
        }
        if (await this.askAgain(r.error.code)) continue;
        this.fatal = r.error;
        this.opts.onConnection?.('failed', `${r.error.code}: ${r.error.message}`);
        this.wakeAll();
        return;
      }
      if (r.value.islandId !== this.identity!.islandId) {
        this.fatal = {
          code: 'E_IDENTITY',
          message: `the server did not resume island ${this.identity!.islandId} (gave ${r.value.islandId})`,
        };
        this.opts.onConnection?.('failed', this.fatal.message);
        this.wakeAll();
        return;
      }
      // The hello's assignment is dropped: the runtime asks for its next one when it needs it.
      this.setIdentity(r.value);
      this.stats.resumes++;
      this.opts.onConnection?.('resumed', `as ${r.value.islandId} at version ${r.value.version}`);
      this.markReady();
      return;
    }
  }

  private onDisconnect(reason: string): void {
    this.ready = false;
    // The server hung up on purpose (ban, a newer connection took over, protocol violations):
    // socket.io will not reconnect, and neither should we.
    if (reason === 'io server disconnect' && !this.closed) {
      this.fatal ??= { code: 'E_DISCONNECTED', message: 'the server closed this connection' };
      this.wakeAll();
    }
    this.downSince ??= Date.now();
    for (const f of this.inflight) f(DISCONNECTED);
    this.inflight.clear();
    if (!this.closed) this.opts.onConnection?.('disconnected', reason);
  }

  private markReady(): void {
    this.ready = true;
    this.wakeAll();
  }

  private wakeAll(): void {
    const w = this.readyWaiters;
    this.readyWaiters = [];
    for (const f of w) f();
  }

  private outageTooLong(): boolean {
    return this.downSince !== null && Date.now() - this.downSince > this.opts.maxOutageMs;
  }

  /** Waits until the socket is connected (for hello). */
  private waitConnected(): Promise<Result<void>> {
    return this.waitUntil(() => this.socket.connected);
  }

  /** Waits until connected and identified. */
  private waitReady(): Promise<Result<void>> {
    return this.waitUntil(() => this.ready);
  }

  private async waitUntil(cond: () => boolean): Promise<Result<void>> {
    for (;;) {
      if (this.closed) return err(ErrorCode.TRANSPORT, 'transport closed');
      if (this.fatal) return err(this.fatal.code, this.fatal.message);
      if (cond()) return ok(undefined);
      if (this.outageTooLong())
        return err(ErrorCode.TRANSPORT, `server unreachable for ${Math.round(this.opts.maxOutageMs / 1000)} s`);
      // wake on a state change, or re-check every second (outage deadline)
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 1000);
        this.readyWaiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }
}
