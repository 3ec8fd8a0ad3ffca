// Connecting the island worker to the server: the shared socket.io Transport, with
// its connection changes turned into the page's connection states and log lines.
// The transport itself reconnects with jittered exponential backoff and resumes the
// same island identity; in-flight requests are re-sent idempotently.

import type { Transport } from '../island/index.ts';
import type { MixMemberStats } from '../island/mix-member.ts';
import type { RelayPeerNet } from '../island/mix-relay.ts';
import { mixingTransport } from '../island/mix-socketio.ts';
import { SocketIoTransport } from '../island/transport-socketio.ts';
import type { ChunkStore } from '../island/model-download.ts';
import type { Connection, DebugDelays, LogLevel } from './messages.ts';

export interface ConnectedTransport {
  transport: Transport;
  /** Connected and identified to the server. */
  connected(): boolean;
  /** Sends a new display name now (and in later hellos). */
  rename(name: string): Promise<void>;
}

export interface ConnectHooks {
  onConnection: (c: Connection) => void;
  log: (level: LogLevel, text: string) => void;
}

/** Butterfly mixing: the page's data channels (null: no WebRTC, direct uploads), the model's size, counts to fill. */
export interface MixHooks {
  peers: RelayPeerNet | null;
  paramCount: number;
  stats: MixMemberStats;
}

export function connectTransport(
  url: string,
  hooks: ConnectHooks,
  mix?: MixHooks,
  modelStore?: ChunkStore,
): ConnectedTransport {
  let down = false;
  const t = new SocketIoTransport({
    url,
    modelStore,
    // a volunteer's tab may sit through a long server restart: keep trying for 10 minutes
    maxOutageMs: 10 * 60_000,
    reconnectDelayMs: 500,
    reconnectDelayMaxMs: 15_000,
    onConnection: (state, detail) => {
      switch (state) {
        case 'connected':
          down = false;
          hooks.onConnection('connected');
          hooks.log('info', `Connected to ${url}.`);
          break;
        case 'resumed':
          down = false;
          hooks.onConnection('connected');
          hooks.log('info', `Reconnected ${detail}; unfinished work is re-sent, nothing is counted twice.`);
          break;
        case 'disconnected':
          hooks.onConnection('reconnecting');
          if (!down)
            hooks.log('warn', `Connection lost (${detail}); reconnecting with backoff. Training goes on meanwhile.`);
          down = true;
          break;
        case 'failed':
          hooks.onConnection('offline');
          hooks.log('error', `The server refused to resume this island: ${detail}`);
          break;
      }
    },
  });
  const peers = mix?.peers;
  return {
    // a group member when the server mixes (its hello answer says so); direct uploads otherwise
    transport: peers && mix ? mixingTransport(t, async (signal) => peers.use(signal), mix.paramCount, mix.stats) : t,
    connected: () => t.connected,
    rename: async (name) => {
      const r = await t.rename(name);
      hooks.log(
        r.ok ? 'info' : 'warn',
        r.ok
          ? `The leaderboard shows you as “${name}” from its next update.`
          : `The server did not take the new name (${r.error.code}): ${r.error.message}`,
      );
    },
  };
}

/** Test hook: a transport whose downloads, uploads and round waits each take `delays()` longer. */
export function delayedTransport(t: Transport, delays: () => DebugDelays): Transport {
  const after = async <R>(ms: number, f: () => Promise<R>): Promise<R> => {
    if (ms > 0) await new Promise((r) => setTimeout(r, ms));
    return f();
  };
  return {
    hello: (m) => t.hello(m),
    fetchModel: () => after(delays().syncMs, () => t.fetchModel()),
    fetchUpdates: (v) => after(delays().syncMs, () => t.fetchUpdates(v)),
    submitDelta: (m, f) => after(delays().uploadMs, () => t.submitDelta(m, f)),
    nextAssignment: () => after(delays().waitMs, () => t.nextAssignment()),
    onUpdate: (l) => t.onUpdate(l),
    close: (r) => t.close(r),
  };
}
