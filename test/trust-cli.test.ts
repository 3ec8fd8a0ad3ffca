// Every input checked before work starts, and nothing lost silently (issue 23, items 7, 8, 10, 11):
// each CLI flag outside its documented range stops the command before any work or file, naming the
// flag in one line; a run folder with a log but no readable checkpoint refuses to start and says
// how to recover; idle connections are closed.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CommanderError } from 'commander';
import { buildProgram } from '../instruments/cli.ts';
import { moveRunFolderAside } from '../server/run/folder.ts';
import { readConfigFile } from '../server/run/config.ts';
import { ROOT, type TestServer, startTestServer, tempDir } from './helpers/server.ts';

const cleanup: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const f of cleanup.reverse()) await f();
});

/** Parses `args` in-process; resolves with the error message (or null when the command ran). */
async function refusal(args: string[]): Promise<string | null> {
  const program = buildProgram().exitOverride();
  let out = '';
  const quiet = {
    writeErr: (s: string) => {
      out += s;
    },
    writeOut: () => {},
  };
  program.configureOutput(quiet);
  for (const c of program.commands) {
    c.exitOverride();
    c.configureOutput(quiet);
    for (const cc of c.commands) {
      cc.exitOverride();
      cc.configureOutput(quiet);
    }
  }
  try {
    await program.parseAsync(['node', 'atoll', ...args]);
    return null;
  } catch (e) {
    return e instanceof CommanderError ? out.trim() : `${(e as { code?: string }).code}: ${(e as Error).message}`;
  }
}

