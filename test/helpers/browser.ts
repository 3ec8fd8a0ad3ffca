// Launches Debian's Chromium through playwright-core for end-to-end tests.
// Never downloads a browser. With `webgpu: true` Chromium exposes SwiftShader's
// software WebGPU adapter (to secure contexts such as http://localhost, also in
// dedicated workers); without it `navigator.gpu.requestAdapter()` returns null.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type ConsoleMessage, type Page } from 'playwright-core';

export const CHROMIUM_PATH = process.env.ATOLL_CHROMIUM ?? '/usr/bin/chromium';

export interface LaunchOptions {
  /** Pass --enable-unsafe-webgpu (SwiftShader WebGPU). */
  webgpu: boolean;
  /** Viewport; default 1280×900. */
  viewport?: { width: number; height: number };
  /** Extra Chromium flags. */
  args?: string[];
  /** Forward page console messages and page errors to the test's stderr (default: env ATOLL_E2E_LOG=1). */
  logConsole?: boolean;
}

export interface LaunchedBrowser {
  /** Null: launched as a persistent context, use `context`. */
  browser: Browser | null;
  context: BrowserContext;
  page: Page;
  /** Page console lines and errors seen so far (also from workers). */
  logs: string[];
  /** Closes the browser and removes its user-data dir. Safe to call twice. */
  close(): Promise<void>;
}

export function chromiumArgs(webgpu: boolean, extra: string[] = []): string[] {
  return [
    '--headless=new',
    '--no-sandbox',
    ...(webgpu ? ['--enable-unsafe-webgpu'] : []),
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    // keep timers and rAF running in a headless tab the test does not focus
    '--disable-background-timer-throttling',
    '--disable-renderer-backgrounding',
    '--disable-backgrounding-occluded-windows',
    ...extra,
  ];
}

/** Starts Chromium with a fresh user-data dir and opens one page. */
export async function launchChromium(opts: LaunchOptions): Promise<LaunchedBrowser> {
  const userDataDir = mkdtempSync(join(tmpdir(), 'atoll-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM_PATH,
    headless: true, // the real mode comes from --headless=new below
    args: chromiumArgs(opts.webgpu, opts.args),
    ignoreDefaultArgs: ['--headless'],
    viewport: opts.viewport ?? { width: 1280, height: 900 },
    env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? '/tmp' },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const logs: string[] = [];
  const log = opts.logConsole ?? process.env.ATOLL_E2E_LOG === '1';
  const push = (line: string) => {
    logs.push(line);
    if (logs.length > 2000) logs.shift();
    if (log) process.stderr.write(`[page] ${line}\n`);
  };
  page.on('console', (m: ConsoleMessage) => push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => push(`pageerror: ${e.message}`));
  page.on('worker', (w) => {
    w.on('console', (m: ConsoleMessage) => push(`worker ${m.type()}: ${m.text()}`));
  });
  let closed = false;
  return {
    browser: null,
    context,
    page,
    logs,
    async close() {
      if (closed) return;
      closed = true;
      await context.close().catch(() => {});
      rmSync(userDataDir, { recursive: true, force: true });
    },
  };
}

// ---------------------------------------------------------------------------------------------
// The client build the server serves (dist/client). Built once and reused while its sources are
// unchanged: a stamp of every source file's path, size and mtime is kept next to the output.


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
