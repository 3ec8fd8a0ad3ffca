// The pages' build on demand (`serve --build-if-needed`, `atoll fleet` with browsers): vite build
// when dist/client is missing and the client sources are here.

import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
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