describe('CLI flags are checked against their ranges before any work', () => {
  it.each([
    [['train', '--batch', '0'], '--batch'],
    [['train', '--lr', '-1'], '--lr'],
    [['train', '--lr', 'NaN'], '--lr'],
    [['train', '--eval-batches', '0'], '--eval-batches'],
    [['train', '--steps', 'Infinity'], '--steps'],
    [['chaos', '--islands', '0'], '--islands'],
    [['chaos', '--tokens', '0'], '--tokens'],
    [['chaos', '--fail', '5'], '--fail'],
    [['island', '--server', 'not-a-url'], '--server'],
    [['island', '--server', 'http://localhost:8080', '--duty', '0'], '--duty'],
    [['island', '--server', 'http://localhost:8080', '--duty', '5'], '--duty'],
    [['sample', '--checkpoint', 'x', '--tokens', '1e10'], '--tokens'],
    [['simulate', '--islands', '1000000'], '--islands'],
    [['serve', '--port', '70000'], '--port'],
    [['serve', '--audit-rate', '2'], '--audit-rate'],
  ])('%j is refused, naming %s, in one line', async (args, flag) => {
    const msg = await refusal(args as string[]);
    expect(msg).not.toBeNull();
    expect(msg).toContain(flag);
    expect(msg!.split('\n')).toHaveLength(1);
  });

  it('train --out <a folder> and export --out /proc/x stop before any work, and leave no file', async () => {
    const dir = tempDir();
    cleanup.push(() => {
      spawnSync('rm', ['-rf', dir]);
    });
    const t0 = performance.now();
    expect(await refusal(['train', '--preset', 'tiny', '--steps', '1', '--out', dir])).toMatch(
      /^E_BAD_FLAGS: --out .* is a folder/,
    );
    expect(readdirSync(dir)).toEqual([]); // no .tmp-PID, no checkpoint
    const ck = join(dir, 'ck.safetensors');
    writeFileSync(ck, 'not read');
    expect(await refusal(['export', '--checkpoint', ck, '--out', '/proc/x'])).toMatch(
      /^E_BAD_FLAGS: --out \/proc\/x: cannot write in \/proc/,
    );
    expect(
      await refusal([
        'export',
        '--checkpoint',
        ck,
        '--format',
        'atoll',
        '--out',
        join(dir, 'missing', 'x.safetensors'),
      ]),
    ).toMatch(/^E_BAD_FLAGS: --out .* does not exist/);
    expect(performance.now() - t0).toBeLessThan(5000);
  });

  it('the real command prints one line naming the flag and exits non-zero', () => {
    const r = spawnSync(process.execPath, ['bin/atoll.js', 'train', '--batch', '0'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(r.status).not.toBe(0);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toContain('--batch');
  });
});

describe('run files', () => {
  it('serve --config refuses unknown keys and wrong types, naming them, before anything is written', async () => {
    const dir = tempDir();
    cleanup.push(() => {
      spawnSync('rm', ['-rf', dir]);
    });
    const write = (name: string, v: unknown) => {
      const p = join(dir, name);
      writeFileSync(p, JSON.stringify(v));
      return p;
    };
    const bad = (v: unknown) => {
      try {
        readConfigFile(write('x.json', v));
        return null;
      } catch (e) {
        return `${(e as { code?: string }).code}: ${(e as Error).message}`;
      }
    };
    expect(bad({ allowOrigins: '*' })).toMatch(/^E_BAD_CONFIG: .*allowOrigins must be a list/);
    expect(bad({ allowOrigin: ['https://x'] })).toMatch(/unknown key allowOrigin/);
    expect(bad({ coordinator: { outer: { lr: '0.5' } } })).toMatch(/coordinator\.outer\.lr must be a number/);
    expect(bad({ limits: { powBits: null } })).toMatch(/limits\.powBits must be a number/);
    expect(
      bad({
        coordinator: { totalTokens: 40_000, uplink: { encoding: 'sparse', topkFraction: 0.5, strided: true } },
        limits: { restPerMinute: 10 },
      }),
    ).toBeNull();
    // through the command: one line, nothing written
    const runDir = join(dir, 'run');
    expect(
      await refusal(['serve', '--config', write('y.json', { allowOrigins: '*' }), '--run-dir', runDir, '--port', '0']),
    ).toMatch(/^E_BAD_CONFIG/);
    expect(existsSync(runDir)).toBe(false);
  });
});

describe('a run with validators audits what it accepts', () => {
  it('serve --validator-token with no codec takes int8 deltas; with --codec sparse it is refused before anything is written', async () => {
    const dir = tempDir();
    cleanup.push(() => {
      spawnSync('rm', ['-rf', dir]);
    });
    const refused = join(dir, 'sparse');
    expect(
      await refusal([
        'serve',
        '--validator-token',
        'v',
        '--codec',
        'sparse',
        '--run-dir',
        refused,
        '--port',
        '0',
        '--preset',
        'tiny',
      ]),
    ).toMatch(/^E_BAD_CONFIG: --validator-token: sparse deltas cannot be audited/);
    expect(existsSync(refused)).toBe(false);
    const child = spawn(
      process.execPath,
      [
        join(ROOT, 'bin/atoll.js'),
        'serve',
        '--validator-token',
        'v',
        '--run-dir',
        join(dir, 'dense'),
        '--port',
        '0',
        '--preset',
        'tiny',
        '--no-eval',
        '--outer-workers',
        '0',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    await new Promise<void>((up, fail) => {
      child.stdout!.on('data', (b: Buffer) => {
        out += b;
        if (out.includes('listening on')) up();
      });
      child.once('exit', (c) => fail(new Error(`serve exited ${c}: ${out}`)));
    });
    const closed = new Promise((done) => child.once('exit', done));
    child.kill('SIGTERM');
    await closed;
    expect(out).toMatch(/the uplink is int8/);
    expect(JSON.parse(readFileSync(join(dir, 'dense', 'config.json'), 'utf8')).coordinator.uplink.encoding).toBe(
      'int8',
    );
  });
});

describe('nothing lost silently', () => {
  it('a run folder with a log but no readable checkpoint refuses to start, names the files and the way out', async () => {
    const dir = join(tempDir(), 'run');
    cleanup.push(() => {
      spawnSync('rm', ['-rf', join(dir, '..')]);
    });
    const first = await startTestServer({ dir });
    await first.server.run.checkpointNow();
    await first.close();
    const ckDir = join(dir, 'checkpoints');
    for (const f of readdirSync(ckDir)) writeFileSync(join(ckDir, f), 'torn');
    const e = await startTestServer({ dir }).then(
      () => null,
      (x: Error & { code?: string }) => x,
    );
    expect(e?.code).toBe('E_RUN_UNREADABLE');
    expect(e!.message).toContain(join(dir, 'events.jsonl'));
    expect(e!.message).toContain(readdirSync(ckDir)[0]);
    expect(e!.message).toContain('--start-over');
    for (const f of readdirSync(ckDir)) expect(existsSync(join(ckDir, f))).toBe(true); // nothing removed
    // the explicit way out: the folder moves aside, a new run starts at version 0
    const aside = moveRunFolderAside(dir)!;
    expect(existsSync(join(aside, 'events.jsonl'))).toBe(true);
    mkdirSync(dir);
    const fresh = await startTestServer({ dir });
    cleanup.push(() => fresh.close());
    expect(fresh.server.run.version).toBe(0);
  }, 30_000);
});

describe('idle connections', () => {
  let ts: TestServer;
  it('a TCP connection that sends nothing is closed', async () => {
    ts = await startTestServer({ idleTimeoutMs: 300 });
    cleanup.push(() => ts.close());
    const port = Number(new URL(ts.url).port);
    const closedAfter = await new Promise<number>((resolve) => {
      const t0 = performance.now();
      const s = connect(port, '127.0.0.1');
      s.on('close', () => resolve(performance.now() - t0));
      s.on('error', () => {});
    });
    expect(closedAfter).toBeLessThan(3000);
  }, 10_000);
});
