// `atoll bench server`'s load test, small: simulated islands on loopback against a real embedded
// server (the outer step in workers, as serve) send deltas; every acknowledged one is in the event
// log exactly once.

import { describe, expect, it } from 'vitest';
import { benchCheckpoint } from '../instruments/bench/checkpoint.ts';
import { benchLoad } from '../instruments/bench/server.ts';

describe('bench server: load', () => {
  it('holds the islands, acks deltas, and the log has each acked one once (lost = duplicated = 0)', async () => {
    const r = await benchLoad({ islands: 24, procs: 1, seconds: 3, log: () => {} });
    expect(r.gateways).toBe(0);
    expect(r.connected).toBe(24);
    expect(r.acked).toBeGreaterThan(0);
    expect([r.lost, r.duplicated]).toEqual([0, 0]);
    expect(r.versions).toBeGreaterThan(0);
    expect(r.ackP50Ms).toBeGreaterThan(0);
    expect(r.ackP99Ms).toBeGreaterThanOrEqual(r.ackP50Ms);
  });
});

describe('bench server: checkpoint', () => {
  it('times the snapshot and encoding as Run takes them, and the old way as the peer', () => {
    const c = benchCheckpoint({ preset: 'tiny', updates: 3, repeats: 2 });
    expect(c.updates).toBe(3);
    expect(c.stallMs).toBeGreaterThan(0);
    expect(c.stallMs).toBeGreaterThanOrEqual(c.snapshotMs);
    expect(c.stallFreshMs).toBeGreaterThan(0);
    expect(c.speedup).toBeGreaterThan(0);
  });
});
