// One overview chart (uPlot) in a fixed-height box, so data arriving never moves the layout: its series are
// rebuilt only when their set changes (a ChartDef's key), otherwise setData(). The palettes the charts share.

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { INTEGER_INCRS, breakGaps, clock, gapSeconds, timeRange } from './axes.ts';
import { h, setText } from './dom.ts';
import { fmtInt, fmtSI, isNum } from './format.ts';
import type { Marker } from './markers.ts';

type Data = uPlot.AlignedData;
export type Y = Array<number | null>;

export const PALETTE = ['#2f6f9f', '#c2772b', '#3f8f5a', '#8a5aa8', '#b5474b', '#5f7f8c', '#9a8a3a', '#d06fa0'];
export const PALE = ['#a9c6dc', '#ebc9a4', '#b1d6bc', '#d2bfe0', '#e6b1b3', '#bccbd1', '#dcd3a5', '#efc1d9'];

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
  /** A logarithmic y axis (values ≤ 0 are not drawn). */
  yLog?: boolean;
  /** The run's config changes on this x axis: a dashed line each, the change in its tooltip. */
  markers?: Marker[];
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
  private markers: Marker[] = [];
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
    this.el.dataset.yScale = def.yLog ? 'log' : 'linear';
    this.markers = def.markers ?? [];
    this.el.dataset.markers = this.markers.map((m) => m.version).join(',');
    // each series' newest value, as drawn (label:value|…)
    this.el.dataset.latest = def.series
      .map((s, i) => {
        const ys = def.data[i + 1] as Y;
        let v: number | null = null;
        for (let j = ys.length - 1; j >= 0 && v === null; j--) if (isNum(ys[j])) v = ys[j];
        return `${s.label}:${v ?? ''}`;
      })
      .join('|');
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

  /** The markers as thin dashed lines over the plot, each with its change as a tooltip (title). */
  private placeMarkers(u: uPlot): void {
    const over = u.over;
    const els = [...over.querySelectorAll<HTMLElement>('.cfg-marker')];
    const [min, max] = [u.scales.x.min ?? -Infinity, u.scales.x.max ?? Infinity];
    const shown = this.markers.filter((m) => m.x >= min && m.x <= max);
    for (let i = 0; i < Math.max(els.length, shown.length); i++) {
      const m = shown[i];
      if (!m) {
        els[i].remove();
        continue;
      }
      const el = els[i] ?? over.appendChild(h('div', { class: 'cfg-marker', role: 'img' }));
      el.style.left = `${u.valToPos(m.x, 'x')}px`;
      el.title = m.label;
      el.dataset.version = String(m.version);
      el.setAttribute('aria-label', `config change ${m.label}`);
    }
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
            // a log axis hides some splits as null
            splits.map((v) => (v === null || v === undefined ? '' : def.yFmt(v))),
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
    if (def.yLog) scales.y = { distr: 3, log: 10 };
    if (def.yRight) {
      const f = def.yRight.fmt;
      axes.push(
        axis({
          scale: 'r',
          side: 1,
          size,
          grid: { show: false },
          values: (_u, splits) => splits.map((v) => (v == null ? '' : f(v))),
        }),
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
      hooks: { draw: [(u) => this.placeMarkers(u)] },
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
    };
  }
}
