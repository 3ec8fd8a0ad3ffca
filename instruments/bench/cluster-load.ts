// `atoll bench server --gateways N`: the load test's target on the Redis roles. A redis-server on a
// free port, one `atoll serve --role aggregator` (the load run in `dir`) and N `--role gateway`
// processes; the simulated islands are spread over the gateways. Stopping reads the durable version
// from a gateway, then stops the gateways and the aggregator (SIGTERM: it flushes the run folder,
// whose event log the load test checks), then Redis.

import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freeTcpPort, startRedis } from '../../server/cluster/redis-proc.ts';
import { type LoadTarget, loadRunFile } from './load-run.ts';

const BIN = fileURLToPath(new URL('../../bin/atoll.js', import.meta.url));

interface Child {
  child: ChildProcess;
  out: string[];
  exited: Promise<number | null>;
}

function serve(args: string[]): Child {
  const child = spawn(process.execPath, [BIN, 'serve', ...args], {
    env: { ...process.env, ATOLL_ADMIN_TOKEN: 'bench', ATOLL_LOG_LEVEL: 'error' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out: string[] = [];
  child.stdout?.on('data', (b: Buffer) => out.push(b.toString()));
  child.stderr?.on('data', (b: Buffer) => out.push(b.toString()));
  return { child, out, exited: new Promise((r) => child.once('exit', (c) => r(c))) };
}

async function until(what: string, c: Child, f: () => boolean | Promise<boolean>, ms = 120_000): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    if (c.child.exitCode !== null)
      throw new Error(`E_BENCH: ${what}: the process exited with ${c.child.exitCode}: ${c.out.join('').slice(-2000)}`);
    try {
      if (await f()) return;
    } catch {
      /* not up yet */
    }
    if (Date.now() > end) throw new Error(`E_BENCH: timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function clusterTarget(dir: string, gateways: number, log: (s: string) => void): Promise<LoadTarget> {
  const redis = await startRedis();
  const file = join(dir, 'load.json');
  writeFileSync(file, JSON.stringify(loadRunFile()));
  const common = ['--redis', redis.url, '--name', 'bench'];
  const procs: Child[] = [];
  const stopAll = async () => {
    for (const p of procs.reverse()) {
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGTERM');
      await p.exited;
    }
    await redis.stop();
  };
  try {
    const agg = serve([...common, '--role', 'aggregator', '--config', file, '--run-dir', dir, '--no-eval']);
    procs.push(agg);
    await until('the aggregator', agg, () => agg.out.join('').includes('aggregator active'));
    const urls: string[] = [];
    for (let i = 0; i < gateways; i++) {
      const port = await freeTcpPort();
      const g = serve([...common, '--role', 'gateway', '--port', String(port), '--host', '127.0.0.1']);
      procs.splice(1, 0, g); // gateways stop before the aggregator
      const url = `http://127.0.0.1:${port}`;
      await until(`gateway ${i}`, g, async () => (await fetch(`${url}/healthz`)).ok);
      urls.push(url);
    }
    log(`load: redis ${redis.url}, an aggregator and ${gateways} gateways`);
    return {
      urls,
      async stop() {
        const st = (await (await fetch(`${urls[0]}/api/status`)).json()) as { version: number; islandsOnline: number };
        await stopAll();
        return { connected: st.islandsOnline, versions: st.version };
      },
    };
  } catch (e) {
    await stopAll();
    throw e;
  }
}
