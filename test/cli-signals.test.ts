// Child processes and temp folders go away with their parent (issue 23, item 10): `atoll chaos` and
// `atoll fleet` are started for real, killed with SIGTERM / SIGINT once their `atoll serve` child
// answers, and within a few seconds the serve child must be gone and the temp folder removed.

import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT, tempDir } from './helpers/server.ts';

const started: ChildProcess[] = [];
const dirs: string[] = [];
/** Children seen; killed here too, so a failing run leaves no orphan behind. */
const grandchildren: number[] = [];
afterAll(() => {
  for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const pid of grandchildren) if (alive(pid)) process.kill(pid, 'SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A process that exists and is not a zombie. */
function alive(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1][0] !== 'Z';
  } catch {
    return false;
  }
}
/** The pids whose parent is `ppid`, with their command lines (from /proc). */
function childrenOf(ppid: number): Array<{ pid: number; argv: string[] }> {
  const out: Array<{ pid: number; argv: string[] }> = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) !== ppid) continue;
      out.push({ pid: Number(e), argv: readFileSync(`/proc/${e}/cmdline`, 'utf8').split('\0') });
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}
async function until<T>(what: string, ms: number, f: () => Promise<T | null> | T | null): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== null) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Starts `atoll <args>` with its own TMPDIR, waits for its serve child to answer, sends `sig`, and checks what is left. */
async function killWhileServing(args: string[], prefix: string, sig: NodeJS.Signals): Promise<void> {
  const tmp = tempDir(`signals-${args[0]}-`);
  dirs.push(tmp);
  let log = '';
  const parent = spawn(process.execPath, [join(ROOT, 'bin/atoll.js'), ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TMPDIR: tmp },
  });
  started.push(parent);
  parent.stdout.on('data', (b: Buffer) => {
    log += b.toString();
  });
  parent.stderr.on('data', (b: Buffer) => {
    log += b.toString();
  });
  const t0 = Date.now();
  const exited = new Promise<void>((r) => parent.once('exit', () => r()));
  const serve = await until(`${args[0]}'s serve child to answer`, 30_000, async () => {
    if (parent.exitCode !== null) throw new Error(`atoll ${args[0]} exited early:\n${log}`);
    const s = childrenOf(parent.pid!).find((c) => c.argv.includes('serve') && c.argv.includes('--port'));
    if (!s) return null;
    const port = s.argv[s.argv.indexOf('--port') + 1];
    const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    return ok ? s : null;
  });
  const tServe = Date.now();
  const everyChild = childrenOf(parent.pid!).map((c) => c.pid);
  grandchildren.push(...everyChild);
  const folders = readdirSync(tmp)
    .filter((f) => f.startsWith(prefix))
    .map((f) => join(tmp, f));
  expect(folders).toHaveLength(1);

  const tKill = Date.now();
  parent.kill(sig);
  await until(`atoll ${args[0]} to exit`, 5_000, () =>
    parent.exitCode !== null || parent.signalCode !== null ? true : null,
  );
  await exited;
  const left = () => [
    ...everyChild.filter(alive).map((p) => `pid ${p}${p === serve.pid ? ' (serve)' : ''}`),
    ...folders.filter((f) => existsSync(f)),
  ];
  await until('the children to be gone and the temp folder removed', 3_000, () =>
    left().length === 0 ? true : null,
  ).catch((e: Error) => {
    throw new Error(`${e.message}: left ${left().join(', ')}\n${log}`);
  });
  console.log(
    `atoll ${args[0]}: serve answered after ${tServe - t0} ms; ${sig} took ${everyChild.length} children and ${folders.length} folder down in ${Date.now() - tKill} ms`,
  );
}

describe.concurrent('killing atoll chaos or fleet takes its children and temp folders with it', () => {
  it('atoll chaos, SIGTERM', async () => {
    await killWhileServing(
      ['chaos', '--islands', '1', '--fail', '0', '--tokens', '1000000000', '--no-baseline', '--latency', '0'],
      'atoll-chaos-',
      'SIGTERM',
    );
  }, 40_000);

  it('atoll fleet, SIGINT', async () => {
    const out = tempDir('signals-fleet-out-');
    dirs.push(out);
    await killWhileServing(
      ['fleet', '--islands', '1', '--tokens', '1000000000', '--out', out],
      'atoll-fleet-',
      'SIGINT',
    );
  }, 40_000);
});
