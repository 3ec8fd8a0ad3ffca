// `atoll serve` for the live fleet: the embedded server, or on Redis one aggregator (the run folder and the
// coordinator) and two gateways. The fleet goes on once every gateway answers /api/status.

import { join } from 'node:path';
import { type Proc, ROOT, alive, spawnProc, waitUntil } from './procs.ts';
import type { FleetSpec } from './types.ts';

/**
 * --redis: the one aggregator's lease. No standby takes over, so a lease lapsed under a starved event loop would end
 * the run (3 s did, at 16 islands on 2 busy cores).
 */
const AGGREGATOR_LEASE_MS = 30_000;

/**
 * Starts the servers of `spec` into `servers` (so that the fleet's cleanup reaches them, on error too) and resolves
 * the gateways' URLs once each answers.
 */
export async function startServers(
  spec: FleetSpec,
  run: { dir: string; config: string },
  env: NodeJS.ProcessEnv,
  freePort: () => Promise<number>,
  servers: Proc[],
): Promise<string[]> {
  const runFlags = [
    '--preset',
    spec.preset,
    '--run-dir',
    run.dir,
    '--config',
    run.config,
    '--seed',
    String(spec.seed),
    '--name',
    'fleet',
    '--no-eval',
    '--log-level',
    'warn',
    ...(spec.data ? ['--data', spec.data] : []),
    ...(spec.mode ? ['--mode', spec.mode] : []),
    ...(spec.codec ? ['--codec', spec.codec] : []),
    ...(spec.mixGroup ? ['--mix-group', String(spec.mixGroup)] : []),
  ];
  const atoll = join(ROOT, 'bin/atoll.js');
  const ports: number[] = [];
  if (spec.redis !== undefined) {
    if (spec.redis === true)
      throw Object.assign(new Error('runLive needs the Redis URL (the fleet command starts redis-server)'), {
        code: 'E_BAD_REQUEST',
      });
    const url = spec.redis;
    servers.push(
      spawnProc(
        [
          atoll,
          'serve',
          '--redis',
          url,
          '--role',
          'aggregator',
          '--lease-ms',
          String(AGGREGATOR_LEASE_MS),
          ...runFlags,
        ],
        env,
      ),
    );
    for (let g = 0; g < 2; g++) {
      ports.push(await freePort());
      servers.push(
        spawnProc(
          [
            atoll,
            'serve',
            '--redis',
            url,
            '--role',
            'gateway',
            '--name',
            'fleet',
            '--port',
            String(ports[g]),
            '--host',
            '127.0.0.1',
            '--log-level',
            'warn',
          ],
          env,
        ),
      );
    }
  } else {
    ports.push(await freePort());
    servers.push(spawnProc([atoll, 'serve', '--port', String(ports[0]), '--host', '127.0.0.1', ...runFlags], env));
  }
  const output = () =>
    servers
      .map((s) => s.out)
      .join('\n')
      .slice(-2000);
  // localhost: a secure context, so the pages are offered WebGPU
  const urls = ports.map((p) => `http://localhost:${p}`);
  for (const u of urls) {
    // a server that exited (a refused --data, say) ends the wait at once; waitUntil reads a throw as "not yet"
    let exited = false;
    await waitUntil(`atoll serve to answer at ${u}`, 120_000, async () => {
      exited = servers.some((s) => !alive(s));
      return exited || (await fetch(`${u}/api/status`)).ok;
    }).catch((e: Error & { code?: string }) => {
      throw Object.assign(new Error(`${e.message}\n${output()}`), { code: e.code });
    });
    if (exited) throw Object.assign(new Error(`atoll serve exited:\n${output()}`), { code: 'E_FLEET_SERVE' });
  }
  return urls;
}
