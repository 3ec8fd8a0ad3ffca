// Identities that cost something (issue 23): a new island id needs a proof of work on a challenge
// of this server (single use, unforgeable) and comes out of a per-address budget; resuming an
// identity with its token costs nothing; the Node island's transport (the browser worker's too)
// pays it on its own.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { io, type Socket } from 'socket.io-client';
import { leadingZeroBits, solvePow } from '../core/pow.ts';
import { PROTOCOL_VERSION } from '../core/protocol.ts';
import { SocketIoTransport } from '../client/island/transport-socketio.ts';
import { type TestServer, startTestServer } from './helpers/server.ts';

const BITS = 12;
let ts: TestServer;
const sockets: Socket[] = [];
beforeAll(async () => {
  ts = await startTestServer({
    file: {
      limits: {
        helloPerMinute: 1000,
        restPerMinute: 600,
        maxIslands: 100,
        maxLogBytes: 1 << 20,
        powBits: BITS,
        newIslandsPerHour: 4,
      },
    },
    outerWorkers: 0,
  });
});
afterAll(async () => {
  for (const s of sockets) s.disconnect();
  await ts?.close();
});

async function socket(): Promise<Socket> {
  const s = io(`${ts.url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
  sockets.push(s);
  await new Promise<void>((r) => s.once('connect', () => r()));
  return s;
}
type Answer = {
  ok: boolean;
  value?: { islandId: string; resumeToken: string; resumed: boolean };
  error?: { code: string; message: string };
};
const caps = { engine: 'cpu', name: 'pow' };
const hello = async (s: Socket, extra: object = {}) =>
  (await s.emitWithAck('hello', { protocolVersion: PROTOCOL_VERSION, caps, ...extra })) as Answer;
const challenge = async (s: Socket) =>
  ((await s.emitWithAck('challenge', {})) as { value: { challenge: string; bits: number; expiresAt: number } }).value;

describe('a new identity costs work', () => {
  it('no, forged, spent or too weak proof: E_POW; a solved challenge: an identity; a resume: free; past the budget: E_RATE_LIMIT', async () => {
    expect((await hello(await socket())).error?.code).toBe('E_POW');
    const s1 = await socket();
    const c = await challenge(s1);
    expect(c.bits).toBe(BITS);
    expect(c.expiresAt).toBeGreaterThan(Date.now());
    // a nonce that does not reach the bits
    let weak = 0;
    while (
      leadingZeroBits(
        new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(`${c.challenge}:${weak}`))),
      ) >= BITS
    )
      weak++;
    expect((await hello(s1, { pow: { challenge: c.challenge, nonce: String(weak) } })).error?.code).toBe('E_POW');
    // a forged challenge (its MAC changed) with a valid-looking nonce
    const forged = c.challenge.slice(0, -2) + (c.challenge.endsWith('AA') ? 'BB' : 'AA');
    expect((await hello(s1, { pow: { challenge: forged, nonce: (await solvePow(forged, BITS))! } })).error?.code).toBe(
      'E_POW',
    );
    // the right one
    const nonce = (await solvePow(c.challenge, BITS))!;
    const first = await hello(s1, { pow: { challenge: c.challenge, nonce } });
    expect(first.ok).toBe(true);
    // spent: not twice
    expect((await hello(await socket(), { pow: { challenge: c.challenge, nonce } })).error?.code).toBe('E_POW');
    // a resume with the token costs nothing; with a wrong token and no proof it is E_POW
    const again = await hello(await socket(), {
      resumeIslandId: first.value!.islandId,
      resumeToken: first.value!.resumeToken,
    });
    expect(again.value).toMatchObject({ islandId: first.value!.islandId, resumed: true });
    expect(
      (await hello(await socket(), { resumeIslandId: first.value!.islandId, resumeToken: 'wrong-token' })).error?.code,
    ).toBe('E_POW');
    // the address's budget of 4 new identities an hour (1 spent)
    const codes: string[] = [];
    for (let i = 0; i < 4; i++) {
      const s = await socket();
      const ci = await challenge(s);
      const a = await hello(s, { pow: { challenge: ci.challenge, nonce: (await solvePow(ci.challenge, BITS))! } });
      codes.push(a.ok ? 'ok' : a.error!.code);
    }
    expect(codes).toEqual(['ok', 'ok', 'ok', 'E_RATE_LIMIT']);
    expect(ts.server.run.coord.islands()).toHaveLength(4);
  }, 30_000);

  it('the island transport pays the proof on its own; 16 bits cost a fraction of a second', async () => {
    await ts.close();
    ts = await startTestServer({
      file: {
        limits: { helloPerMinute: 1000, restPerMinute: 600, maxIslands: 100, maxLogBytes: 1 << 20, powBits: BITS },
      },
      outerWorkers: 0,
    });
    const t = new SocketIoTransport({ url: ts.url });
    try {
      const r = await t.hello({ protocolVersion: PROTOCOL_VERSION, caps: { engine: 'cpu', name: 'transport' } });
      expect(r.ok).toBe(true);
    } finally {
      await t.close('test done');
    }
    const t0 = performance.now();
    const n16 = await solvePow('measure-16-bits', 16);
    console.log(`solvePow at 16 bits: nonce ${n16} in ${(performance.now() - t0).toFixed(0)} ms (Node, Web Crypto)`);
    expect(n16).not.toBeNull();
  }, 30_000);
});
