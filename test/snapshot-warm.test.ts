// A version's snapshot never holds the event loop for the page faults of its arrays (docs/studies/fleet.md:
// at GPT-2 small, fresh θ, momentum, buffer and residual arrays held it 7.7 s and the islands' sockets
// timed out). SnapshotArrays.warm makes them beforehand a chunk at a time, a timer firing between
// chunks; the snapshot then takes them and its bytes are the same as one into fresh arrays. In a
// served run at `base` (10.8M parameters), the longest stall across a delta → durable version → ack
// is under half of what making the checkpoint's arrays fresh costs on this host (and under 250 ms).

import { io } from 'socket.io-client';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeDelta } from '../core/codec/index.ts';
import { Coordinator } from '../core/coord/index.ts';
import { type Assignment, PROTOCOL_VERSION } from '../core/protocol.ts';
import { gaussian, mulberry32 } from '../core/random.ts';
import { SnapshotArrays, WARM_CHUNK } from '../server/run/checkpoint.ts';
import { type TestServer, startTestServer } from './helpers/server.ts';

/** Gaps between the turns of a 2 ms interval while `during` runs: the longest, and how many turns. */
async function loopGaps<T>(during: () => Promise<T>): Promise<{ value: T; longest: number; turns: number }> {
  let last = performance.now();
  let longest = 0;
  let turns = 0;
  const probe = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
    turns++;
  }, 2);
  try {
    const value = await during();
    longest = Math.max(longest, performance.now() - last);
    return { value, longest, turns };
  } finally {
    clearInterval(probe);
  }
}

/** What making `floats` floats of fresh arrays (pages touched) costs here, in ms. */
function freshMs(floats: number): number {
  const t0 = performance.now();
  const a = new Float32Array(floats);
  a.fill(1);
  return performance.now() - t0;
}

const servers: TestServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.close();
});

describe('snapshot arrays made before the snapshot', () => {
  it('warm() yields to timers between chunks; a snapshot into its arrays has the same bytes', async () => {
    const n = 3 * WARM_CHUNK + 5;
    const arrays = new SnapshotArrays();
    const { longest, turns } = await loopGaps(async () => {
      const w = arrays.warm(n, 4);
      expect(w).not.toBeNull();
      await w;
    });
    expect(turns).toBeGreaterThanOrEqual(5); // (θ + 4 lent) × 4 chunks, the loop free between them
    expect(longest).toBeLessThan(1000);
    expect(arrays.warm(n, 4)).toBeNull(); // all there

    const r = gaussian(mulberry32(7));
    const params = new Float32Array(4096 * 3 + 11).map(() => 0.02 * r());
    const coord = new Coordinator({ params, config: { seqLen: 8 }, now: 0 });
    const small = new SnapshotArrays();
    await small.warm(params.length, 3);
    const a = coord.snapshot(small.alloc);
    const b = coord.snapshot();
    expect(Object.keys(a.tensors)).toEqual(Object.keys(b.tensors));
    const bytes = (t: Float32Array | Uint8Array) => Buffer.from(t.buffer, t.byteOffset, t.byteLength);
    for (const [k, t] of Object.entries(b.tensors)) expect(bytes(a.tensors[k])).toEqual(bytes(t));
    expect(a.tensors.theta).not.toBe(coord.params()); // a copy
    expect(small.warm(params.length, 3)).not.toBeNull(); // θ went for good: the next snapshot's is made again
    small.releaseAll();
  });

  it('at base, no stall from a delta to its ack is near a fresh checkpoint’s page faults', async () => {
    const ts = await startTestServer({ flags: { preset: 'base', mode: 'async', codec: 'sparse' } });
    servers.push(ts);
    const s = io(`${ts.url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
    try {
      const hello = await new Promise<{ value: { islandId: string; assignment: Assignment } }>((done) =>
        s.on('connect', () => s.emit('hello', { protocolVersion: PROTOCOL_VERSION, caps: { engine: 'cpu' } }, done)),
      );
      const asg = hello.value.assignment;
      const n = asg.paramCount;
      const delta = new Float32Array(n).map((_, i) => 1e-4 * Math.sin(i));
      const meta = {
        islandId: hello.value.islandId,
        ...{ roundId: asg.roundId, baseVersion: asg.baseVersion, seq: 1, steps: asg.innerSteps },
        ...{ tokens: asg.innerSteps * asg.batchSize * asg.seqLen, lossFirst: 3, lossLast: 2.5, lossMean: 2.7 },
        elapsedMs: 1,
      };
      const frame = encodeDelta(delta, asg.codec);
      await ts.server.run.drain(); // the hello's batch (and the arrays it warms) is behind us
      const { value: ack, longest } = await loopGaps(
        () => new Promise<{ ok: boolean; value: { status: string } }>((done) => s.emit('delta', { meta, frame }, done)),
      );
      expect(ack.value.status).toBe('applied');
      // θ, the optimizer's momentum and buffer, the downlink residual: what the snapshot copies
      const fresh = freshMs(4 * n);
      expect(longest, `longest stall ${longest.toFixed(0)} ms, fresh arrays ${fresh.toFixed(0)} ms`).toBeLessThan(
        Math.max(250, fresh / 2),
      );
    } finally {
      s.disconnect();
    }
  }, 60_000);
});
