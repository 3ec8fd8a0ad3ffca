// The server as an operator meets it (`atoll serve` as a child process, a CPU island):
//   - the admin token lives in the run folder (mode 0600) and survives a restart;
//   - a second server on the same run folder refuses before writing anything and names --run-dir;
//     one on a taken port names --port;
//   - structured logs: one JSON line per join, outer update, rejection and checkpoint; the level is settable.

import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type Proc, ROOT, type ServeProc, freePort, spawnServe, tempDir, track, waitFor } from './helpers/server.ts';
import { startIsland } from './helpers/dashboard-server.ts';
import { io } from 'socket.io-client';
import { encodeDelta } from '../core/codec/index.ts';
import { type Assignment, PROTOCOL_VERSION } from '../core/protocol.ts';
import { solvePow } from '../core/pow.ts';

const runDir = tempDir('atoll-operator-');
const procs: Proc[] = [];
afterAll(async () => {
  await Promise.all(procs.map((p) => p.stop()));
  rmSync(runDir, { recursive: true, force: true });
});

/** `atoll serve` with no ATOLL_ADMIN_TOKEN: the run folder keeps the token. */
async function serve(port: number, extra: string[] = [], env: Record<string, string> = {}): Promise<ServeProc> {
  const p = await spawnServe(
    ['--preset', 'tiny', '--run-dir', runDir, '--inner-steps', '4', '--no-eval', ...extra],
    port,
    { ATOLL_ADMIN_TOKEN: '', ...env },
  );
  procs.push(p);
  return p;
}

