// The fleet's volunteer pages: headless Chromium (chromium.ts) opening the real page at a gateway and clicking
// Start, read through what the page exposes on window.__atoll, and folded into their island records at the end.

import type { LaunchedBrowser } from './chromium.ts';
import { newIsland } from './island-record.ts';
import { waitUntil } from './procs.ts';
import type { LiveIsland } from './types.ts';

/** What the page exposes on window.__atoll.view (client/volunteer/main.ts), the parts the fleet reads. */
interface PageView {
  lastRejection: { code: string; message: string } | null;
  islandId: string | null;
  round: { step: number; total: number } | null;
  roundsAccepted: number;
  roundsRejected: number;
  tokensContributed: number;
  tokensPerSec: number | null;
  bytesUp: number;
  bytesDown: number;
  engine: string | null;
  phase: string;
  stepsDone: number;
  hashChecks: number;
  hashMismatches: number;
  roundsMixed: number;
  dataBytes: number;
  rangeBytesAssigned: number;
}

export interface FleetPage {
  isl: LiveIsland;
  b: LaunchedBrowser;
  view: PageView | null;
  logSeen: number;
}

export class FleetPages {
  readonly list: FleetPage[] = [];
  constructor(
    /** The fleet's start (Date.now()): a page joins when its first round shows. */
    private readonly t0: number,
    private readonly log: (line: string) => void,
  ) {}

  /**
   * Opens `count` pages over the gateways, clicks Start on each, and waits until every page had a delta accepted:
   * a page on SwiftShader is slow, and fast islands could spend the whole budget before its first round lands.
   * `waitMs`: the run's --timeout (GPT-2 on SwiftShader takes minutes a step, and its first round two steps).
   */
  async open(count: number, urls: string[], waitMs: number): Promise<void> {
    const { launchChromium } = await import('./chromium.ts');
    await Promise.all(
      Array.from({ length: count }, async (_, i) => {
        const b = await launchChromium({ webgpu: true, logConsole: false });
        const isl = newIsland(`page-${i + 1}`, 'page', 'webgpu', 0, 1);
        this.list.push({ isl, b, view: null, logSeen: 0 });
        await b.page.goto(`${urls[i % urls.length]}/`);
        await b.page.waitForFunction(
          () => {
            const a = (globalThis as unknown as { __atoll?: { probe: unknown; run: unknown } }).__atoll;
            return !!(a?.probe && a.run);
          },
          null,
          { timeout: 60_000 },
        );
        await b.page.click('#start');
      }),
    );
    this.log(`fleet: ${count} volunteer page(s) clicked Start; the Node islands start once each had a delta accepted`);
    let said = Date.now();
    await waitUntil('every page to have a delta accepted', waitMs, async () => {
      await this.read();
      if (Date.now() - said > 30_000) {
        said = Date.now();
        await this.sayProgress();
      }
      return this.list.every((p) => (p.view?.roundsAccepted ?? 0) > 0);
    });
  }

  /** What each page said since the last look (its activity log: rejections, back-offs, reconnects), and its round. */
  private async sayProgress(): Promise<void> {
    for (const p of this.list) {
      const log = await p.b.page
        .evaluate(() =>
          (globalThis as unknown as { __atoll: { log: Array<{ text: string }> } }).__atoll.log.map((l) => l.text),
        )
        .catch(() => [] as string[]);
      const fresh = log.slice(p.logSeen);
      p.logSeen = log.length;
      if (fresh.length) this.log(`fleet: ${p.isl.name}: ${fresh.slice(-6).join(' | ')}`);
    }
    const page = ({ isl, view: v }: FleetPage) =>
      `${isl.name} ${v?.phase ?? '?'} step ${v?.round?.step ?? '-'}/${v?.round?.total ?? '-'} ` +
      `accepted ${v?.roundsAccepted ?? 0}${v?.lastRejection ? ` (${v.lastRejection.code})` : ''}`;
    this.log(`fleet: pages: ${this.list.map(page).join(', ')}`);
  }

  /** Reads every page's view; a page that does not answer keeps its last one. */
  async read(): Promise<void> {
    for (const p of this.list) {
      const v = await p.b.page
        .evaluate(() => (globalThis as unknown as { __atoll: { view: PageView } }).__atoll.view)
        .catch(() => null);
      if (!v) continue;
      if (v.round && p.isl.joinAtMs < 0) p.isl.joinAtMs = Date.now() - this.t0;
      if (v.islandId && !p.isl.ids.includes(v.islandId)) p.isl.ids.push(v.islandId);
      p.view = v;
    }
  }

  /** Every page has stepped at least once. */
  training(): boolean {
    return this.list.every((p) => (p.view?.stepsDone ?? 0) > 0);
  }

  /** The pages' last views into their island records. */
  fold(): void {
    for (const p of this.list) {
      const v = p.view;
      if (!v) continue;
      Object.assign(p.isl, {
        bytesUp: v.bytesUp,
        bytesDown: v.bytesDown,
        tokensPerSec: v.tokensPerSec ?? 0,
        engine: v.engine ?? 'webgpu',
        hashChecks: v.hashChecks,
        hashMismatches: v.hashMismatches,
        roundsMixed: v.roundsMixed,
        dataBytes: v.dataBytes,
        rangeBytes: v.rangeBytesAssigned,
      });
      p.isl.stepTokens = v.tokensContributed;
      p.isl.pageAccepted = v.roundsAccepted;
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.list.map((p) => p.b.close()));
  }
}
