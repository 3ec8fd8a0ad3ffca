// What crosses an island's socket.io connection, as sent, by message: engine.io packets with their
// WebSocket frame headers (wire-bytes.ts, the rule the simulator counts by), labelled with the
// socket.io event they carry. A binary attachment counts with the event before it; an ack with the
// event it answers (`ack:<event>`); engine.io's own packets (pings) as `engine.io`. Event names come
// from a fixed list, anything else is `other`: a stranger cannot grow the label set.

import { type WireDirection, frameHeaderBytes } from '../../core/wire-bytes.ts';
import { ISLAND_EVENTS } from '../../core/protocol.ts';
import type { Metrics } from '../metrics.ts';
import { MIX_EVENTS } from './mix.ts';

/** An engine.io packet as its socket's 'packet' and 'packetCreate' events give it. */
export interface WirePacket {
  type: string;
  data?: unknown;
}

/**
 * Every event an island and the server send each other (docs/protocol.md): the islands' (as the gateway takes them;
 * `mix:signal` goes both ways), then the server's own.
 */
const EVENTS = new Set<string>([
  ...ISLAND_EVENTS,
  ...MIX_EVENTS,
  'mix:check',
  'mix:replay',
  'mix:abort',
  'mix:piece',
  'update',
  'tick',
  'banned',
  'protocol_error',
]);

/** Acks remembered per connection and direction, at most (an island asks a few at a time). */
const ACKS_KEPT = 64;

/** A socket.io packet's type digit, optional attachment count, namespace, ack id and, for an event, its name. */
const HEAD = /^(\d)(?:\d+-)?(?:\/[^,]*,)?(\d*)(?:\["((?:[^"\\]|\\.){0,40})")?/;

export class WireMeter {
  /** The event of the last text packet each way (binary attachments follow it), and events awaiting an ack by id. */
  private last: Record<WireDirection, string> = { up: 'other', down: 'other' };
  private readonly asked: Record<WireDirection, Map<string, string>> = { up: new Map(), down: new Map() };

  constructor(private readonly metrics: Pick<Metrics, 'wireBytesIn' | 'wireBytesOut'>) {}

  count(p: WirePacket, dir: WireDirection): void {
    const d = p.data;
    const body =
      typeof d === 'string'
        ? 1 + Buffer.byteLength(d)
        : d instanceof ArrayBuffer || ArrayBuffer.isView(d)
          ? d.byteLength
          : 1;
    const bytes = body + frameHeaderBytes(body, dir);
    (dir === 'up' ? this.metrics.wireBytesIn : this.metrics.wireBytesOut).inc({ message: this.label(p, dir) }, bytes);
  }

  private label(p: WirePacket, dir: WireDirection): string {
    if (p.type !== 'message') return 'engine.io';
    if (typeof p.data !== 'string') return this.last[dir]; // a binary attachment
    const m = HEAD.exec(p.data);
    if (!m) return (this.last[dir] = 'other');
    const [, type, id, name] = m;
    let label = 'other';
    if (type === '2' || type === '5') {
      label = name !== undefined && EVENTS.has(name) ? name : 'other';
      if (id) {
        // its answer goes the other way
        const other = this.asked[dir === 'up' ? 'down' : 'up'];
        other.set(id, label);
        if (other.size > ACKS_KEPT) other.delete(other.keys().next().value!);
      }
    } else if (type === '3' || type === '6') {
      const mine = this.asked[dir];
      label = `ack:${mine.get(id) ?? 'other'}`;
      mine.delete(id);
    } else if (type === '0' || type === '1') label = 'connect';
    return (this.last[dir] = label);
  }
}
