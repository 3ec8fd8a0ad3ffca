// The config changes of a run (GET /api/history's configChanges: each Admin PATCH with the version it holds
// from) as markers on the charts: where each one sits on a time or tokens axis, and the words of its tooltip.
// Pure (no DOM, no uPlot): unit-tested in test/dashboard-overlay.test.ts; chart-box.ts draws them.

import type { ConfigChange, HistoryPoint } from '../../core/api.ts';
import type { XAxis } from './url.ts';

export interface Marker {
  /** On the chart's x scale: seconds (time) or tokens in θ. */
  x: number;
  version: number;
  /** The change in words: "v12: outerLr 0.5, batch 4". */
  label: string;
}

/** A knob's value as the tooltip shows it: numbers as they are, anything else as JSON. */
function valueText(v: unknown): string {
  return typeof v === 'number' || typeof v === 'string' || typeof v === 'boolean' ? String(v) : JSON.stringify(v);
}

/** The words of one change: "v12: outerLr 0.5, batch 4". */
export function changeText(c: ConfigChange): string {
  const knobs = Object.entries(c.changes).map(([k, v]) => `${k} ${valueText(v)}`);
  return `v${c.version}: ${knobs.join(', ') || 'no knobs'}`;
}

/**
 * Each change's place on the x axis. Time: when it was made. Tokens: the tokens in θ at the newest point of its
 * version or before (the change holds from there); a change older than every point held is left out.
 */
export function markersOf(changes: ConfigChange[], points: HistoryPoint[], x: XAxis): Marker[] {
  const out: Marker[] = [];
  for (const c of changes) {
    let at: number | null = null;
    if (x === 'time') at = c.time / 1000;
    else {
      // points are sorted by version (Store.addHistory)
      let lo = 0;
      let hi = points.length - 1;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        if (points[mid].version <= c.version) {
          at = points[mid].totalTokens;
          lo = mid + 1;
        } else hi = mid - 1;
      }
    }
    if (at !== null && Number.isFinite(at)) out.push({ x: at, version: c.version, label: changeText(c) });
  }
  return out;
}
