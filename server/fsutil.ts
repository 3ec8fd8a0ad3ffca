// Durable file writes. Everything the run folder holds goes through here, so a crash at any
// instant leaves either the old file or the new one, never a torn one.

import { closeSync, fsyncSync, openSync, renameSync, writeFileSync } from 'node:fs';
import { open, rename } from 'node:fs/promises';
import { dirname } from 'node:path';

/** Atomic file write: temp file, fsync, rename, fsync of the folder (so the rename itself is durable). */
export function writeFileAtomic(path: string, data: Uint8Array | string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, data);
  const fd = openSync(tmp, 'r');
  try { fsyncSync(fd); } finally { closeSync(fd); }
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
    try { fsyncSync(fd); } finally { closeSync(fd); }
  } catch { /* some filesystems refuse fsync on folders; the rename is still atomic */ }
}

async function fsyncDir(dir: string): Promise<void> {
  try {
    const fh = await open(dir, 'r');
    try { await fh.sync(); } finally { await fh.close(); }
  } catch { /* as above */ }
}
