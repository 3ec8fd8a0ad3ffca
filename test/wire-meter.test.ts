import { describe, expect, it } from 'vitest';
import { Metrics } from '../server/metrics.ts';
import { WireMeter } from '../server/gateway/wire-meter.ts';
import { byLabel } from '../instruments/fleet/traffic.ts';

describe('wire bytes by message (server/gateway/wire-meter.ts)', () => {
  it('labels events, their binary attachments and their acks; unknown names are other', async () => {
    const metrics = new Metrics();
    const m = new WireMeter(metrics);
    const frame = new Uint8Array(1000);
    // an island's delta with its frame attached and an ack id; the server's ack of it
    m.count({ type: 'message', data: '51-/island,7["delta",{"meta":{},"frame":{"_placeholder":true,"num":0}}]' }, 'up');
    m.count({ type: 'message', data: frame }, 'up');
    m.count({ type: 'message', data: '3/island,7[{"ok":true}]' }, 'down');
    // a pushed update (binary), a ping, a made-up event
    m.count({ type: 'message', data: '51-/island,["update",{"frame":{"_placeholder":true,"num":0}}]' }, 'down');
    m.count({ type: 'message', data: new Uint8Array(500) }, 'down');
    m.count({ type: 'ping' }, 'down');
    m.count({ type: 'message', data: '2/island,9["ticker",1]' }, 'up');
    m.count({ type: 'message', data: '2/island,["nope",{}]' }, 'up');
    const text = await metrics.registry.metrics();
    const up = byLabel(text, 'atoll_wire_bytes_in_total'),
      down = byLabel(text, 'atoll_wire_bytes_out_total');
    expect(Object.keys(up).sort()).toEqual(['delta', 'other']);
    expect(up.delta).toBeGreaterThan(1000); // the frame counts with its event
    expect(Object.keys(down).sort()).toEqual(['ack:delta', 'engine.io', 'update']);
    expect(down.update).toBeGreaterThan(500);
  });
});
