// What each overview chart shows: a ChartDef (series, data, axes, note) built from the run's history points.

import uPlot from 'uplot';
import { fmtBytes, fmtInt, fmtLoss, fmtRatio, fmtSI, isNum } from './format.ts';
import type { HistoryPoint } from '../../core/api.ts';
import type { XAxis } from './url.ts';
import { type ChartDef, PALE, PALETTE, type Y } from './chart-box.ts';

export function xOf(p: HistoryPoint, x: XAxis): number {
  return x === 'time' ? p.time / 1000 : p.totalTokens;
}

/** History points with a non-decreasing x. */
export function withX(points: HistoryPoint[], x: XAxis): HistoryPoint[] {
  const out: HistoryPoint[] = [];
  let last = -Infinity;
  for (const p of points) {
    const v = xOf(p, x);
    if (v < last) continue;
    last = v;
    out.push(p);
  }
  return out;
}

/** Exponential moving average with TensorBoard-style debiasing; nulls pass through. */
export function ema(ys: Y, w: number): Y {
  if (w <= 0) return ys.slice();
  let s = 0;
  let n = 0;
  return ys.map((v) => {
    if (!isNum(v)) return null;
    s = w * s + (1 - w) * v;
    n++;
    return s / (1 - Math.pow(w, n));
  });
}

/** Per-second rate of a running total, against time in ms. */
function rate(cum: number[], times: number[]): Y {
  return cum.map((v, i) =>
    i > 0 && times[i] > times[i - 1] ? Math.max(0, (v - cum[i - 1]) / ((times[i] - times[i - 1]) / 1000)) : null,
  );
}

export const xLabel = (x: XAxis) => (x === 'time' ? 'time' : 'tokens trained');
export const WAIT = 'Waiting for the first outer step…';

export function lossDef(points: HistoryPoint[], x: XAxis, smooth: number): ChartDef {
  const ps = withX(points, x);
  const train = ps.map((p) => p.trainLoss);
  const evalL = ps.map((p) => p.evalLoss);
  const hasAny = train.some(isNum) || evalL.some(isNum);
  return {
    key: `loss/${x}/${smooth}`,
    x,
    data: [ps.map((p) => xOf(p, x)), train, ema(train, smooth), evalL],
    series: [
      {
        label: 'train (raw)',
        stroke: '#b8c7d6',
        width: 1,
        value: (_u, v) => fmtLoss(v),
        spanGaps: true,
        points: { show: false },
      },
      {
        label: smooth > 0 ? `train (EMA ${smooth})` : 'train',
        stroke: PALETTE[0],
        width: 2,
        value: (_u, v) => fmtLoss(v),
        spanGaps: true,
        points: { show: false },
      },
      {
        label: 'eval (global model)',
        stroke: PALETTE[1],
        width: 2,
        value: (_u, v) => fmtLoss(v),
        spanGaps: true,
        points: { show: true, size: 5 },
      },
    ],
    yFmt: (v) => v.toFixed(2),
    empty: ps.length === 0 ? WAIT : hasAny ? null : 'No loss reported yet',
    note:
      `Train loss as reported by islands (averaged per outer step), eval loss of the global model on the ` +
      `held-out split; x = ${xLabel(x)}.`,
  };
}

