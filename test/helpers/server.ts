// Helpers for the server tests: a real server (in-process, or `atoll serve` as a child process) on a
// free loopback port with its run folder in a temp dir, and Node islands as child processes that
// report every ack on stdout. Only processes started here are ever signalled, by their pid.
//
// Run as a script (`node --import bin/register.js test/helpers/server.ts island <url> <name>`),
// this file is the island child: it prints one JSON line per runtime event of interest.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'bin/atoll.js');
const REGISTER = join(ROOT, 'bin/register.js');
const SELF = fileURLToPath(import.meta.url);

export { freeTcpPort as freePort } from '../../server/cluster/redis-proc.ts';

export function tempDir(prefix = 'atoll-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export async function sleep(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

/** Polls `fn` until it returns a truthy value; throws after `timeoutMs`. */
export async function waitFor<T>(
  what: string,
  fn: () => Promise<T> | T,
  timeoutMs = 30_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`,
      );
    await sleep(everyMs);
  }
}

export async function getJson<T = Record<string, unknown>>(url: string, init?: RequestInit): Promise<T> {
  const r = await fetch(url, init);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status} ${await r.text()}`);
  return (await r.json()) as T;
}

// ── in-process server ───────────────────────────────────────────────────────────────────────

export interface TestServer {
  server: import('../../server/app.ts').AtollServer;
  url: string;
  dir: string;
  close(): Promise<void>;
}

