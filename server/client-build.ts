// The pages' build on demand: `serve --build-if-needed` builds when dist/client is missing;
// `atoll fleet` and the e2e tests (ensureClientBuild) also when it is older than its sources (a page
// from a stale build speaks an older protocol), by a stamp of every source file's path, size and
// mtime kept next to the output.

import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DEFAULT_CLIENT_DIR } from './app.ts';

const ROOT = resolve(import.meta.dirname, '..');

/** Runs `vite build` when dist/client is missing and the client sources exist. */
export function buildClientIfNeeded(say: (s: string) => void): void {
  if (existsSync(join(DEFAULT_CLIENT_DIR, 'index.html'))) return;
  if (!existsSync(join(ROOT, 'client/index.html')) || !existsSync(join(ROOT, 'vite.config.ts'))) {
    say('atoll serve: no client sources to build; serving a placeholder page');
    return;
  }
  say('atoll serve: dist/client is missing; running vite build …');
  const vite = join(ROOT, 'node_modules/vite/bin/vite.js');
  const r = spawnSync(process.execPath, [vite, 'build', '--logLevel', 'warn'], { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit'] });
  if (r.status !== 0) say('atoll serve: vite build failed; serving a placeholder page (run `npm run build` to see why)');
}

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
