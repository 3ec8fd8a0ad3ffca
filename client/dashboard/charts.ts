// The overview charts (uPlot). Each chart is a fixed-height box, so data arriving
// never moves the layout; its series are rebuilt only when their set changes
// (new engine type, new rejection code, x-axis toggle), otherwise setData().

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { INTEGER_INCRS, breakGaps, clock, gapSeconds, timeRange } from './axes.ts';
import { h, setText } from './dom.ts';
import { fmtBytes, fmtInt, fmtLoss, fmtRatio, fmtSI, isNum } from './format.ts';
import type { HistoryPoint } from '../../core/api.ts';
import type { Store } from './store.ts';
import type { XAxis } from './url.ts';

type Data = uPlot.AlignedData;
type Y = Array<number | null>;

export const PALETTE = ['#2f6f9f', '#c2772b', '#3f8f5a', '#8a5aa8', '#b5474b', '#5f7f8c', '#9a8a3a', '#d06fa0'];
const PALE = ['#a9c6dc', '#ebc9a4', '#b1d6bc', '#d2bfe0', '#e6b1b3', '#bccbd1', '#dcd3a5', '#efc1d9'];

export interface ChartDef {
  /** Structure key: when it changes the uPlot instance is rebuilt. */
  key: string;
  series: uPlot.Series[];
  data: Data;
  x: 'time' | 'tokens' | 'linear';
  yRight?: { label: string; fmt: (v: number) => string };
  yFmt: (v: number) => string;
  /** The y axis counts things: whole-number ticks only. */
  yInt?: boolean;
  /** On a time axis, break the lines where updates stopped for a while (see axes.ts breakGaps). */
  breaks?: boolean;
  bars?: boolean;
  xValues?: (v: number) => string;
  xLabel?: string;
  /** Message shown over the chart instead of data. */
  empty: string | null;
  note?: string;
}

const HEIGHT = 190;

export class ChartBox {
  readonly el: HTMLElement;
  private plot: HTMLElement;
  private emptyEl: HTMLElement;
  private noteEl: HTMLElement;
  private u: uPlot | null = null;
  private key = '';
  private hover = false;
  private bars = false;
  /** Inputs of the last update (see Charts.render). */
  deps = '';

  constructor(
    readonly id: string,
    title: string,
  ) {
    this.plot = h('div', { class: 'plot', style: `height:${HEIGHT + 48}px` });
    this.emptyEl = h('div', { class: 'plot-empty', hidden: true });
    this.noteEl = h('p', { class: 'chart-note' });
    this.el = h(
      'section',
      { class: 'chart', id: `chart-${id}`, 'data-chart': id, 'aria-label': title },
      h('h3', {}, title),
      h('div', { class: 'plot-wrap' }, this.plot, this.emptyEl),
      this.noteEl,
    );
    this.plot.addEventListener('mouseenter', () => {
      this.hover = true;
    });
    this.plot.addEventListener('mouseleave', () => {
      this.hover = false;
      requestAnimationFrame(() => this.showLatest());
    });
  }

  get needsRebuild(): boolean {
    return !this.u;
  }

  /** Would update() build a new uPlot instance (the expensive path)? */
  needsBuild(def: ChartDef): boolean {
    return !this.u || this.key !== def.key;
  }

  update(def: ChartDef): void {
    this.bars = !!def.bars;
    const empty = def.empty;
    this.emptyEl.hidden = empty === null;
    setText(this.emptyEl, empty ?? '');
    setText(this.noteEl, def.note ?? '');
    this.el.dataset.points = String(def.data[0]?.length ?? 0);
    // What the page draws, for tests and for people reading the DOM: each series' label, colour, dash.
    this.el.dataset.series = def.series
      .map((s) => `${s.label}:${typeof s.stroke === 'string' ? s.stroke : 'fn'}:${(s.dash ?? []).join(',')}`)
      .join('|');
    if (def.breaks && def.x === 'time' && def.data[0].length > 1)
      def = {
        ...def,
        data: breakGaps(def.data as Array<Array<number | null>>, gapSeconds(def.data[0] as number[])) as Data,
      };
    const width = Math.max(200, this.plot.clientWidth);
    if (!this.u || this.key !== def.key) {
      this.u?.destroy();
      this.u = new uPlot(this.options(def, width), def.data, this.plot);
      this.key = def.key;
    } else {
      this.u.setData(def.data);
    }
    this.showLatest();
  }

  /** While the cursor is off the plot, the legend shows the latest values. */
  private showLatest(): void {
    const u = this.u;
    if (!u || this.hover || this.bars) return;
    const n = u.data[0]?.length ?? 0;
    if (n > 0) u.setLegend({ idx: n - 1 });
  }

  resize(): void {
    if (!this.u) return;
    const w = Math.max(200, this.plot.clientWidth);
    if (w !== this.u.width) this.u.setSize({ width: w, height: HEIGHT });
  }

  destroy(): void {
    this.u?.destroy();
    this.u = null;
    this.key = '';
  }

