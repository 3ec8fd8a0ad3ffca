// The children `atoll chaos` runs, and what it owns: `atoll serve` processes, Node islands each behind
// a FaultProxy, and the temp folders; all are taken down when a run ends or chaos itself is stopped.
// Run as a script (`node --import bin/register.js instruments/commands/chaos-children.ts island <url> <name>`),
// this file is the island child: one JSON line per step, submission and sync.

import { type ChildProcess, spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { FaultProxy } from '../../server/cluster/proxy.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const SELF = fileURLToPath(import.meta.url);

/**
 * What this process started and must take down with it: children are killed and temp folders
 * removed when a run ends, and also when chaos itself is stopped (SIGINT, SIGTERM, SIGHUP).
 */
export const owned = { children: new Set<ChildProcess>(), dirs: new Set<string>() };
function own(child: ChildProcess): ChildProcess {
  owned.children.add(child);
  child.once('exit', () => owned.children.delete(child));
  return child;
}
function cleanUpOwned(): void {
  for (const c of owned.children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const d of owned.dirs) rmSync(d, { recursive: true, force: true });
}
let signalsHandled = false;
export function takeDownOnSignals(log: (s: string) => void): void {
  if (signalsHandled) return;
  signalsHandled = true;
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      log(
        `atoll chaos: ${sig}: stopping ${owned.children.size} child process(es), ` +
          `removing ${owned.dirs.size} temp folder(s)`,
      );
      cleanUpOwned();
      process.exit(sig === 'SIGINT' ? 130 : 143);
    });
  }
}

export interface IslandChild {
  name: string;
  child: ChildProcess;
  proxy: FaultProxy;
  /** [islandId, seq] of every 'applied' ack. */
  acks: Array<[string, number]>;
  tokensSubmitted: number;
  stepsSinceSubmit: number;
  tokensPerStep: number;
  /** Why its run ended ('done', or an error code), once it has. */
  exitReason?: string;
  exited: Promise<void>;
}

/** An island behind a proxy to `ports[0]`; the other ports are its next gateways (`--server A,B`). */
export function spawnIsland(
  name: string,
  ports: number[],
  latencyMs: number,
  log: (s: string) => void,
): Promise<IslandChild> {
  const proxy = new FaultProxy({ host: '127.0.0.1', port: ports[0] }, { latencyMs });
  return proxy.listen().then((proxyUrl) => {
    const servers = [proxyUrl, ...ports.slice(1).map((p) => `http://127.0.0.1:${p}`)].join(',');
    const child = own(
      spawn(process.execPath, ['--import', join(ROOT, 'bin/register.js'), SELF, 'island', servers, name], {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    );
    let stderr = '';
    child.stderr?.on('data', (b: Buffer) => {
      stderr = (stderr + b.toString()).slice(-2048);
    });
    const isl: IslandChild = {
      name,
      child,
      proxy,
      acks: [],
      tokensSubmitted: 0,
      stepsSinceSubmit: 0,
      tokensPerStep: 0,
      exited: new Promise((r) =>
        child.once('close', (code, signal) => {
          // 'close' comes after its stdout's last line: one that stopped on its own said why, a crash is said here
          if (isl.exitReason === undefined && signal !== 'SIGKILL' && signal !== 'SIGTERM')
            log(`chaos: ${name} exited (${signal ?? code}) without a reason:\n${stderr}`);
          r();
        }),
      ),
    };
    let partial = '';
    child.stdout?.on('data', (b: Buffer) => {
      const lines = (partial + b.toString()).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        if (!line.startsWith('{')) continue;
        const m = JSON.parse(line) as {
          kind: string;
          island?: string;
          seq?: number;
          status?: string;
          tokens?: number;
          steps?: number;
          tokensPerStep?: number;
          code?: string;
          message?: string;
          reason?: string;
        };
        if (m.kind === 'step') isl.stepsSinceSubmit++;
        // known before its first submit: a killed island's steps since then count from its first round
        else if (m.kind === 'assignment') isl.tokensPerStep = m.tokensPerStep!;
        else if (m.kind === 'error') log(`chaos: ${name}: ${m.code}: ${m.message}`);
        else if (m.kind === 'exit') {
          isl.exitReason = m.reason!;
          log(`chaos: ${name} stopped: ${m.reason}`);
        } else if (m.kind === 'submitted') {
          isl.tokensSubmitted += m.tokens!;
          isl.stepsSinceSubmit = 0;
          if (m.status === 'applied') isl.acks.push([m.island!, m.seq!]);
        }
      }
    });
    return isl;
  });
}

/** A serve child: its stdout kept whole (the roles' "aggregator active"), its stderr's last 4 kB (a crash's cause). */
export type Serve = { child: ChildProcess; out: string; err: string; exited: Promise<void> };

export function serveChild(args: string[]): Serve {
  const child = own(
    spawn(process.execPath, [join(ROOT, 'bin/atoll.js'), 'serve', ...args], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ATOLL_ADMIN_TOKEN: 'chaos' },
    }),
  );
  const s: Serve = { child, out: '', err: '', exited: new Promise<void>((r) => child.once('exit', () => r())) };
  child.stdout?.on('data', (b: Buffer) => {
    s.out += b.toString();
  });
  child.stderr?.on('data', (b: Buffer) => {
    s.err = (s.err + b.toString()).slice(-4096);
  });
  return s;
}

export const alive = (s: Serve) => s.child.exitCode === null && s.child.signalCode === null;

// ── the island child ───────────────────────────────

async function islandChild(url: string, name: string): Promise<void> {
  const { startNodeIsland } = await import('../../client/island/node.ts');
  const out = (m: Record<string, unknown>) => process.stdout.write(JSON.stringify(m) + '\n');
  const isl = await startNodeIsland({
    server: url,
    engine: 'cpu',
    name,
    progress: 'none',
    maxOutageMs: 120_000,
    handleSignals: true,
    onEvent: (e) => {
      if (e.type === 'step') out({ kind: 'step' });
      else if (e.type === 'assignment')
        out({ kind: 'assignment', tokensPerStep: e.assignment.batchSize * e.assignment.seqLen });
      else if (e.type === 'error') out({ kind: 'error', code: e.error.code, message: e.error.message });
      else if (e.type === 'submitted')
        out({
          kind: 'submitted',
          island: e.meta.islandId,
          seq: e.meta.seq,
          status: e.ack.status,
          tokens: e.meta.tokens,
          steps: e.meta.steps,
        });
    },
  });
  const summary = await isl.done;
  out({ kind: 'exit', reason: summary.reason });
  process.exit(0);
}

if (process.argv[1] === SELF && process.argv[2] === 'island') void islandChild(process.argv[3], process.argv[4]);
