// The overview charts' panel: one ChartBox per chart (chart-box.ts), fed the definitions chart-defs.ts builds from
// the run's history, on the chosen x axis and smoothing.

import type { Store } from './store.ts';
import type { XAxis } from './url.ts';
import { ChartBox, type ChartDef } from './chart-box.ts';
import { bytesDef, islandsDef, lossDef, outcomesDef, stalenessDef, throughputDef, versionDef } from './chart-defs.ts';
import { logY, lrDef, normDef, withOverlay } from './chart-defs-train.ts';
import { markersOf } from './markers.ts';

export class Charts {
  private boxes: ChartBox[] = [];
  private byId = new Map<string, ChartBox>();
  private seen = '';
  private ro: ResizeObserver;

  /** `requestRender`: called when some charts were left for the next frame (creation is staged). */
  constructor(
    private root: HTMLElement,
    private requestRender: () => void = () => {},
  ) {
    const defs: Array<[string, string]> = [
      ['loss', 'Loss'],
      ['lr', 'Learning rates'],
      ['norm', 'Outer update norm'],
      ['tps', 'Tokens / s'],
      ['islands', 'Islands online'],
      ['bytes', 'Bandwidth and compression'],
      ['version', 'Outer version'],
      ['staleness', 'Staleness of accepted Δs'],
      ['outcomes', 'Accepted and rejected Δs by code'],
    ];
    for (const [id, title] of defs) {
      const b = new ChartBox(id, title);
      this.boxes.push(b);
      this.byId.set(id, b);
      root.appendChild(b.el);
    }
    let raf = 0;
    this.ro = new ResizeObserver(() => {
      cancelAnimationFrame(raf);
      raf = requestAnimationFrame(() => {
        for (const b of this.boxes) b.resize();
      });
    });
    this.ro.observe(root);
  }

  /**
   * Re-renders when the history, samples, run config or x/smoothing changed. Building a uPlot
   * instance costs 10–60 ms on a slow machine, so charts are built while the frame has budget
   * left (at least one per frame); the rest follow on the next frames (their boxes have fixed
   * sizes, so nothing moves meanwhile). A budget of 0 builds nothing this frame. `log`: the loss on a log axis.
   * Every chart over time or tokens carries the run's config changes as markers; the loss, lr and norm charts
   * also the overlaid run's curves (store.overlay).
   */
  render(store: Store, x: XAxis, smooth: number, log = false, buildBudgetMs = 12): void {
    const { history: hr, config: cr, overlay: or } = store.rev;
    const sig = `${hr}/${cr}/${or}/${x}/${smooth}/${log}`;
    if (sig === this.seen || this.root.clientWidth === 0) return;
    const t0 = performance.now();
    const pts = store.history;
    const markers = markersOf(store.configChanges, pts, x);
    const start = pts[0]?.time ?? null;
    const over = (id: string, d: ChartDef) => withOverlay(id, d, store.overlay, smooth, start);
    const loss = () => over('loss', log ? logY(lossDef(pts, x, smooth)) : lossDef(pts, x, smooth));
    const m = `${cr}/${x}`;
    // [id, what the chart depends on, builder]: a chart whose inputs did not change is skipped.
    const defs: Array<[string, string, () => ChartDef]> = [
      ['loss', `${hr}/${m}/${or}/${smooth}/${log}`, loss],
      ['lr', `${hr}/${m}/${or}`, () => over('lr', lrDef(pts, x))],
      ['norm', `${hr}/${m}/${or}`, () => over('norm', normDef(pts, x))],
      ['tps', `${hr}/${m}`, () => throughputDef(pts, x)],
      ['islands', `${hr}/${m}`, () => islandsDef(pts, x)],
      ['bytes', `${hr}/${m}`, () => bytesDef(pts, x)],
      ['version', `${hr}/${m}`, () => versionDef(pts, x)],
      ['staleness', `${hr}`, () => stalenessDef(pts)],
      ['outcomes', `${hr}/${m}`, () => outcomesDef(pts, x)],
    ];
    let builds = 0;
    let deferred = false;
    for (const [id, deps, make] of defs) {
      const box = this.byId.get(id)!;
      if (box.deps === deps && !box.needsRebuild) continue;
      const made = make();
      const def = made.x === 'linear' ? made : { ...made, markers };
      if (box.needsBuild(def)) {
        // Build while within the frame budget (at least one per frame, none when the budget is 0).
        if (buildBudgetMs <= 0 || (builds > 0 && performance.now() - t0 > buildBudgetMs)) {
          deferred = true;
          continue;
        }
        builds++;
      }
      box.update(def);
      box.deps = deps;
    }
    this.seen = deferred ? '' : sig;
    if (deferred) this.requestRender();
  }

  /** Forces the next render (e.g. when the tab becomes visible). */
  invalidate(): void {
    this.seen = '';
    for (const b of this.boxes) b.deps = '';
  }
}
