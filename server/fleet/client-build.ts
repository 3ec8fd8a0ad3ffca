// The client build the server serves (dist/client), for the e2e tests and `atoll fleet`'s pages.
// Built once and reused while its sources are unchanged: a stamp of every source file's path, size
// and mtime is kept next to the output (a page from a stale build would speak an older protocol).

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');
const BUILD_INPUTS = ['client', 'core', 'shaders', 'vite.config.ts', 'package-lock.json'];
const STAMP = join(ROOT, 'dist', 'client', '.atoll-build-stamp');

function sourceStamp(): string {
  const h = createHash('sha256');
  const walk = (p: string) => {
    const abs = join(ROOT, p);
    if (!existsSync(abs)) return;
    const st = statSync(abs);
    if (st.isDirectory()) {
      for (const name of readdirSync(abs).sort()) walk(join(p, name));
    } else {
      h.update(`${p}\0${st.size}\0${st.mtimeMs}\n`);
    }
  };
  for (const p of BUILD_INPUTS) walk(p);
  return h.digest('hex');
}

/** Runs `vite build` unless dist/client is already built from the current sources. Returns ms spent. */
export function ensureClientBuild(): number {
  const stamp = sourceStamp();
  if (existsSync(STAMP) && readFileSync(STAMP, 'utf8') === stamp && existsSync(join(ROOT, 'dist', 'client', 'index.html'))) return 0;
  const t0 = Date.now();
  execFileSync(process.execPath, [join(ROOT, 'node_modules', 'vite', 'bin', 'vite.js'), 'build', '--logLevel', 'error'], { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
  writeFileSync(STAMP, stamp);
  return Date.now() - t0;
}
