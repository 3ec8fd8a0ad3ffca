// Test helpers for the dashboard e2e tests: start `atoll serve` and Node islands as child
// processes on loopback, and stop exactly the processes they started. (The client build is
// ensureClientBuild() in test/helpers/browser.ts.)

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/atoll.js');

export async function freePort(): Promise<number> {
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

export interface Proc {
  child: ChildProcess;
  output: string[];
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when the process has exited. */
  stop(graceMs?: number): Promise<void>;
}

function track(child: ChildProcess, tag: string): Proc {
  const output: string[] = [];
  const push = (b: Buffer) => {
    for (const line of b.toString().split('\n')) if (line) output.push(line);
    if (output.length > 500) output.splice(0, output.length - 500);
    if (process.env.ATOLL_E2E_LOG === '1') process.stderr.write(`[${tag}] ${b}`);
  };
  child.stdout?.on('data', push);
  child.stderr?.on('data', push);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    child,
    output,
    async stop(graceMs = 3000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => { if (child.exitCode === null) child.kill('SIGKILL'); }, graceMs);
      await exited;
      clearTimeout(t);
    },
  };
}

export interface ServerHandle extends Proc {
  port: number;
  url: string;
  runDir: string;
  /** Stops the server and removes its run dir. */
  close(): Promise<void>;
}

/** Starts `atoll serve --preset tiny` on a free loopback port and waits for /api/status. */
export async function startServer(opts: { token?: string; args?: string[]; env?: Record<string, string> } = {}): Promise<ServerHandle> {
  const port = await freePort();
  const runDir = mkdtempSync(join(tmpdir(), 'atoll-dash-run-'));
  const child = spawn(process.execPath, [BIN, 'serve', '--preset', 'tiny', '--port', String(port), '--run-dir', runDir, '--host', '127.0.0.1', ...(opts.args ?? [])], {
    cwd: ROOT,
    env: { ...process.env, ...(opts.token ? { ATOLL_ADMIN_TOKEN: opts.token } : {}), ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const p = track(child, 'serve');
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`atoll serve exited with ${child.exitCode}:\n${p.output.join('\n')}`);
    try {
      const r = await fetch(`${url}/api/status`);
      if (r.ok) break;
    } catch { /* not up yet */ }
    if (Date.now() > deadline) { await p.stop(); throw new Error(`atoll serve did not answer within 30 s:\n${p.output.join('\n')}`); }
    await new Promise((r) => setTimeout(r, 150));
  }
  return {
    ...p, port, url, runDir,
    async close() { await p.stop(); rmSync(runDir, { recursive: true, force: true }); },
  };
}

/** Starts a headless Node island (CPU engine). */
export function startIsland(serverUrl: string, name: string, args: string[] = []): Proc {
  const child = spawn(process.execPath, [BIN, 'island', '--server', serverUrl, '--engine', 'cpu', '--name', name, ...args], {
    cwd: ROOT, env: process.env, stdio: ['ignore', 'pipe', 'pipe'],
  });
  return track(child, `island ${name}`);
}

export async function getJson<T = Record<string, unknown>>(url: string): Promise<T> {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return (await r.json()) as T;
}

/** Polls `fn` until it returns a truthy value, or throws after `timeoutMs`. */
export async function waitFor<T>(what: string, fn: () => Promise<T> | T, timeoutMs = 30_000, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) { last = e; }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
