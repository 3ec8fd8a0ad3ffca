// The fleet's child processes and polls: a Node process with the tail of its output kept, and waiting on a
// condition with a deadline.

import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';

export const ROOT = resolve(import.meta.dirname, '../..');

/** A --data for servers started from ROOT: a path that exists made absolute, a bundled name as it is. */
export const dataArg = (data: string | undefined) => (data && existsSync(data) ? resolve(data) : data);
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export type Proc = { child: ChildProcess; out: string; exited: Promise<void> };

export function spawnProc(args: string[], env: NodeJS.ProcessEnv = process.env): Proc {
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env });
  const p: Proc = { child, out: '', exited: new Promise<void>((r) => child.once('exit', () => r())) };
  const keep = (b: Buffer) => {
    p.out = (p.out + b.toString()).slice(-64_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  return p;
}

export const alive = (p: Proc) => p.child.exitCode === null && p.child.signalCode === null;

export async function waitUntil(what: string, ms: number, f: () => Promise<boolean> | boolean): Promise<void> {
  const end = Date.now() + ms;
  for (;;) {
    try {
      if (await f()) return;
    } catch {
      /* not yet */
    }
    if (Date.now() > end)
      throw Object.assign(new Error(`${what} within ${Math.round(ms / 1000)} s`), { code: 'E_FLEET_TIMEOUT' });
    await sleep(200);
  }
}

export async function getJson<T>(url: string): Promise<T> {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`GET ${url} answered ${r.status}`);
  return (await r.json()) as T;
}
