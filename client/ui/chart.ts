// A small live line chart on uPlot: append points, it redraws at most once per
// animation frame and follows its container's width. Generic (x = step or time).

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export interface SeriesSpec {
  label: string;
  /** CSS color; default a palette color. */
  stroke?: string;
  width?: number;
  /** Draw points only (for sparse series such as evals). */
  points?: boolean;
}

export interface LiveChartOptions {
  /** Accessible name of the chart (aria-label of its container). */
  title: string;
  xLabel?: string;
  yLabel?: string;
  series: SeriesSpec[];
  /** Height in CSS px (the container reserves it up front, so nothing jumps). */
  height?: number;
  /** Keep at most this many points (oldest dropped). Default 5000. */
  maxPoints?: number;
  /** x axis is a time axis (x in seconds since epoch). Default false. */
  time?: boolean;
  /** Log-scale y axis. */
  logY?: boolean;
  /** x takes integer values only (steps, versions): no fractional ticks. */
  integerX?: boolean;
}

const INTEGER_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6];

const PALETTE = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#0891b2'];

export class LiveChart {
  readonly element: HTMLElement;
  private readonly plot: uPlot;
  private readonly xs: number[] = [];
  private readonly ys: Array<Array<number | null>>;
  private readonly maxPoints: number;
  private frame = 0;
  private readonly resize: ResizeObserver;

  constructor(container: HTMLElement, opts: LiveChartOptions) {
    const height = opts.height ?? 180;
    this.maxPoints = opts.maxPoints ?? 5000;
    this.element = container;
    container.classList.add('live-chart');
    container.setAttribute('role', 'img');
    container.setAttribute('aria-label', opts.title);
    container.style.minHeight = `${height}px`;
    this.ys = opts.series.map(() => []);
    const css = getComputedStyle(container);
    const axisColor = css.getPropertyValue('--chart-axis').trim() || '#6b7280';
    const gridColor = css.getPropertyValue('--chart-grid').trim() || 'rgba(127,127,127,0.15)';
    const axis = (label?: string): uPlot.Axis => ({
      label,
      stroke: axisColor,
      grid: { stroke: gridColor, width: 1 },
      ticks: { stroke: gridColor, width: 1 },
      font: '11px system-ui, sans-serif',
      labelFont: '11px system-ui, sans-serif',
      labelSize: label ? 16 : 0,
    });
    this.plot = new uPlot(
      {
        width: Math.max(200, container.clientWidth || 300),
        height,
        legend: { show: opts.series.length > 1 },
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: !!opts.time }, y: opts.logY ? { distr: 3 } : { auto: true } },
        axes: [{ ...axis(opts.xLabel), ...(opts.integerX ? { incrs: INTEGER_INCRS } : {}) }, axis(opts.yLabel)],
        series: [
          { label: opts.xLabel ?? 'x' },
          ...opts.series.map((s, i) => ({
            label: s.label,
            stroke: s.stroke ?? PALETTE[i % PALETTE.length],
            width: s.width ?? 1.5,
            spanGaps: true,
            points: { show: !!s.points, size: 5 },
            ...(s.points ? { paths: () => null } : {}),
          })),
        ],
      },
      [[], ...opts.series.map(() => [])],
      container,
    );
    this.resize = new ResizeObserver(() => {
      const w = container.clientWidth;
      if (w > 0 && Math.abs(w - this.plot.width) > 1) this.plot.setSize({ width: w, height });
    });
    this.resize.observe(container);
  }

  /** Appends one x with a y per series (null where a series has no value at x). */
  push(x: number, ...y: Array<number | null>): void {
    this.xs.push(x);
    this.ys.forEach((arr, i) => arr.push(y[i] ?? null));
    if (this.xs.length > this.maxPoints) {
      const drop = this.xs.length - this.maxPoints;
      this.xs.splice(0, drop);
      for (const arr of this.ys) arr.splice(0, drop);
    }
    this.schedule();
  }

  /** Replaces all data. */
  set(xs: number[], ...ys: Array<Array<number | null>>): void {
    this.xs.length = 0;
    this.xs.push(...xs);
    this.ys.forEach((arr, i) => {
      arr.length = 0;
      arr.push(...(ys[i] ?? xs.map(() => null)));
    });
    this.schedule();
  }

  get length(): number {
    return this.xs.length;
  }

  private schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.plot.setData([this.xs, ...this.ys] as uPlot.AlignedData);
    });
  }

  destroy(): void {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.resize.disconnect();
    this.plot.destroy();
  }
}
