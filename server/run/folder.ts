// The operator's files in a run folder, besides the run itself (their paths: store.ts runPaths):
//   <dir>/server.lock    {pid, host, port, since}: the run folder is one server's (O_EXCL; a lock
//                        whose process is gone is taken over)
//   <dir>/admin-token    the admin bearer token, created once (mode 0600) unless ATOLL_ADMIN_TOKEN is set

import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';
import { type Result, err, ok } from '../../core/result.ts';
import { type RunStore, runPaths } from './store.ts';

interface LockInfo {
  pid: number;
  host?: string;
  port?: number;
  since: number;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes the run folder for this process. Refuses, writing nothing, while another live process
 * holds it. Returns the release function.
 */
export function lockRunFolder(dir: string, where: { host?: string; port?: number } = {}): Result<() => void> {
  mkdirSync(dir, { recursive: true });
  const path = runPaths(dir).lock;
  const mine: LockInfo = { pid: process.pid, ...where, since: Date.now() };
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, JSON.stringify(mine) + '\n', { flag: 'wx' });
      return ok(() => {
        try {
          unlinkSync(path);
        } catch {
          /* already gone */
        }
      });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST')
        return err('E_RUN_LOCKED', `cannot lock ${path}: ${(e as Error).message}`);
    }
    let held: LockInfo | null = null;
    try {
      held = JSON.parse(readFileSync(path, 'utf8')) as LockInfo;
    } catch {
      /* torn or empty: stale */
    }
    if (held && typeof held.pid === 'number' && alive(held.pid)) {
      const at = held.port ? ` on port ${held.port}` : '';
      return err(
        'E_RUN_LOCKED',
        `the run folder ${dir} is in use by another atoll serve (pid ${held.pid}${at}). ` +
          'Stop that one first, or give this one its own run folder with --run-dir DIR (and its own --port N).',
      );
    }
    try {
      unlinkSync(path);
    } catch {
      /* raced with another taker */
    }
  }
  return err('E_RUN_LOCKED', `cannot take ${path}: another process keeps taking it`);
}

/** The admin token: `fromEnv` when set, else the run folder's, created once with mode 0600. */
export function adminToken(dir: string, fromEnv: string | undefined): { token: string; file: string | null } {
  if (fromEnv) return { token: fromEnv, file: null };
  const file = runPaths(dir).adminToken;
  if (existsSync(file)) {
    const t = readFileSync(file, 'utf8').trim();
    if (t) return { token: t, file };
  }
  const token = randomBytes(24).toString('base64url');
  writeFileSync(file, token + '\n', { mode: 0o600 });
  return { token, file };
}

/**
 * `serve --start-over`: the run folder moves aside to `<dir>.old-<time>` (nothing is deleted) and
 * a new run starts in `dir`. Returns where it went, or null when there was no folder.
 */
export function moveRunFolderAside(dir: string, now = Date.now()): string | null {
  if (!existsSync(dir)) return null;
  const aside = `${dir.replace(/[/\\]+$/, '')}.old-${new Date(now).toISOString().replace(/[:.]/g, '-')}`;
  renameSync(dir, aside);
  return aside;
}

/** E_RUN_UNREADABLE when the folder has a log or checkpoints but none of them could be read. */
export function refuseUnreadableRun(store: RunStore): void {
  const checkpoints = store.listCheckpoints().map((c) => c.path);
  const logged = store.readEvents().length > 0;
  if (!checkpoints.length && !logged) return;
  const files = [...(logged ? [store.logPath] : []), ...checkpoints];
  throw Object.assign(
    new Error(
      `the run folder ${store.dir} holds a run (${files.join(', ')}) but no readable ` +
        `checkpoint${checkpoints.length ? '' : ' (there is none)'}. ` +
        'Nothing was changed. To keep it, restore a checkpoint into its checkpoints/ folder; ' +
        'to start a new run there, ' +
        'run again with --start-over (the folder is moved aside to <dir>.old-<time>, not deleted).',
    ),
    { code: 'E_RUN_UNREADABLE' },
  );
}
