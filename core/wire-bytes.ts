// What a socket.io message puts on the island's WebSocket, counted from the message itself: the
// simulator's links (local.ts, instruments/simulate/mix-sim.ts) count these bytes as the live server's
// traffic would be, for every row alike. The packet is socket.io's own encoding (socket.io-parser,
// the one the server and islands run): the text packet `2/island,<id>[event, payload]` (binary
// leaves replaced by placeholders) as one engine.io message ('4' + text), each binary leaf as its
// own binary message; each message in one WebSocket frame (2-10 B header; an island's frames are
// masked, 4 B more). Not counted: TCP/IP headers, engine.io's ping every 10 s (3 B + 7 B back).

import { Encoder, PacketType } from 'socket.io-parser';

const encoder = new Encoder();

/** The island namespace (server/gateway/gateway.ts). */
const NSP = '/island';
/** A representative ack id: socket.io numbers an island's requests from 0, so most have 2-4 digits. */
const ACK_ID = 100;

/** Who sends: 'up' island → server (masked frames), 'down' server → island. */
export type WireDirection = 'up' | 'down';

/** An emit of `event` with `payload`; `ack`: it asks for an answer (carries an ack id). */
export function emitBytes(dir: WireDirection, event: string, payload: unknown, ack = true): number {
  return packetBytes(dir, {
    type: PacketType.EVENT,
    nsp: NSP,
    data: payload === undefined ? [event] : [event, payload],
    ...(ack ? { id: ACK_ID } : {}),
  });
}

/** The answer to a request: the gateway's `{ ok: true, value }` (or `{ ok: false, error }`) as the ack's argument. */
export function ackBytes(dir: WireDirection, answer: unknown): number {
  return packetBytes(dir, { type: PacketType.ACK, nsp: NSP, id: ACK_ID, data: [answer] });
}

/** A successful request's answer, `{ ok: true, value }`. */
export function okBytes(dir: WireDirection, value: unknown): number {
  return ackBytes(dir, { ok: true, value });
}

function packetBytes(
  dir: WireDirection,
  packet: { type: PacketType; nsp: string; data: unknown[]; id?: number },
): number {
  let total = 0;
  for (const part of encoder.encode(packet) as Array<string | ArrayBufferView>) {
    const payload = typeof part === 'string' ? 1 + utf8Length(part) : part.byteLength;
    total += payload + frameHeaderBytes(payload, dir);
  }
  return total;
}

/** RFC 6455: 2 B, +2 for a payload of 126..65535 B, +8 above; +4 for the client's mask. */
export function frameHeaderBytes(payload: number, dir: WireDirection): number {
  return (payload < 126 ? 2 : payload < 65536 ? 4 : 10) + (dir === 'up' ? 4 : 0);
}

function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c < 0xdc00) {
      n += 4;
      i++;
    } // a surrogate pair
    else n += 3;
  }
  return n;
}