export function throughputDef(points: HistoryPoint[], x: XAxis): ChartDef {
  const ps = withX(points, x);
  const set = new Set<string>();
  for (const p of ps) for (const k of Object.keys(p.tokensByEngine)) set.add(k);
  const engines = [...set].sort();
  // Each engine's share of the update's tokens, times the point's rate: the stack adds up to the total.
  const share = (p: HistoryPoint, e: string) => {
    let sum = 0;
    for (const v of Object.values(p.tokensByEngine)) sum += v;
    return sum > 0 ? (p.tokensPerSec * (p.tokensByEngine[e] ?? 0)) / sum : null;
  };
  const raw: Y[] = engines.map((e) => ps.map((p) => share(p, e)));
  // stack: series i (engine i) shows the sum of engines i..n-1, drawn bottom-last so each fill covers the ones above.
  const n = ps.length;
  const stacked: Y[] = raw.map(() => new Array(n).fill(null));
  for (let j = 0; j < n; j++) {
    let acc = 0;
    let any = false;
    for (let i = raw.length - 1; i >= 0; i--) {
      const v = raw[i][j];
      if (isNum(v)) {
        acc += v;
        any = true;
      }
      stacked[i][j] = any ? acc : null;
    }
  }
  const total: uPlot.Series = {
    label: 'total',
    stroke: () => getComputedStyle(document.documentElement).getPropertyValue('--text').trim() || '#333',
    width: 1.5,
    value: (_u, v) => fmtSI(v, ' tok/s'),
    spanGaps: true,
    points: { show: false },
  };
  const stacks = engines.map(
    (e, i): uPlot.Series => ({
      label: e,
      stroke: PALETTE[(i + 2) % PALETTE.length],
      fill: PALE[(i + 2) % PALE.length],
      width: 1,
      spanGaps: true,
      points: { show: false },
      value: (_u, _v, _si, idx) => (idx === null ? '–' : fmtSI(raw[i][idx], ' tok/s')),
    }),
  );
  // uPlot draws in order: the stacks first (bottom-most engine last), the total on top.
  return {
    key: `tps/${x}/${engines.join(',')}`,
    x,
    data: [ps.map((p) => xOf(p, x)), ...stacked, ps.map((p) => p.tokensPerSec)],
    series: [...stacks, total],
    yFmt: (v) => fmtSI(v),
    empty: n === 0 ? WAIT : null,
    note: 'Tokens into θ per second over the trailing minute, stacked by the contributors\u2019 engine.',
  };
}

export function islandsDef(points: HistoryPoint[], x: XAxis): ChartDef {
  const ps = withX(points, x);
  return {
    key: `islands/${x}`,
    x,
    data: [ps.map((p) => xOf(p, x)), ps.map((p) => p.islandsOnline), ps.map((p) => p.contributors)],
    series: [
      {
        label: 'online',
        stroke: PALETTE[2],
        fill: 'rgba(63,143,90,0.12)',
        width: 2,
        paths: uPlot.paths.stepped?.({ align: 1 }),
        value: (_u, v) => fmtInt(v),
        spanGaps: true,
        points: { show: false },
      },
      {
        label: 'contributors / update',
        stroke: PALETTE[0],
        width: 1.5,
        paths: uPlot.paths.stepped?.({ align: 1 }),
        value: (_u, v) => fmtInt(v),
        spanGaps: true,
        points: { show: false },
      },
    ],
    yFmt: (v) => fmtInt(v),
    yInt: true,
    empty: ps.length === 0 ? WAIT : null,
    note: 'Online: islands connected at each outer update. Contributors: islands whose Δ went into it.',
  };
}

export function bytesDef(points: HistoryPoint[], x: XAxis): ChartDef {
  const ps = withX(points, x);
  const times = ps.map((p) => p.time);
  const up = rate(
    ps.map((p) => p.bytesInTotal),
    times,
  );
  const down = rate(
    ps.map((p) => p.bytesOutTotal),
    times,
  );
  const ratio: Y = ps.map((p) => (p.compressionRatio > 0 ? p.compressionRatio : null));
  const series: uPlot.Series[] = [
    {
      label: 'up (islands → server)',
      stroke: PALETTE[0],
      width: 2,
      value: (_u, v) => (isNum(v) ? `${fmtBytes(v)}/s` : '–'),
      spanGaps: true,
      points: { show: false },
    },
    {
      label: 'down (server → islands)',
      stroke: PALETTE[3],
      width: 2,
      dash: [6, 3],
      value: (_u, v) => (isNum(v) ? `${fmtBytes(v)}/s` : '–'),
      spanGaps: true,
      points: { show: false },
    },
    {
      label: 'compression',
      scale: 'r',
      stroke: PALETTE[6],
      width: 1.5,
      dash: [4, 3],
      value: (_u, v) => fmtRatio(v),
      spanGaps: true,
      points: { show: false },
    },
  ];
  const any = up.some(isNum) || down.some(isNum);
  return {
    key: `bytes/${x}`,
    x,
    data: [ps.map((p) => xOf(p, x)), up, down, ratio],
    series,
    yFmt: (v) => fmtBytes(v),
    yRight: { label: 'ratio', fmt: (v) => `${v.toPrecision(3)}×` },
    empty: ps.length === 0 ? WAIT : any ? null : 'No traffic measured yet',
    note:
      'Bytes/s between outer updates (Δ frames and joins up; updates and model downloads down). Compression: ' +
      'fp32 bytes of the accepted Δs ÷ their frame bytes, per version.',
  };
}