/** A second `atoll serve` that is expected to refuse: its exit code and output. */
async function refused(args: string[]): Promise<{ code: number | null; out: string }> {
  const child = spawn(
    process.execPath,
    [join(ROOT, 'bin/atoll.js'), 'serve', '--host', '127.0.0.1', '--preset', 'tiny', '--no-eval', ...args],
    {
      cwd: ROOT,
      env: { ...process.env, ATOLL_ADMIN_TOKEN: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const p = track(child, 'serve-2');
  procs.push(p);
  const code = await p.exited;
  return { code, out: p.output.join('\n') };
}

const logLines = (p: Proc) =>
  p.output.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
const auth = (token: string) => ({ authorization: `Bearer ${token}` });

describe('operator', () => {
  let port = 0;
  let server: ServeProc;
  let token = '';
  let island: Proc;

  it('keeps the admin token in the run folder (mode 0600); structured log lines for join, update, rejection, checkpoint', async () => {
    port = await freePort();
    // --log-level beats $ATOLL_LOG_LEVEL: the info lines below are logged
    server = await serve(port, ['--log-level', 'info'], { ATOLL_LOG_LEVEL: 'error' });
    const file = join(runDir, 'admin-token');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    token = readFileSync(file, 'utf8').trim();
    expect(token.length).toBeGreaterThan(20);
    expect(server.output.join('\n')).toContain(`admin token in ${file}`);
    expect((await fetch(`${server.url}/api/admin/whoami`, { headers: auth(token) })).status).toBe(200);

    island = startIsland(server.url, 'op-island');
    procs.push(island);
    await waitFor(
      'two outer updates',
      async () => ((await (await fetch(`${server.url}/api/status`)).json()) as { version: number }).version >= 2,
      60_000,
      200,
    );
    // A delta sent while paused is a rejection (E_PAUSED). It comes from a protocol client of the test's
    // own: the island may be between rounds when the pause lands, and then waits for resume sending nothing.
    const raw = io(`${server.url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true });
    const hello = await new Promise<{ ok: boolean; value: { islandId: string; assignment: Assignment } }>((resolve) => {
      // a new identity pays its proof of work (docs/protocol.md), as any client does
      raw.on('connect', async () => {
        const c = (await raw.emitWithAck('challenge', {})) as { value: { challenge: string; bits: number } };
        const nonce = await solvePow(c.value.challenge, c.value.bits);
        raw.emit(
          'hello',
          {
            protocolVersion: PROTOCOL_VERSION,
            caps: { engine: 'cpu', name: 'op-raw' },
            pow: { challenge: c.value.challenge, nonce },
          },
          resolve,
        );
      });
    });
    expect(hello.ok).toBe(true);
    expect((await fetch(`${server.url}/api/admin/pause`, { method: 'POST', headers: auth(token) })).status).toBe(200);
    const a = hello.value.assignment;
    const meta = {
      islandId: hello.value.islandId,
      roundId: a.roundId,
      baseVersion: a.baseVersion,
      seq: 1,
      steps: 1,
      tokens: a.batchSize * a.seqLen,
      lossFirst: 3,
      lossLast: 3,
      lossMean: 3,
      elapsedMs: 1000,
    };
    const frame = encodeDelta(new Float32Array(a.paramCount), a.codec); // the assignment's codec: only the pause is wrong
    const answer = await new Promise<{ ok: boolean; value?: { status: string; error?: { code: string } } }>((resolve) =>
      raw.emit('delta', { meta, frame }, resolve),
    );
    raw.disconnect();
    expect(answer).toMatchObject({ ok: true, value: { status: 'rejected', error: { code: 'E_PAUSED' } } });
    await waitFor('a rejection in the log', () => logLines(server).some((l) => l.event === 'rejected'), 10_000, 100);
    expect((await fetch(`${server.url}/api/admin/checkpoint`, { method: 'POST', headers: auth(token) })).status).toBe(
      200,
    );
    await waitFor('a checkpoint line', () => logLines(server).some((l) => l.event === 'checkpoint'), 10_000, 100);
    const lines = logLines(server);
    const of = (event: string) => lines.filter((l) => l.event === event);
    expect(of('join')[0]).toMatchObject({ level: 30, msg: 'island joined', name: 'op-island', engine: 'cpu' });
    expect(of('update').length).toBeGreaterThanOrEqual(2);
    expect(of('update')[0]).toMatchObject({ msg: 'outer update', version: 1, contributors: 1 });
    expect(of('rejected')[0]).toMatchObject({ level: 40, msg: 'delta rejected', code: 'E_PAUSED' });
    expect(of('checkpoint')[0]).toMatchObject({ msg: 'checkpoint written' });
    expect(typeof of('checkpoint')[0].version).toBe('number');
    for (const l of lines) expect(typeof l.time).toBe('number');
  });

  it('a second server on the same run folder refuses before writing anything, and names --run-dir; a taken port names --port', async () => {
    // A quiet run (no island, paused), so any change to its files would be the second server's.
    await island.stop();
    const size = () => statSync(join(runDir, 'events.jsonl')).size;
    let last = -1;
    await waitFor(
      'the event log to settle',
      async () => {
        const s = size();
        const same = s === last;
        last = s;
        return same;
      },
      20_000,
      1000,
    );
    const events = readFileSync(join(runDir, 'events.jsonl'));
    const config = readFileSync(join(runDir, 'config.json'));
    const other = await freePort();
    const a = await refused(['--port', String(other), '--run-dir', runDir]);
    expect(a.code).not.toBe(0);
    expect(a.out).toContain('E_RUN_LOCKED');
    expect(a.out).toContain('--run-dir');
    expect(readFileSync(join(runDir, 'events.jsonl')).equals(events)).toBe(true);
    expect(readFileSync(join(runDir, 'config.json')).equals(config)).toBe(true);

    const elsewhere = join(tempDir('atoll-operator-2-'), 'run');
    const b = await refused(['--port', String(port), '--run-dir', elsewhere]);
    expect(b.code).not.toBe(0);
    expect(b.out).toContain('E_PORT_IN_USE');
    expect(b.out).toContain('--port');
    expect(existsSync(elsewhere)).toBe(false);
    // the first server is unharmed
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });

  it('the token survives a restart; $ATOLL_LOG_LEVEL=error silences the info lines', async () => {
    await server.stop();
    expect(existsSync(join(runDir, 'server.lock'))).toBe(false);
    server = await serve(port, [], { ATOLL_LOG_LEVEL: 'error' });
    expect(readFileSync(join(runDir, 'admin-token'), 'utf8').trim()).toBe(token);
    expect((await fetch(`${server.url}/api/admin/resume`, { method: 'POST', headers: auth(token) })).status).toBe(200);
    // an island joins and trains: a join and updates, none of them logged at this level
    procs.push(startIsland(server.url, 'op-island-2'));
    const v0 = ((await (await fetch(`${server.url}/api/status`)).json()) as { version: number }).version;
    await waitFor(
      'an update after the restart',
      async () => ((await (await fetch(`${server.url}/api/status`)).json()) as { version: number }).version > v0,
      60_000,
      200,
    );
    expect(logLines(server).filter((l) => (l.level as number) < 50)).toEqual([]);
  });
});
