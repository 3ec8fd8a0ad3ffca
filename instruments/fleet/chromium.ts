// Launches Debian's Chromium through playwright-core: the e2e tests' browsers and `atoll fleet`'s
// volunteer pages. Never downloads a browser. With `webgpu: true` Chromium exposes SwiftShader's
// software WebGPU adapter (to secure contexts such as http://localhost, also in dedicated workers);
// without it `navigator.gpu.requestAdapter()` returns null.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type BrowserContext, type ConsoleMessage, type Page } from 'playwright-core';
import { closeOnce } from '../../server/close-once.ts';

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
    // WebRTC (butterfly mixing): plain host candidates, not mDNS `.local` names that a Node peer
    // (libdatachannel) cannot resolve and that need multicast on the host; on loopback and LANs
    // host candidates are all ICE needs (docs/protocol.md, "WebRTC settings")
    '--disable-features=WebRtcHideLocalIpsWithMdns',
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
  return {
    browser: null,
    context,
    page,
    logs,
    close: closeOnce(async () => {
      await context.close().catch(() => {});
      rmSync(userDataDir, { recursive: true, force: true });
    }),
  };
}