export function versionDef(points: HistoryPoint[], x: XAxis): ChartDef {
  const ps = withX(points, x);
  return {
    key: `version/${x}`,
    x,
    data: [ps.map((p) => xOf(p, x)), ps.map((p) => p.version)],
    series: [
      {
        label: 'outer version',
        stroke: PALETTE[4],
        width: 2,
        paths: uPlot.paths.stepped?.({ align: 1 }),
        value: (_u, v) => fmtInt(v),
        points: { show: false },
      },
    ],
    yFmt: (v) => fmtInt(v),
    yInt: true,
    breaks: true,
    empty: ps.length === 0 ? WAIT : null,
  };
}

export function stalenessDef(points: HistoryPoint[]): ChartDef {
  const counts = new Map<number, number>();
  for (const p of points) {
    p.stalenessHist.forEach((v, t) => counts.set(t, (counts.get(t) ?? 0) + v));
  }
  // Buckets up to the largest staleness seen (at least τ = 0..2, for scale); the server's last
  // bucket collects everything at or above it.
  let max = -1;
  for (const [t, c] of counts) if (c > 0 && t > max) max = t;
  const lastBucket = counts.size ? Math.max(...counts.keys()) : -1;
  if (max >= 0) max = Math.max(max, Math.min(2, lastBucket));
  const xs: number[] = [];
  const ys: Y = [];
  for (let t = 0; t <= max; t++) {
    xs.push(t);
    ys.push(counts.get(t) ?? 0);
  }
  const total = ys.reduce<number>((a, b) => a + (b ?? 0), 0);
  return {
    key: 'staleness',
    x: 'linear',
    bars: true,
    data: [xs, ys],
    series: [
      {
        label: 'accepted Δs',
        stroke: PALETTE[0],
        fill: PALE[0],
        width: 1,
        paths: uPlot.paths.bars?.({ size: [0.7, 60] }),
        value: (_u, v) => fmtInt(v),
        points: { show: false },
      },
    ],
    xValues: (v) => (Number.isInteger(v) ? (v === lastBucket && lastBucket > 2 ? `τ≥${v}` : `τ=${v}`) : ''),
    xLabel: 'staleness',
    yFmt: (v) => fmtInt(v),
    yInt: true,
    empty: total === 0 ? 'No accepted deltas yet' : null,
    note: total ? `${fmtInt(total)} accepted Δs by staleness τ = version at apply − base version.` : '',
  };
}

export function outcomesDef(points: HistoryPoint[], x: XAxis): ChartDef {
  const ps = withX(points, x);
  const codes = new Set<string>();
  for (const p of ps) for (const k of Object.keys(p.rejected)) codes.add(k);
  const list = [...codes].sort();
  let acc = 0;
  const accepted: Y = ps.map((p) => (acc += p.accepted));
  const byCode: Y[] = list.map((c) => {
    let s = 0;
    return ps.map((p) => (s += p.rejected[c] ?? 0));
  });
  const totals = list.map((c, i) => `${c} ${fmtInt(byCode[i][byCode[i].length - 1])}`);
  return {
    key: `outcomes/${x}/${list.join(',')}`,
    x,
    data: [ps.map((p) => xOf(p, x)), accepted, ...byCode],
    series: [
      {
        label: 'accepted',
        stroke: PALETTE[2],
        width: 2,
        paths: uPlot.paths.stepped?.({ align: 1 }),
        value: (_u, v) => fmtInt(v),
        points: { show: false },
      },
      ...list.map(
        (c, i): uPlot.Series => ({
          label: `rejected ${c}`,
          stroke: PALETTE[(i + 4) % PALETTE.length],
          width: 1.5,
          dash: [5, 3],
          paths: uPlot.paths.stepped?.({ align: 1 }),
          value: (_u, v) => fmtInt(v),
          points: { show: false },
        }),
      ),
    ],
    yFmt: (v) => fmtSI(v),
    yInt: true,
    breaks: true,
    empty: ps.length === 0 ? WAIT : null,
    note: ps.length
      ? `Cumulative. Accepted ${fmtInt(acc)}${list.length ? '; rejected: ' + totals.join(', ') : '; none rejected'}.`
      : '',
  };
}
