// A redis-server child on a free loopback port: what `atoll chaos` and the cluster tests run
// against. Ephemeral (`--save '' --appendonly no`) unless `aof` asks for durability, in which case
// every write is fsynced to an append-only file in `dir` and a restart on the same `dir` recovers it.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

export interface RedisProc {
  url: string;
  port: number;
  dir: string;
  child: ChildProcess;
  /** SIGTERM and wait; removes `dir` when this harness made it and `keepDir` is not set. */
  stop(o?: { keepDir?: boolean }): Promise<void>;
  /** SIGKILL and wait (the dir is kept: a restart with `aof` recovers from it). */
  kill9(): Promise<void>;
}

export async function freeTcpPort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => res(port));
    });
  });
}

export async function startRedis(
  o: { aof?: boolean; dir?: string; port?: number; bin?: string } = {},
): Promise<RedisProc> {
  const ownDir = !o.dir;
  const dir = o.dir ?? mkdtempSync(join(tmpdir(), 'atoll-redis-'));
  const port = o.port ?? (await freeTcpPort());
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--daemonize',
    'no',
    '--loglevel',
    'warning',
    ...(o.aof ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no']),
  ];
  const child = spawn(o.bin ?? 'redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const log: string[] = [];
  child.stdout?.on('data', (b: Buffer) => log.push(b.toString()));
  child.stderr?.on('data', (b: Buffer) => log.push(b.toString()));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const spawnError = new Promise<never>((_, rej) =>
    child.once('error', (e) => rej(new Error(`E_REDIS_START: cannot run redis-server: ${e.message}`))),
  );
  const url = `redis://127.0.0.1:${port}`;
  const ready = (async () => {
    const deadline = Date.now() + 15_000;
    for (;;) {
      if (child.exitCode !== null)
        throw new Error(`E_REDIS_START: redis-server exited with ${child.exitCode}: ${log.join('').trim()}`);
      const c = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      c.on('error', () => {});
      try {
        await c.connect();
        if ((await c.ping()) === 'PONG') return;
      } catch {
        /* not listening yet */
      } finally {
        c.disconnect();
      }
      if (Date.now() > deadline) throw new Error(`E_REDIS_START: redis-server did not answer on ${url}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  await Promise.race([ready, spawnError]);
  const alive = () => child.exitCode === null && child.signalCode === null;
  return {
    url,
    port,
    dir,
    child,
    async stop(s = {}) {
      if (alive()) {
        child.kill('SIGTERM');
        await exited;
      }
      if (ownDir && !s.keepDir) rmSync(dir, { recursive: true, force: true });
    },
    async kill9() {
      if (alive()) {
        child.kill('SIGKILL');
        await exited;
      }
    },
  };
}
