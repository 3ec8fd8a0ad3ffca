// The pages' build on demand. A build is current when dist/client was built from the sources as
// they are now: a stamp of every source file's path, size and mtime, which every `vite build`
// writes next to its output (vite.config.ts), so `npm run build` counts too. `serve
// --build-if-needed`, `atoll fleet` and the e2e tests build when it is missing or stale (a page from
// a stale build speaks an older protocol: it once sent NaN deltas after a protocol change).

import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '..');
const BUILD_INPUTS = ['client', 'core', 'shaders', 'vite.config.ts', 'package-lock.json'];
const out = (root: string) => join(root, 'dist', 'client');
const stampFile = (root: string) => join(out(root), '.atoll-build-stamp');

/** The sources' stamp: path, size and mtime of every file the client build reads. */
export function sourceStamp(root = ROOT): string {
  const h = createHash('sha256');
  const walk = (p: string) => {
    const abs = join(root, p);
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

/** Written by vite.config.ts when a build finishes. */
export function writeBuildStamp(root = ROOT): void {
  writeFileSync(stampFile(root), sourceStamp(root));
}

/** 'missing', 'stale' (built from other sources, or by a build that wrote no stamp) or 'current'. */
export function clientBuildState(root = ROOT): 'missing' | 'stale' | 'current' {
  if (!existsSync(join(out(root), 'index.html'))) return 'missing';
  return existsSync(stampFile(root)) && readFileSync(stampFile(root), 'utf8') === sourceStamp(root)
    ? 'current'
    : 'stale';
}

function viteBuild(): boolean {
  const vite = join(ROOT, 'node_modules', 'vite', 'bin', 'vite.js');
  return (
    spawnSync(process.execPath, [vite, 'build', '--logLevel', 'error'], {
      cwd: ROOT,
      stdio: ['ignore', 'inherit', 'inherit'],
    }).status === 0
  );
}

/** `serve --build-if-needed`: builds when dist/client is missing or stale; a failed build leaves what there was. */
export function buildClientIfNeeded(say: (s: string) => void): void {
  const state = clientBuildState();
  if (state === 'current') return;
  if (!existsSync(join(ROOT, 'client/index.html')) || !existsSync(join(ROOT, 'vite.config.ts'))) {
    if (state === 'missing') say('atoll serve: no client sources to build; serving a placeholder page');
    return;
  }
  say(
    `atoll serve: dist/client is ${state === 'missing' ? 'missing' : 'older than its sources'}; running vite build …`,
  );
  if (!viteBuild())
    say(
      `atoll serve: vite build failed; ` +
        `${state === 'missing' ? 'serving a placeholder page' : 'serving the older build'} (run \`npm run build\` to ` +
        `see why)`,
    );
}

/** Builds unless dist/client is current; throws when the build fails. Returns ms spent. */
export function ensureClientBuild(): number {
  if (clientBuildState() === 'current') return 0;
  const t0 = Date.now();
  if (!viteBuild()) throw new Error('vite build failed (run `npm run build` to see why)');
  return Date.now() - t0;
}