  private options(def: ChartDef, width: number): uPlot.Options {
    const axisColor = getComputedStyle(document.documentElement).getPropertyValue('--muted').trim() || '#667';
    const gridColor = getComputedStyle(document.documentElement).getPropertyValue('--grid').trim() || '#e4e6ea';
    const axis = (o: uPlot.Axis): uPlot.Axis => ({
      stroke: axisColor,
      grid: { stroke: gridColor, width: 1 },
      ticks: { stroke: gridColor, width: 1 },
      font: '11px system-ui, sans-serif',
      ...o,
    });
    // The tick labels drawn last, on the chart element (the canvas holds no text to read).
    const ticks = (k: 'xTicks' | 'yTicks', labels: string[]) => {
      this.el.dataset[k] = labels.join('|');
      return labels;
    };
    const xAxis: uPlot.Axis =
      def.x === 'time'
        ? axis({
            space: 80,
            values: (_u, splits, _ax, _space, incr) =>
              ticks(
                'xTicks',
                splits.map((v) => clock(v, incr)),
              ),
          })
        : axis({
            values: (_u, splits) =>
              ticks(
                'xTicks',
                splits.map((v) => (def.xValues ? def.xValues(v) : fmtSI(v))),
              ),
          });
    const size = (_u: uPlot, values: string[] | null) =>
      values?.length ? Math.ceil(Math.max(...values.map((s) => (s ?? '').length)) * 6.6 + 16) : 40;
    const axes: uPlot.Axis[] = [
      xAxis,
      axis({
        size,
        ...(def.yInt ? { incrs: INTEGER_INCRS } : {}),
        values: (_u, splits) =>
          ticks(
            'yTicks',
            splits.map((v) => def.yFmt(v)),
          ),
      }),
    ];
    const scales: uPlot.Scales = {
      x:
        def.x === 'time'
          ? { time: true, range: (u, min, max) => timeRange(u.data[0] as number[], min, max) }
          : { time: false },
    };
    if (def.bars) scales.x = { time: false, range: (_u, min, max) => [min - 0.5, max + 0.5] };
    if (def.yInt) scales.y = { range: (_u, min, max) => [Math.min(0, min), Math.max(1, Math.ceil(max))] };
    if (def.yRight) {
      const f = def.yRight.fmt;
      axes.push(
        axis({ scale: 'r', side: 1, size, grid: { show: false }, values: (_u, splits) => splits.map((v) => f(v)) }),
      );
      scales.r = { auto: true };
    }
    // Off the chart, the legend shows each series' latest value (a late eval loss lands on an
    // older point, so the newest point may have none); on hover, exactly the hovered point.
    const latest =
      (fmt: uPlot.Series.Value | undefined): uPlot.Series.Value =>
      (u, v, si, idx) => {
        let val: number | null = v;
        if ((val === null || val === undefined) && !this.hover && idx !== null) {
          const ys = u.data[si] as Y;
          for (let i = Math.min(idx, ys.length - 1); i >= 0; i--)
            if (isNum(ys[i])) {
              val = ys[i];
              break;
            }
        }
        return typeof fmt === 'function'
          ? fmt(u, val as number, si, idx)
          : val === null || val === undefined
            ? '–'
            : String(val);
      };
    const ys = def.series.map((s) => ({ ...s, value: latest(s.value) }));
    return {
      width,
      height: HEIGHT,
      series: [
        {
          label: def.x === 'time' ? 'time' : def.x === 'tokens' ? 'tokens' : (def.xLabel ?? 'x'),
          value:
            def.x === 'time'
              ? '{HH}:{mm}:{ss}'
              : (_u, v) => (v === null ? '–' : def.xValues ? def.xValues(v) : fmtInt(v)),
        },
        ...ys,
      ],
      axes,
      scales,
      legend: { live: true },
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
    };
  }
}

// ---------------------------------------------------------------- data builders

function xOf(p: HistoryPoint, x: XAxis): number {
  return x === 'time' ? p.time / 1000 : p.totalTokens;
}

/** History points with a non-decreasing x. */
function withX(points: HistoryPoint[], x: XAxis): HistoryPoint[] {
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

const xLabel = (x: XAxis) => (x === 'time' ? 'time' : 'tokens trained');
const WAIT = 'Waiting for the first outer step…';

function lossDef(points: HistoryPoint[], x: XAxis, smooth: number): ChartDef {
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

function throughputDef(points: HistoryPoint[], x: XAxis): ChartDef {
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

function islandsDef(points: HistoryPoint[], x: XAxis): ChartDef {
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

function bytesDef(points: HistoryPoint[], x: XAxis): ChartDef {
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

function versionDef(points: HistoryPoint[], x: XAxis): ChartDef {
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

function stalenessDef(points: HistoryPoint[]): ChartDef {
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

function outcomesDef(points: HistoryPoint[], x: XAxis): ChartDef {
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

// ---------------------------------------------------------------- the panel

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
   * sizes, so nothing moves meanwhile). A budget of 0 builds nothing this frame.
   */
  render(store: Store, x: XAxis, smooth: number, buildBudgetMs = 12): void {
    const sig = `${store.rev.history}/${x}/${smooth}`;
    if (sig === this.seen || this.root.clientWidth === 0) return;
    const t0 = performance.now();
    const pts = store.history;
    const hr = store.rev.history;
    // [id, what the chart depends on, builder]: a chart whose inputs did not change is skipped.
    const defs: Array<[string, string, () => ChartDef]> = [
      ['loss', `${hr}/${x}/${smooth}`, () => lossDef(pts, x, smooth)],
      ['tps', `${hr}/${x}`, () => throughputDef(pts, x)],
      ['islands', `${hr}/${x}`, () => islandsDef(pts, x)],
      ['bytes', `${hr}/${x}`, () => bytesDef(pts, x)],
      ['version', `${hr}/${x}`, () => versionDef(pts, x)],
      ['staleness', `${hr}`, () => stalenessDef(pts)],
      ['outcomes', `${hr}/${x}`, () => outcomesDef(pts, x)],
    ];
    let builds = 0;
    let deferred = false;
    for (const [id, deps, make] of defs) {
      const box = this.byId.get(id)!;
      if (box.deps === deps && !box.needsRebuild) continue;
      const def = make();
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
