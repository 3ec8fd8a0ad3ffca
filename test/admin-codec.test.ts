// A codec set through the admin API is the codec `serve --codec` gives (issue 38): for every encoding,
// PATCH /api/admin/config {"codec": enc} leaves the run's uplink and downlink equal to those of
// `buildRunConfig(…, { codec: enc })`, sparse's block size, k, striding and 1-bit values included,
// and the next island's assignment carries that uplink.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { io } from 'socket.io-client';
import { ENCODINGS } from '../core/codec/index.ts';
import { PROTOCOL_VERSION } from '../core/protocol.ts';
import { buildRunConfig } from '../server/run/config.ts';
import { type TestServer, startTestServer } from './helpers/server.ts';

const TOKEN = 'codec-token';

describe('PATCH /api/admin/config {codec} = serve --codec', () => {
  let ts: TestServer;
  beforeAll(async () => {
    // starts on a dense codec, so the first PATCH (sparse… in ENCODINGS order) changes it
    ts = await startTestServer({ adminToken: TOKEN, flags: { codec: 'int8' } });
  });
  afterAll(async () => {
    await ts.close();
  });

  const patch = (body: unknown) =>
    ts.server.app.inject({
      method: 'PATCH',
      url: '/api/admin/config',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      payload: JSON.stringify(body),
    });

  // an island's assignment after the change: the codec it will encode its Δ with
  const assignedCodec = async (): Promise<unknown> => {
    const s = io(`${ts.url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
    try {
      const hello = await new Promise<{ ok: boolean; value: { assignment: { codec: unknown } | null } }>((resolve) =>
        s.emit('hello', { protocolVersion: PROTOCOL_VERSION, caps: { engine: 'cpu', name: 'codec-probe' } }, resolve),
      );
      expect(hello.ok).toBe(true);
      return hello.value.assignment?.codec;
    } finally {
      s.disconnect();
    }
  };

  for (const enc of [...ENCODINGS].reverse()) {
    it(enc, async () => {
      const cli = buildRunConfig(null, { preset: 'tiny', name: 'test', codec: enc }).coordinator;
      const r = await patch({ codec: enc });
      expect(r.statusCode).toBe(200);
      const cfg = ts.server.run.coord.config();
      expect(cfg.uplink).toEqual(cli.uplink);
      expect(cfg.downlink).toEqual(cli.downlink);
      if (enc === 'sparse')
        expect(cfg.uplink).toMatchObject({ blockSize: 4096, topkFraction: 0.5, strided: true, valueBits: 1 });
      // persisted as set (a restart keeps it)
      const stored = ts.server.run.store.readConfig<{ coordinator: { uplink: unknown } }>()!;
      expect(stored.coordinator.uplink).toEqual(cli.uplink);
      expect(await assignedCodec()).toMatchObject(cli.uplink);
    });
  }
});
