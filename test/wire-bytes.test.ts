// The simulator's byte counts (core/wire-bytes.ts) against a real socket.io connection:
// what an emit and its ack put on the TCP stream, read off the server's socket.

import { createServer } from 'node:http';
import type { AddressInfo, Socket as TcpSocket } from 'node:net';
import { Server } from 'socket.io';
import { io as connect } from 'socket.io-client';
import { describe, expect, it } from 'vitest';
import { emitBytes, okBytes } from '../core/wire-bytes.ts';
import type { AckMsg, DeltaMeta } from '../core/protocol.ts';

describe('wire bytes', () => {
  it('an emit with a binary frame and its ack take exactly emitBytes and okBytes on the connection', async () => {
    const http = createServer();
    const server = new Server(http, { perMessageDeflate: false, httpCompression: false, serveClient: false });
    let tcp: TcpSocket | null = null;
    http.on('upgrade', (_req, socket: TcpSocket) => {
      tcp = socket;
    });
    const meta: DeltaMeta = {
      islandId: 'island-7',
      roundId: 12,
      baseVersion: 3,
      seq: 5,
      steps: 10,
      tokens: 1280,
      lossFirst: 3.125,
      lossLast: NaN,
      lossMean: 2.9871234,
      elapsedMs: 431.5,
    };
    const ack: AckMsg = { islandId: 'island-7', seq: 5, roundId: 12, status: 'applied', version: 4 };
    const frame = Uint8Array.from({ length: 3000 }, (_, i) => (i * 7) & 255);
    const seen: Array<{ read: number; written: number }> = [];
    server.of('/island').on('connection', (s) => {
      s.on('ping', (_p: unknown, reply: (a: unknown) => void) => reply({ ok: true, value: {} }));
      s.on('delta', (_p: unknown, reply: (a: unknown) => void) => {
        seen.push({ read: tcp!.bytesRead, written: tcp!.bytesWritten });
        reply({ ok: true, value: ack });
        seen.push({ read: tcp!.bytesRead, written: tcp!.bytesWritten });
      });
    });
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const client = connect(`http://127.0.0.1:${(http.address() as AddressInfo).port}/island`, {
      transports: ['websocket'],
      reconnection: false,
    });
    try {
      // ack ids count from 0 per connection: 100 requests first, so the next carries wire-bytes' id 100
      for (let i = 0; i < 100; i++) await client.timeout(5000).emitWithAck('ping', {});
      const before = { read: tcp!.bytesRead, written: tcp!.bytesWritten };
      await client.timeout(5000).emitWithAck('delta', { meta, frame });
      expect(seen[0].read - before.read).toBe(emitBytes('up', 'delta', { meta, frame }));
      expect(seen[1].written - seen[0].written).toBe(okBytes('down', ack));
    } finally {
      client.close();
      await server.close();
    }
  });
});
