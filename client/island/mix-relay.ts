// Butterfly mixing's data channels for an island in a Web Worker. Chromium has no RTCPeerConnection
// in workers, so the page's main thread owns the connections (`hostPeerNet`: a WebRtcPeerNet over
// the native RTCPeerConnection) and the worker's island talks to it through a MessagePort
// (`RelayPeerNet`, a GroupNet): joins and leaves, stage messages out (built in the worker, their
// buffer transferred), stage messages in (asked for by slot, their buffer transferred back), and the
// SDP signalling both ways (the worker owns the server's socket). The two ends are one page's own
// code, so the messages are checked for shape only. No node: or DOM imports: the port comes in.

import { type PieceChannel, unpackPieces } from '../../core/mix/butterfly.ts';
import {
  type GroupNet,
  type LinkPlan,
  type RtcPeerConstructor,
  type SignalPort,
  WebRtcPeerNet,
  groupOf,
  wireMessage,
} from './mix-webrtc.ts';

type SignalKind = 'offer' | 'answer' | 'candidate';

/** The parts of a MessagePort (the browser's, or node:worker_threads' in tests) used here. */
export interface RelayPort {
  postMessage(message: unknown, transfer: ArrayBuffer[]): void;
  addEventListener(type: 'message', listener: (e: { data: unknown }) => void): void;
  start?(): void;
}

/** Worker → main thread. */
export type ToHost =
  | { t: 'join'; id: number; plan: LinkPlan }
  | { t: 'leave'; groupId: number }
  | { t: 'send'; groupId: number; to: string; msg: Uint8Array }
  | { t: 'recv'; id: number; groupId: number; key: string; from: string; stage: number }
  /** A signal the server relayed to this island, from member `from`. */
  | { t: 'signal'; groupId: number; from: number; kind: SignalKind; data: string };

/** Main thread → worker. */
export type FromHost =
  | { t: 'joined'; id: number; reused: boolean }
  | { t: 'body'; id: number; body: Uint8Array | null }
  /** A signal for the server to relay to member `to`. */
  | { t: 'signal'; groupId: number; to: number; kind: SignalKind; data: string }
  /** A link lost, for the server (`mix:lost`). */
  | { t: 'lost'; peer: string; groupId: number };

/**
 * A view's buffer to transfer: one that holds nothing but the view, give or take `header` bytes
 * before it (a stage message's key and stage). Anything else (a pooled Node Buffer) is copied:
 * never detach what others still read.
 */
function own(b: Uint8Array | null, header = 0): ArrayBuffer[] {
  return b && b.buffer instanceof ArrayBuffer && b.byteOffset <= header && b.buffer.byteLength - b.byteLength <= header
    ? [b.buffer]
    : [];
}

/**
 * The main thread's end: a WebRtcPeerNet over `RTC` serving the worker on `port`. Returns it (the
 * page closes its groups on unload).
 */
export function hostPeerNet(port: RelayPort, RTC: RtcPeerConstructor, timeoutMs = 15_000): WebRtcPeerNet {
  let fromServer: ((g: number, from: number, kind: SignalKind, data: string) => void) | null = null;
  const signal: SignalPort = {
    send: (groupId, to, kind, data) =>
      port.postMessage({ t: 'signal', groupId, to, kind, data } satisfies FromHost, []),
    onSignal: (l) => {
      fromServer = l;
    },
    lost: (peer, groupId) => port.postMessage({ t: 'lost', peer, groupId } satisfies FromHost, []),
  };
  const net = new WebRtcPeerNet(RTC, signal, [], timeoutMs);
  port.addEventListener('message', (e) => {
    const m = e.data as ToHost;
    switch (m?.t) {
      case 'join': {
        // a connection that cannot be made (a browser that refuses WebRTC) ends the group's exchange at once: the
        // island uploads directly
        let reused = false;
        try {
          reused = net.join(m.plan);
        } catch {
          net.leave(m.plan.groupId);
        }
        port.postMessage({ t: 'joined', id: m.id, reused } satisfies FromHost, []);
        break;
      }
      case 'leave':
        net.leave(m.groupId);
        break;
      case 'send':
        void net.sendWire(m.groupId, m.to, m.msg);
        break;
      case 'recv':
        // the body is a view of the message the channel delivered, read by no one else: its buffer goes over
        void net
          .recvBody(m.groupId, m.key, m.from, m.stage)
          .then((body) => port.postMessage({ t: 'body', id: m.id, body } satisfies FromHost, own(body)));
        break;
      case 'signal':
        try {
          fromServer?.(m.groupId, m.from, m.kind, m.data);
        } catch {
          net.leave(m.groupId);
        }
        break;
    }
  });
  port.start?.();
  return net;
}

/**
 * The worker's end: a GroupNet whose connections live on the main thread. One per worker; each
 * island runtime's socket (a reconnect makes a new one) is its signalling port from `use` on.
 */
export class RelayPeerNet implements GroupNet {
  private next = 1;
  private readonly pending = new Map<number, (v: FromHost) => void>();
  private signal: SignalPort | null = null;

  constructor(private readonly port: RelayPort) {
    port.addEventListener('message', (e) => {
      const m = e.data as FromHost;
      if (m?.t === 'signal') this.signal?.send(m.groupId, m.to, m.kind, m.data);
      else if (m?.t === 'lost') this.signal?.lost?.(m.peer, m.groupId);
      else if (m && (m.t === 'joined' || m.t === 'body')) {
        const done = this.pending.get(m.id);
        this.pending.delete(m.id);
        done?.(m);
      }
    });
    port.start?.();
  }

  /** Signals through this socket's port from now on (the server's `mix:signal` both ways). */
  use(signal: SignalPort): this {
    this.signal = signal;
    signal.onSignal((groupId, from, kind, data) => this.post({ t: 'signal', groupId, from, kind, data }));
    return this;
  }

  join(plan: LinkPlan): Promise<boolean> {
    return this.ask<Extract<FromHost, { t: 'joined' }>>((id) => ({ t: 'join', id, plan })).then((m) => m.reused);
  }

  leave(groupId: number): void {
    this.post({ t: 'leave', groupId });
  }

  channel(key: string, _index: number, members: string[]): PieceChannel {
    const groupId = groupOf(key);
    return {
      send: async (to, stage, pieces) => {
        const msg = wireMessage(key, stage, pieces);
        this.post({ t: 'send', groupId, to: members[to], msg }, own(msg));
      },
      recv: async (from, stage) => {
        const m = await this.ask<Extract<FromHost, { t: 'body' }>>((id) => ({
          t: 'recv',
          id,
          groupId,
          key,
          from: members[from],
          stage,
        }));
        return m.body && unpackPieces(m.body);
      },
    };
  }

  private post(m: ToHost, transfer: ArrayBuffer[] = []): void {
    this.port.postMessage(m, transfer);
  }

  /** A request the main thread answers (it always does: its waits end at its timeout or the group's leave). */
  private ask<R extends FromHost>(make: (id: number) => ToHost): Promise<R> {
    const id = this.next++;
    return new Promise<R>((resolve) => {
      this.pending.set(id, resolve as (v: FromHost) => void);
      this.post(make(id));
    });
  }
}
