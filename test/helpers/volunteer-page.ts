// The volunteer page as the e2e tests see it: what it exposes on window.__atoll (see
// client/volunteer/main.ts), and waiting for it to come up or for an element's text.

import type { LaunchedBrowser } from './browser.ts';
import { waitFor } from './server.ts';

export interface PageView {
  phase: string;
  busy: boolean;
  stepMs: number | null;
  dutyCycle: number;
  effectiveDutyCycle: number;
  calibration: {
    tokensPerSec: number;
    stepMs: number;
    timed: Array<{ B: number; ms: number }>;
    estimated: boolean;
    ms: number;
  } | null;
  connection: string;
  engine: string | null;
  device: string;
  islandId: string | null;
  round: { baseVersion: number; step: number; total: number } | null;
  roundsAccepted: number;
  roundsRejected: number;
  tokensContributed: number;
  tokensPerSec: number | null;
  bytesUp: number;
  bytesDown: number;
  lastRejection: { code: string; message: string } | null;
  pauseReasons: string[];
}

export const pageView = (b: LaunchedBrowser) =>
  b.page.evaluate(() => (globalThis as unknown as { __atoll: { view: PageView } }).__atoll.view);
export const pageLog = (b: LaunchedBrowser) =>
  b.page.evaluate(() =>
    (globalThis as unknown as { __atoll: { log: Array<{ text: string }> } }).__atoll.log.map((l) => l.text),
  );

/** Waits until the element's text satisfies `ok` (string: contains it); returns the text. */
export async function textOf(
  b: LaunchedBrowser,
  selector: string,
  ok: string | ((t: string) => boolean) = () => true,
  timeoutMs = 10_000,
): Promise<string> {
  const pred = typeof ok === 'string' ? (t: string) => t.includes(ok) : ok;
  let last = '';
  try {
    return (await waitFor(
      `${selector} text`,
      async () => {
        last = (await b.page.locator(selector).textContent()) ?? '';
        return pred(last) ? last : null;
      },
      timeoutMs,
      100,
    )) as string;
  } catch {
    throw new Error(
      `${selector}: text ${JSON.stringify(last)} did not match ${typeof ok === 'string' ? JSON.stringify(ok) : 'the condition'}`,
    );
  }
}

/**
 * Opens the page and waits for the run info and the WebGPU check. Reloads once if the page did not
 * come up (in a shared dev tree another `vite build` may be rewriting dist/client at that moment).
 */
export async function openVolunteerPage(b: LaunchedBrowser, url: string): Promise<void> {
  const ready = () =>
    b.page.waitForFunction(
      () => {
        const a = (globalThis as unknown as { __atoll?: { probe: unknown; run: unknown } }).__atoll;
        return !!(a?.probe && a.run);
      },
      null,
      { timeout: 30_000 },
    );
  for (let attempt = 0; ; attempt++) {
    await b.page.goto(url);
    try {
      await ready();
      return;
    } catch (e) {
      const body =
        (await b.page
          .locator('body')
          .textContent()
          .catch(() => '')) ?? '';
      if (attempt > 0)
        throw new Error(
          `the volunteer page did not come up: ${(e as Error).message}\n${body.slice(0, 400)}\n${b.logs.slice(-10).join('\n')}`,
        );
    }
  }
}
