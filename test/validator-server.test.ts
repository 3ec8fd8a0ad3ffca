// Verified work through the real server: audits of every accepted delta go to an in-process
// `atoll island --validator` (socket.io, CPU reference); an honest island passes, an island that
// trains on another data stream fails and is banned after two failures; audit messages from a
// connection that is not a validator are refused with E_NOT_VALIDATOR.

import type { TokenArray } from '../core/data/tokenizer.ts';
import { afterAll, describe, expect, it } from 'vitest';
import { io } from 'socket.io-client';
import { IslandRuntime } from '../client/island/runtime.ts';
import { SocketIoTransport } from '../client/island/transport-socketio.ts';
import { JsEngine } from '../core/engine/js.ts';
import type { Assignment, IslandCaps } from '../core/protocol.ts';
import type { Result } from '../core/result.ts';
import type { IslandView } from '../core/api.ts';
import { PRESETS } from '../core/model/config.ts';
import { loadCorpus } from '../server/run/corpus.ts';
import { startNodeIsland } from '../client/island/node.ts';
import { startNodeValidator } from '../client/island/node-validator.ts';
import { fmtAudits } from '../client/dashboard/format.ts';
import { spawnSync } from 'node:child_process';
import { ROOT } from './helpers/server.ts';
import { getJson, startTestServer, waitFor } from './helpers/server.ts';

const cleanup: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const f of cleanup.reverse()) await f();
});

/** An island that trains on another data stream than it was assigned (plausible, fake work). */
function otherStreamIsland(url: string, train: TokenArray, batch: number): IslandRuntime {
  const transport = new SocketIoTransport({ url });
  const lie = (a: Assignment | null) => a && { ...a, data: { ...a.data, stream: a.data.stream + 1 } };
  const hello = transport.hello.bind(transport),
    next = transport.nextAssignment.bind(transport);
  transport.hello = async (m) => {
    const r = await hello(m);
    return r.ok ? { ok: true, value: { ...r.value, assignment: lie(r.value.assignment) } } : r;
  };
  transport.nextAssignment = async () => {
    const r: Result<Assignment> = await next();
    return r.ok ? { ok: true, value: lie(r.value)! } : r;
  };
  const caps: Partial<IslandCaps> = { name: 'liar', batchSize: batch, maxBatch: batch };
  return new IslandRuntime({ engine: new JsEngine({ config: PRESETS.tiny, maxBatch: batch }), train, transport, caps });
}

describe('verified work on the server', () => {
  it('passes an honest island, bans one that trains on another stream, refuses verdicts from non-validators', async () => {
    const srv = await startTestServer({
      flags: { mode: 'sync', codec: 'int8', innerSteps: 4, quorum: 1 },
      audit: { token: 'validator-secret', rate: 1, banAfter: 2 },
    });
    cleanup.push(() => srv.close());
    const url = srv.url;

    // not a validator: refused with a code
    const raw = io(`${url}/island`, { transports: ['websocket'] });
    cleanup.push(() => {
      raw.disconnect();
    });
    const rawVerdict = await raw.emitWithAck('verdict', { jobId: 1, cosine: 1, normRatio: 1 });
    expect(rawVerdict.error.code).toBe('E_NOT_VALIDATOR');
    expect((await raw.emitWithAck('auditJob', {})).error.code).toBe('E_NOT_VALIDATOR');
    expect((await raw.emitWithAck('validator', { token: 'wrong' })).error.code).toBe('E_NOT_VALIDATOR');
    expect((await raw.emitWithAck('verdict', { jobId: 1, cosine: 1, normRatio: 1 })).error.code).toBe(
      'E_NOT_VALIDATOR',
    );

    const honest = await startNodeIsland({ server: url, engine: 'cpu', name: 'honest' });
    cleanup.push(async () => {
      honest.stop();
      await honest.done;
    });
    const liar = otherStreamIsland(url, loadCorpus().train, 8);
    void liar.start();
    cleanup.push(() => liar.stop()); // a banned island's last ack never comes: its transport gives up on its own

    const verdicts: Array<{ islandId: string; passed: boolean | null; banned: boolean; cosine: number | null }> = [];
    const v = await startNodeValidator({
      server: url,
      token: 'validator-secret',
      idleMs: 100,
      onVerdict: (job, m, passed, banned) =>
        verdicts.push({ islandId: job.islandId, passed, banned, cosine: m.cosine }),
    });
    cleanup.push(async () => {
      v.stop();
      await v.done;
    });

    await waitFor('the liar banned', () => verdicts.some((x) => x.banned), 90_000);
    const liarId = liar.progress.islandId!;
    const honestId = honest.runtime.progress.islandId!;
    await waitFor('an honest verdict', () => verdicts.some((x) => x.islandId === honestId), 60_000);
    expect(verdicts.filter((x) => x.islandId === honestId).every((x) => x.passed === true)).toBe(true);
    const liarVerdicts = verdicts.filter((x) => x.islandId === liarId);
    expect(liarVerdicts.map((x) => x.passed)).toEqual([false, false]);
    expect(liarVerdicts[1].banned).toBe(true);

    const { islands } = await getJson<{ islands: IslandView[] }>(`${url}/api/islands`);
    const l = islands.find((i) => i.id === liarId)!;
    expect(l.status).toBe('banned');
    expect(l.audits).toEqual({ passed: 0, failed: 2 });
    expect(fmtAudits(l.audits)).toBe('⚑ 2 failed audits'); // the dashboard's flag
    expect(islands.find((i) => i.id === honestId)!.audits!.failed).toBe(0);
  }, 150_000);

  it('`atoll island --validator` without a token says how to give one and exits 1', () => {
    const r = spawnSync(process.execPath, ['bin/atoll.js', 'island', '--validator', '--server', 'http://127.0.0.1:9'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, ATOLL_VALIDATOR_TOKEN: '' },
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('--validator-token or $ATOLL_VALIDATOR_TOKEN');
  });
});
