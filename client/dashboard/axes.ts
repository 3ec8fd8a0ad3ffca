// Pure helpers for the charts' axes and gaps (no DOM, no uPlot), unit-tested in test/dashboard-axes.test.ts.

/**
 * x range in seconds for a time axis over `xs`: a lone time gets a minute around it (uPlot's own
 * choice is a day, labelled "02-01 05-01 08-01 …"); otherwise uPlot's [min, max].
 */
export function timeRange(xs: ArrayLike<number>, min: number, max: number): [number, number] {
  const n = xs.length;
  return n > 0 && xs[n - 1] - xs[0] < 1 ? [xs[0] - 30, xs[0] + 30] : [min, max];
}

/** One-line time-axis label: HH:MM:SS for sub-minute ticks, HH:MM within a day, else MM-DD. */
export function clock(sec: number, incr: number): string {
  const d = new Date(sec * 1000);
  const p = (n: number) => String(n).padStart(2, '0');
  if (incr >= 86_400) return `${p(d.getMonth() + 1)}-${p(d.getDate())}`;
  if (incr >= 60) return `${p(d.getHours())}:${p(d.getMinutes())}`;
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** Tick steps for axes that count things: whole numbers only. */
export const INTEGER_INCRS = [
  1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 1e7, 1e8, 1e9, 1e10,
  1e11, 1e12,
];

/**
 * Columns with a null row inserted wherever consecutive x lie further apart than `gap` (and the
 * series are drawn without spanning gaps), so a line never slopes across a stretch without data.
 */
export function breakGaps(cols: Array<Array<number | null>>, gap: number): Array<Array<number | null>> {
  const xs = cols[0];
  const out = cols.map(() => [] as Array<number | null>);
  for (let i = 0; i < xs.length; i++) {
    if (i > 0 && (xs[i] as number) - (xs[i - 1] as number) > gap) {
      out[0].push(((xs[i] as number) + (xs[i - 1] as number)) / 2);
      for (let c = 1; c < cols.length; c++) out[c].push(null);
    }
    for (let c = 0; c < cols.length; c++) out[c].push(cols[c][i]);
  }
  return out;
}

/** The gap (seconds) that breaks a time series: 10× the median spacing, at least a minute. */
export function gapSeconds(xs: number[]): number {
  const d: number[] = [];
  for (let i = 1; i < xs.length; i++) d.push(xs[i] - xs[i - 1]);
  d.sort((a, b) => a - b);
  return Math.max(60, 10 * (d.length ? d[d.length >> 1] : 0));
}
