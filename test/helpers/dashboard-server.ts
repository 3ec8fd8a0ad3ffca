// Test helpers for the dashboard e2e tests: `atoll serve --preset tiny` and CPU Node islands as
// child processes on loopback, built on the server tests' helpers (test/helpers/server.ts).
// (The client build is ensureClientBuild() in test/helpers/browser.ts.)

import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { type Proc, ROOT, type ServeProc, freePort, spawnServe, tempDir, track } from './server.ts';

export { type Proc, ROOT, freePort, getJson, waitFor } from './server.ts';

export interface ServerHandle extends ServeProc {
  runDir: string;
  /** Stops the server and removes its run dir. */
  close(): Promise<void>;
}

/** Starts `atoll serve --preset tiny` on a free loopback port and waits until it answers. */
export async function startServer(
  opts: { token?: string; args?: string[]; env?: Record<string, string> } = {},
): Promise<ServerHandle> {
  const port = await freePort();
  const runDir = tempDir('atoll-dash-run-');
  const p = await spawnServe(['--preset', 'tiny', '--run-dir', runDir, ...(opts.args ?? [])], port, {
    ...(opts.token ? { ATOLL_ADMIN_TOKEN: opts.token } : {}),
    ...opts.env,
  });
  return {
    ...p,
    runDir,
    async close() {
      await p.stop();
      rmSync(runDir, { recursive: true, force: true });
    },
  };
}

/** Starts a headless Node island (CPU engine). */
export function startIsland(serverUrl: string, name: string, args: string[] = []): Proc {
  const child = spawn(
    process.execPath,
    [join(ROOT, 'bin/atoll.js'), 'island', '--server', serverUrl, '--engine', 'cpu', '--name', name, ...args],
    {
      cwd: ROOT,
      env: process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  return track(child, `island ${name}`);
}
