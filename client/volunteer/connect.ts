// Connecting the island worker to the server: the shared socket.io Transport, with
// its connection changes turned into the page's connection states and log lines.
// The transport itself reconnects with jittered exponential backoff and resumes the
// same island identity; in-flight requests are re-sent idempotently.

import type { Transport } from '../island/index.ts';
import { SocketIoTransport } from '../island/transport-socketio.ts';
import type { Connection, LogLevel } from './messages.ts';

export interface ConnectedTransport {
  transport: Transport;
  /** Connected and identified to the server. */
  connected(): boolean;
}

export interface ConnectHooks {
  onConnection: (c: Connection) => void;
  log: (level: LogLevel, text: string) => void;
}

export function connectTransport(url: string, hooks: ConnectHooks): ConnectedTransport {
  let down = false;
  const t = new SocketIoTransport({
    url,
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
          if (!down) hooks.log('warn', `Connection lost (${detail}); reconnecting with backoff. Training goes on meanwhile.`);
          down = true;
          break;
        case 'failed':
          hooks.onConnection('offline');
          hooks.log('error', `The server refused to resume this island: ${detail}`);
          break;
      }
    },
  });
  return { transport: t, connected: () => t.connected };
}