/** A tiny-model run (JSON run-file shape: `coordinator` may be partial) in a fresh temp folder. */
export async function startTestServer(
  o: {
    file?: import('../../server/run/config.ts').RunConfigFile;
    flags?: import('../../server/run/config.ts').RunFlags;
    dir?: string;
    evaluate?: boolean;
    adminToken?: string;
    gateway?: { messagesPerSecond?: number; violationBudget?: number; heartbeatMs?: number };
    audit?: import('../../server/run/audit.ts').AuditOptions;
    /** Worker threads for the outer step (default 2, as `atoll serve`). */
    outerWorkers?: number;
    idleTimeoutMs?: number;
    /** Butterfly mixing (server/gateway/mix.ts). */
    mix?: import('../../server/gateway/mix-settings.ts').MixOptions;
    /** Serve the pages' build (dist/client; the caller builds it), as `atoll serve` does. */
    pages?: boolean;
  } = {},
): Promise<TestServer> {
  const { createServer } = await import('../../server/app.ts');
  const { buildRunConfig } = await import('../../server/run/config.ts');
  const dir = o.dir ?? tempDir();
  // identities cost no proof of work here unless a test asks for it (test/trust-identity.test.ts does)
  const file = { ...o.file, limits: { ...o.file?.limits, powBits: o.file?.limits?.powBits ?? 0 } } as NonNullable<
    typeof o.file
  >;
  const config = buildRunConfig(file, { preset: 'tiny', name: 'test', ...o.flags });
  const server = await createServer({
    dir,
    config,
    evaluate: o.evaluate ?? false,
    outerWorkers: o.outerWorkers ?? 2,
    adminToken: o.adminToken ?? 'test-admin-token',
    gateway: o.gateway,
    audit: o.audit,
    idleTimeoutMs: o.idleTimeoutMs,
    clientDir: o.pages ? undefined : join(dir, 'no-client'),
    mix: o.mix,
  });
  const { url } = await server.listen(0, '127.0.0.1');
  return {
    server,
    url,
    dir,
    async close() {
      await server.close();
      if (!o.dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}

// ── child processes ─────────────────────────────────────────────────────────────────────────

export interface Proc {
  child: ChildProcess;
  output: string[];
  exited: Promise<number | null>;
  /** SIGTERM, then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
  /** SIGKILL now. */
  kill9(): Promise<void>;
}

export function track(child: ChildProcess, tag: string, onLine?: (line: string) => void): Proc {
  const output: string[] = [];
  let partial = '';
  const push = (b: Buffer) => {
    const text = partial + b.toString();
    const lines = text.split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (!line) continue;
      output.push(line);
      onLine?.(line);
    }
    if (output.length > 2000) output.splice(0, output.length - 2000);
    if (process.env.ATOLL_TEST_LOG === '1') process.stderr.write(`[${tag}] ${b}`);
  };
  child.stdout?.on('data', push);
  child.stderr?.on('data', push);
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const alive = () => child.exitCode === null && child.signalCode === null;
  return {
    child,
    output,
    exited,
    async stop(graceMs = 5000) {
      if (!alive()) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => {
        if (alive()) child.kill('SIGKILL');
      }, graceMs);
      await exited;
      clearTimeout(t);
    },
    async kill9() {
      if (!alive()) return;
      child.kill('SIGKILL');
      await exited;
    },
  };
}

export interface ServeProc extends Proc {
  url: string;
  port: number;
}

/** `node bin/atoll.js serve …` as a child on 127.0.0.1:`port`; resolves once /healthz answers. */
export async function spawnServe(args: string[], port: number, env: Record<string, string> = {}): Promise<ServeProc> {
  const child = spawn(process.execPath, [BIN, 'serve', '--port', String(port), '--host', '127.0.0.1', ...args], {
    cwd: ROOT,
    env: { ...process.env, ATOLL_ADMIN_TOKEN: 'test-admin-token', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const p = track(child, 'serve');
  const url = `http://127.0.0.1:${port}`;
  await waitFor(
    'atoll serve to answer /healthz',
    async () => {
      if (child.exitCode !== null)
        throw new Error(`atoll serve exited with ${child.exitCode}:\n${p.output.join('\n')}`);
      const r = await fetch(`${url}/healthz`);
      return r.ok;
    },
    60_000,
    100,
  );
  return { ...p, url, port };
}

/** What an island child reports: every ack, its id, sync events. */
export interface IslandReport {
  islandId: string | null;
  acks: Array<{ seq: number; roundId: number; status: string; version: number; code?: string }>;
  versions: number[];
  /** Each θ the island synced to: its version, hash (checked by the island) and how it came. */
  synced: Array<{ version: number; hash: string; via: string }>;
  errors: string[];
  resumes: number;
}

export interface IslandProc extends Proc {
  report: IslandReport;
}

/** A Node island (CPU engine) as a child process that reports its acks. */
export function spawnIsland(url: string, name: string, env: Record<string, string> = {}): IslandProc {
  const child = spawn(process.execPath, ['--import', REGISTER, SELF, 'island', url, name], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const report: IslandReport = { islandId: null, acks: [], versions: [], synced: [], errors: [], resumes: 0 };
  const p = track(child, `island ${name}`, (line) => {
    if (!line.startsWith('{')) return;
    try {
      const m = JSON.parse(line) as { kind: string } & Record<string, unknown>;
      if (m.kind === 'ack') {
        report.islandId = m.islandId as string;
        report.acks.push({
          seq: m.seq as number,
          roundId: m.roundId as number,
          status: m.status as string,
          version: m.version as number,
          code: m.code as string | undefined,
        });
      } else if (m.kind === 'hello') report.islandId = m.islandId as string;
      else if (m.kind === 'synced') {
        report.versions.push(m.version as number);
        report.synced.push({ version: m.version as number, hash: m.hash as string, via: m.via as string });
      } else if (m.kind === 'error') report.errors.push(`${m.code}: ${m.message}`);
      else if (m.kind === 'resumed') report.resumes++;
    } catch {
      /* a progress line */
    }
  });
  return { ...p, report };
}

// ── the island child ────────────────────────────────────────────────────────────────────────

async function islandChild(url: string, name: string): Promise<void> {
  const { startNodeIsland } = await import('../../client/island/node.ts');
  const out = (m: Record<string, unknown>) => process.stdout.write(JSON.stringify(m) + '\n');
  const isl = await startNodeIsland({
    server: url,
    engine: 'cpu',
    name,
    progress: 'none',
    maxOutageMs: 120_000,
    onEvent: (e, t) => {
      if (e.type === 'submitted') {
        out({
          kind: 'ack',
          islandId: e.meta.islandId,
          seq: e.meta.seq,
          roundId: e.meta.roundId,
          status: e.ack.status,
          version: e.ack.version,
          code: e.ack.error?.code,
        });
      } else if (e.type === 'synced') out({ kind: 'synced', version: e.version, hash: e.hash, via: e.via });
      else if (e.type === 'error') out({ kind: 'error', code: e.error.code, message: e.error.message });
      else if (e.type === 'assignment') {
        out({ kind: 'hello', islandId: e.assignment.islandId });
        if (t.stats.resumes > 0) out({ kind: 'resumed', resumes: t.stats.resumes });
      }
    },
  });
  const stop = () => isl.stop();
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  const s = await isl.done;
  out({ kind: 'done', reason: s.reason });
  process.exit(0);
}

if (process.argv[1] === SELF && process.argv[2] === 'island') {
  void islandChild(process.argv[3], process.argv[4] ?? 'test-island');
}
