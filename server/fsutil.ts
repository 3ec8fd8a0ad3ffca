// Durable file writes. Everything the run folder holds goes through here, so a crash at any
// instant leaves either the old file or the new one, never a torn one.

import { type Stats, closeSync, fsyncSync, openSync, renameSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { open, rename } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';

/** Atomic file write: temp file, fsync, rename, fsync of the folder (so the rename itself is durable). */
export function writeFileAtomic(path: string, data: Uint8Array | string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, data);
  const fd = openSync(tmp, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  fsyncDirSync(dirname(path));
}

/** The async twin of writeFileAtomic: keeps big checkpoint writes off the event loop's critical path. */
export async function writeFileAtomicAsync(path: string, data: Uint8Array | string | Uint8Array[]): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  const fh = await open(tmp, 'w');
  try {
    // parts one after the other (each writeFile continues at the handle's position)
    for (const part of Array.isArray(data) ? data : [data]) await fh.writeFile(part);
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, path);
  await fsyncDir(dirname(path));
}

function fsyncDirSync(dir: string): void {
  try {
    const fd = openSync(dir, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    /* some filesystems refuse fsync on folders; the rename is still atomic */
  }
}

async function fsyncDir(dir: string): Promise<void> {
  try {
    const fh = await open(dir, 'r');
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  } catch {
    /* as above */
  }
}

/**
 * Checks, before any work, that `path` can be written as a file (`kind: 'file'`) or a folder
 * (`'folder'`): not an existing thing of the other kind, in an existing folder that takes a new
 * file (a probe file is created and removed: permissions, read-only mounts and /proc all answer).
 * Throws E_BAD_FLAGS naming `flag`.
 */
export function assertWritable(flag: string, path: string, kind: 'file' | 'folder'): void {
  const no = (why: string): never => {
    throw Object.assign(new Error(`${flag} ${path}: ${why}`), { code: 'E_BAD_FLAGS' });
  };
  let st: Stats | null = null;
  try {
    st = statSync(path);
  } catch {
    /* does not exist yet */
  }
  if (st && kind === 'file' && st.isDirectory()) no('is a folder; give a file path');
  if (st && kind === 'folder' && !st.isDirectory()) no('exists and is not a folder');
  const parent = kind === 'folder' && st ? path : dirname(resolve(path));
  let pst: Stats | null = null;
  try {
    pst = statSync(parent);
  } catch {
    /* missing */
  }
  if (!pst?.isDirectory()) no(`its folder ${parent} does not exist`);
  const probe = join(parent, `.atoll-probe-${process.pid}`);
  try {
    writeFileSync(probe, '', { flag: 'wx' });
    unlinkSync(probe);
  } catch (e) {
    no(`cannot write in ${parent} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
}
