// The optimizer's charts (the inner and outer learning rates, the outer update's norm), the loss chart's log
// axis, and another run's curves drawn into a chart (overlay.ts reads them from a metrics JSONL).

import uPlot from 'uplot';
import type { HistoryPoint } from '../../core/api.ts';
import { type ChartDef, PALETTE, type Y } from './chart-box.ts';
import { WAIT, ema, withX, xLabel, xOf } from './chart-defs.ts';
import { fmtLoss, isNum } from './format.ts';
import { type OverlayRun, type OverlayTag, overlayColumns } from './overlay.ts';
import type { XAxis } from './url.ts';

/** 0.002 → "2.00e-3"; 0.7 → "0.700". */
export function fmtLr(v: number | null | undefined): string {
  if (!isNum(v)) return '–';
  return v !== 0 && Math.abs(v) < 0.01 ? v.toExponential(2) : v.toPrecision(3);
}

const line = (label: string, stroke: string, fmt: (v: number | null) => string, o: uPlot.Series = {}) =>
  ({
    label,
    stroke,
    width: 2,
    value: (_u, v) => fmt(v),
    spanGaps: true,
    points: { show: false },
    ...o,
  }) satisfies uPlot.Series;

export function lrDef(points: HistoryPoint[], x: XAxis): ChartDef {
  const ps = withX(points, x);
  const inner = ps.map((p) => p.innerLr);
  const outer = ps.map((p) => p.outerLr);
  const any = inner.some(isNum) || outer.some(isNum);
  return {
    key: `lr/${x}`,
    x,
    data: [ps.map((p) => xOf(p, x)), inner, outer],
    series: [
      line('inner lr (AdamW)', PALETTE[0], fmtLr, { paths: uPlot.paths.stepped?.({ align: 1 }) }),
      line('outer lr', PALETTE[1], fmtLr, { scale: 'r', dash: [6, 3], paths: uPlot.paths.stepped?.({ align: 1 }) }),
    ],
    yFmt: (v) => fmtLr(v),
    yRight: { label: 'outer lr', fmt: (v) => fmtLr(v) },
    empty: ps.length === 0 ? WAIT : any ? null : 'No learning rates recorded (a run logged before they were)',
    note:
      `Inner lr: the peak-and-cosine schedule at the update's token position (left axis; each island also warms ` +
      `up its first AdamW steps). Outer lr: the outer step's (right axis). x = ${xLabel(x)}.`,
  };
}

export function normDef(points: HistoryPoint[], x: XAxis): ChartDef {
  const ps = withX(points, x);
  const norm: Y = ps.map((p) => (p.version > 0 ? p.updateNorm : null));
  // where the safety rules acted, a marker on that version's norm
  const clipped: Y = ps.map((p) => (p.version > 0 && isNum(p.trustGain) ? p.updateNorm : null));
  const short: Y = ps.map((p) => (p.version > 0 && p.shortClose ? p.updateNorm : null));
  const nClipped = clipped.filter(isNum).length,
    nShort = short.filter(isNum).length;
  const fmt = (v: number | null) => (isNum(v) ? v.toPrecision(3) : '–');
  const dots = (label: string, stroke: string, size: number) =>
    line(label, stroke, fmt, { width: 0, paths: () => null, points: { show: true, size, fill: stroke } });
  return {
    key: `norm/${x}`,
    x,
    data: [ps.map((p) => xOf(p, x)), norm, clipped, short],
    series: [
      line('‖outer update‖', PALETTE[3], fmt, { points: { size: 4 } }),
      dots('clipped by the trust region', '#d62728', 9),
      dots('sync round closed short', '#7f7f7f', 7),
    ],
    yFmt: (v) => v.toPrecision(2),
    empty: ps.length === 0 || !norm.some(isNum) ? WAIT : null,
    note:
      `L2 norm of each outer update u (θ ← θ − Q(u)), in θ's units. The trust region clipped ${nClipped} ` +
      `update${nClipped === 1 ? '' : 's'} to its limit (a multiple of the recent median); ` +
      `${nShort} sync round${nShort === 1 ? '' : 's'} ` +
      `closed below minContributors (too few members alive). x = ${xLabel(x)}.`,
  };
}

/** The loss chart on a log y axis: values ≤ 0 are not drawn. */
export function logY(def: ChartDef): ChartDef {
  const [xs, ...ys] = def.data;
  const pos = (y: Y) => y.map((v) => (isNum(v) && v > 0 ? v : null));
  return {
    ...def,
    key: `${def.key}/log`,
    yLog: true,
    yFmt: (v) => (v >= 10 ? v.toFixed(0) : v.toPrecision(2)),
    data: [xs, ...ys.map((y) => pos(y as Y))] as uPlot.AlignedData,
  };
}

/** What each chart overlays of another run: [tag, label, series options]. */
const OVERLAID: Record<string, Array<[OverlayTag, string, uPlot.Series]>> = {
  loss: [
    ['train/loss', 'train', { stroke: '#7f93a8', width: 1.5 }],
    ['eval/loss', 'eval', { stroke: PALETTE[7], width: 2, points: { show: true, size: 4 } }],
  ],
  lr: [
    ['lr/inner', 'inner lr', { stroke: PALETTE[5] }],
    ['lr/outer', 'outer lr', { stroke: PALETTE[6], scale: 'r' }],
  ],
  norm: [['update/norm', '‖outer update‖', { stroke: PALETTE[5] }]],
};

/**
 * `def` with another run's curves added: its columns outer-joined on x (uPlot.join), drawn dotted and labelled
 * with the file's name. `smooth`: the train loss's EMA, as this run's. `startMs`: this run's first point.
 */
export function withOverlay(
  chart: string,
  def: ChartDef,
  run: OverlayRun | null,
  smooth: number,
  startMs: number | null,
): ChartDef {
  const spec = OVERLAID[chart];
  if (!run || !spec || def.x === 'linear') return def;
  const [xs, ...cols] = overlayColumns(
    run,
    def.x,
    spec.map((s) => s[0]),
    startMs,
  );
  const ys = cols.map((c, i) => (spec[i][0] === 'train/loss' ? ema(c, smooth) : c));
  if (xs.length === 0 || !ys.some((y) => y.some(isNum)))
    return { ...def, note: `${def.note ?? ''} ${run.name}: nothing on this axis.` };
  const fmt = chart === 'loss' ? fmtLoss : fmtLr;
  const series = spec.map(([, label, o]) =>
    line(`${run.name} ${label}`, o.stroke as string, (v) => fmt(v), { dash: [2, 3], ...o }),
  );
  const other = [xs as number[], ...ys.map((y) => (def.yLog ? y.map((v) => (isNum(v) && v > 0 ? v : null)) : y))];
  const data = uPlot.join([def.data, other as uPlot.AlignedData]);
  const aligned = def.x === 'time' ? ' (its start aligned with this run\u2019s)' : '';
  return {
    ...def,
    key: `${def.key}/overlay:${run.name}`,
    data,
    series: [...def.series, ...series],
    empty: null,
    note: `${def.note ?? ''} Dotted: ${run.name}${aligned}.`,
  };
}
