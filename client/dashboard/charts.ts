// The overview charts (uPlot). Each chart is a fixed-height box, so data arriving
// never moves the layout; its series are rebuilt only when their set changes
// (new engine type, new rejection code, x-axis toggle), otherwise setData().

import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { h, setText } from './dom.ts';
import { fmtBytes, fmtInt, fmtLoss, fmtRatio, fmtSI, isNum } from './format.ts';
import { type HistoryPoint, runParams } from './model.ts';
import type { Store } from './store.ts';
import type { XAxis } from './url.ts';

type Data = uPlot.AlignedData;
type Y = Array<number | null>;

export const PALETTE = ['#2f6f9f', '#c2772b', '#3f8f5a', '#8a5aa8', '#b5474b', '#5f7f8c', '#9a8a3a', '#d06fa0'];
const PALE = ['#a9c6dc', '#ebc9a4', '#b1d6bc', '#d2bfe0', '#e6b1b3', '#bccbd1', '#dcd3a5', '#efc1d9'];

interface ChartDef {
  /** Structure key: when it changes the uPlot instance is rebuilt. */
  key: string;
  series: uPlot.Series[];
  data: Data;
  x: 'time' | 'tokens' | 'linear';
  yRight?: { label: string; fmt: (v: number) => string };
  yFmt: (v: number) => string;
  bars?: boolean;
  xValues?: (v: number) => string;
  xLabel?: string;
  /** Message shown over the chart instead of data. */
  empty: string | null;
  note?: string;
}

const HEIGHT = 190;

class ChartBox {
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

  constructor(readonly id: string, title: string) {
    this.plot = h('div', { class: 'plot', style: `height:${HEIGHT + 48}px` });
    this.emptyEl = h('div', { class: 'plot-empty', hidden: true });
    this.noteEl = h('p', { class: 'chart-note' });
    this.el = h('section', { class: 'chart', id: `chart-${id}`, 'data-chart': id, 'aria-label': title },
      h('h3', {}, title), h('div', { class: 'plot-wrap' }, this.plot, this.emptyEl), this.noteEl);
    this.plot.addEventListener('mouseenter', () => { this.hover = true; });
    this.plot.addEventListener('mouseleave', () => { this.hover = false; requestAnimationFrame(() => this.showLatest()); });
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
    const axis = (o: uPlot.Axis): uPlot.Axis => ({ stroke: axisColor, grid: { stroke: gridColor, width: 1 }, ticks: { stroke: gridColor, width: 1 }, font: '11px system-ui, sans-serif', ...o });
    const xAxis: uPlot.Axis = def.x === 'time'
      ? axis({ values: (_u, splits, _ax, _space, incr) => splits.map((v) => clock(v, incr)) })
      : axis({ values: (_u, splits) => splits.map((v) => (def.xValues ? def.xValues(v) : fmtSI(v))) });
    const size = (_u: uPlot, values: string[] | null) => (values && values.length ? Math.ceil(Math.max(...values.map((s) => (s ?? '').length)) * 6.6 + 16) : 40);
    const axes: uPlot.Axis[] = [xAxis, axis({ size, values: (_u, splits) => splits.map((v) => def.yFmt(v)) })];
    const scales: uPlot.Scales = { x: { time: def.x === 'time' } };
    if (def.bars) scales.x = { time: false, range: (_u, min, max) => [min - 0.5, max + 0.5] };
    if (def.yRight) {
      const f = def.yRight.fmt;
      axes.push(axis({ scale: 'r', side: 1, size, grid: { show: false }, values: (_u, splits) => splits.map((v) => f(v)) }));
      scales.r = { auto: true };
    }
    // Off the chart, the legend shows each series' latest value (a late eval loss lands on an
    // older point, so the newest point may have none); on hover, exactly the hovered point.
    const latest = (fmt: uPlot.Series.Value | undefined): uPlot.Series.Value => (u, v, si, idx) => {
      let val: number | null = v;
      if ((val === null || val === undefined) && !this.hover && idx !== null) {
        const ys = u.data[si] as Y;
        for (let i = Math.min(idx, ys.length - 1); i >= 0; i--) if (isNum(ys[i])) { val = ys[i]; break; }
      }
      return typeof fmt === 'function' ? fmt(u, val as number, si, idx) : val === null || val === undefined ? '–' : String(val);
    };
    const ys = def.series.map((s) => ({ ...s, value: latest(s.value) }));
    return {
      width,
      height: HEIGHT,
      series: [{ label: def.x === 'time' ? 'time' : def.x === 'tokens' ? 'tokens' : def.xLabel ?? 'x', value: def.x === 'time' ? '{HH}:{mm}:{ss}' : (_u, v) => (v === null ? '–' : def.xValues ? def.xValues(v) : fmtInt(v)) }, ...ys],
      axes,
      scales,
      legend: { live: true },
      cursor: { drag: { x: true, y: false }, points: { size: 6 } },
    };
  }
}

/** One-line time-axis label: HH:MM:SS for sub-minute ticks, HH:MM within a day, else MM-DD. */
function clock(sec: number, incr: number): string {
  const d = new Date(sec * 1000);
  const p = (n: number) => String(n).padStart(2, '0');
  if (incr >= 86_400) return `${p(d.getMonth() + 1)}-${p(d.getDate())}`;
  if (incr >= 60) return `${p(d.getHours())}:${p(d.getMinutes())}`;
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// ---------------------------------------------------------------- data builders

function xOf(p: HistoryPoint, x: XAxis): number | null {
  return x === 'time' ? (p.time !== null ? p.time / 1000 : null) : p.tokens;
}

/** History points that have a usable, non-decreasing x. */
function withX(points: HistoryPoint[], x: XAxis): HistoryPoint[] {
  const out: HistoryPoint[] = [];
  let last = -Infinity;
  for (const p of points) {
    const v = xOf(p, x);
    if (v === null || v < last) continue;
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

/** Is the (non-null part of the) series non-decreasing, i.e. a running total? */
function isCumulative(ys: Y): boolean {
  let last = -Infinity;
  let seen = 0;
  for (const v of ys) {
    if (!isNum(v)) continue;
    if (v < last) return false;
    last = v;
    seen++;
  }
  return seen > 1;
}

function cumulate(ys: Y): Y {
  let s = 0;
  return ys.map((v) => (isNum(v) ? (s += v) : null));
}

/** Per-second rate of a running total, against time in ms. */
function rate(cum: Y, times: Array<number | null>): Y {
  const out: Y = [];
  let pv: number | null = null;
  let pt: number | null = null;
  for (let i = 0; i < cum.length; i++) {
    const v = cum[i];
    const t = times[i];
    if (isNum(v) && isNum(t) && isNum(pv) && isNum(pt) && t > pt) out.push(Math.max(0, (v - pv) / ((t - pt) / 1000)));
    else out.push(null);
    if (isNum(v) && isNum(t)) { pv = v; pt = t; }
  }
  return out;
}

/** Per-second rate of a running total over a trailing window (ms) ending at each point. */
function windowRate(cum: Y, times: Array<number | null>, windowMs: number): Y {
  const out: Y = [];
  let j = 0;
  for (let i = 0; i < cum.length; i++) {
    const v = cum[i], t = times[i];
    if (!isNum(v) || !isNum(t)) { out.push(null); continue; }
    while (j < i && (!isNum(times[j]) || !isNum(cum[j]) || t - (times[j] as number) > windowMs)) j++;
    // at least the previous point, even when it is older than the window
    let k = Math.min(j, i - 1);
    while (k >= 0 && (!isNum(times[k]) || !isNum(cum[k]))) k--;
    const tk = k >= 0 ? (times[k] as number) : null;
    out.push(k >= 0 && tk !== null && t > tk ? Math.max(0, (v - (cum[k] as number)) / ((t - tk) / 1000)) : null);
  }
  return out;
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
    data: [ps.map((p) => xOf(p, x) as number), train, ema(train, smooth), evalL],
    series: [
      { label: 'train (raw)', stroke: '#b8c7d6', width: 1, value: (_u, v) => fmtLoss(v), spanGaps: true, points: { show: false } },
      { label: smooth > 0 ? `train (EMA ${smooth})` : 'train', stroke: PALETTE[0], width: 2, value: (_u, v) => fmtLoss(v), spanGaps: true, points: { show: false } },
      { label: 'eval (global model)', stroke: PALETTE[1], width: 2, value: (_u, v) => fmtLoss(v), spanGaps: true, points: { show: true, size: 5 } },
    ],
    yFmt: (v) => v.toFixed(2),
    empty: ps.length === 0 ? WAIT : hasAny ? null : 'No loss reported yet',
    note: `Train loss as reported by islands (averaged per outer step), eval loss of the global model on the held-out split; x = ${xLabel(x)}.`,
  };
}

function throughputDef(store: Store, x: XAxis): ChartDef {
  const hist = withX(store.history, x);
  const histHasEngines = hist.some((p) => p.byEngine && Object.keys(p.byEngine).length > 0);
  // Total from history: the server's figure, else tokens over the trailing minute (as the
  // server computes the headline tokens/s), so the chart and the headline agree.
  const tot: Y = windowRate(hist.map((p) => p.tokens), hist.map((p) => p.time), 60_000).map((r, i) => hist[i].tokensPerSec ?? r);
  let engines: string[] = [];
  let table: Data;
  let note: string;
  if (histHasEngines) {
    const set = new Set<string>();
    for (const p of hist) for (const k of Object.keys(p.byEngine ?? {})) set.add(k);
    engines = [...set].sort();
    table = [hist.map((p) => xOf(p, x) as number), tot, ...engines.map((e) => hist.map((p) => p.byEngine?.[e] ?? null))];
    note = 'Accepted tokens/s, stacked by engine type.';
  } else {
    const set = new Set<string>();
    for (const s of store.samples) for (const k of Object.keys(s.byEngine)) set.add(k);
    engines = [...set].sort();
    const ss = store.samples.filter((s) => (x === 'time' ? true : s.tokens !== null));
    const histT: Data = [hist.map((p) => xOf(p, x) as number), tot];
    const sampT: Data = [ss.map((s) => (x === 'time' ? s.t / 1000 : (s.tokens as number))), ...engines.map((e) => ss.map((s) => s.byEngine[e] ?? 0))];
    table = engines.length ? uPlot.join([histT, sampT]) : histT;
    note = 'Total: tokens into θ per second over the trailing minute. Stack by engine: islands\u2019 measured speeds scaled to that total, sampled since this page opened.';
  }
  // stack: series i (engine i) shows the sum of engines i..n-1, drawn bottom-last so each fill covers the ones above.
  const raw = table.slice(2) as Y[];
  const n = table[0].length;
  const stacked: Y[] = raw.map(() => new Array(n).fill(null));
  for (let j = 0; j < n; j++) {
    let acc = 0;
    let any = false;
    for (let i = raw.length - 1; i >= 0; i--) {
      const v = raw[i][j];
      if (isNum(v)) { acc += v; any = true; }
      stacked[i][j] = any ? acc : null;
    }
  }
  const series: uPlot.Series[] = [
    { label: 'total', stroke: () => getComputedStyle(document.documentElement).getPropertyValue('--text').trim() || '#333', width: 1.5, value: (_u, v) => fmtSI(v, ' tok/s'), spanGaps: true, points: { show: false } },
    ...engines.map((e, i): uPlot.Series => ({
      label: e,
      stroke: PALETTE[(i + 2) % PALETTE.length],
      fill: PALE[(i + 2) % PALE.length],
      width: 1,
      spanGaps: true,
      points: { show: false },
      value: (_u, _v, _si, idx) => (idx === null ? '–' : fmtSI(raw[i][idx], ' tok/s')),
    })),
  ];
  // uPlot draws in order: put the stacks first (bottom-most engine last) and the total on top.
  const order = engines.map((_, i) => i);
  const data: Data = [table[0], ...order.map((i) => stacked[i]), table[1]];
  const ordered = [...order.map((i) => series[1 + i]), series[0]];
  const hasData = (table[1] as Y).some(isNum) || stacked.some((s) => s.some(isNum));
  return {
    key: `tps/${x}/${histHasEngines}/${engines.join(',')}`,
    x,
    data,
    series: ordered,
    yFmt: (v) => fmtSI(v),
    empty: n === 0 ? WAIT : hasData ? null : 'No throughput measured yet',
    note,
  };
}

function islandsDef(store: Store, x: XAxis): ChartDef {
  const ps = withX(store.history, x);
  const fromHistory = ps.some((p) => p.islandsOnline !== null);
  const contributors: Y = ps.map((p) => p.contributors);
  const hasContrib = contributors.some(isNum);
  let data: Data;
  let note: string;
  if (fromHistory || store.samples.length === 0) {
    data = [ps.map((p) => xOf(p, x) as number), ps.map((p) => p.islandsOnline), ...(hasContrib ? [contributors] : [])];
    note = hasContrib ? 'Contributors: islands whose Δ went into each outer update.' : '';
  } else {
    // The server's history has no online count: count from the live islands list, since this page opened.
    const ss = store.samples.filter((s) => (x === 'time' ? true : s.tokens !== null));
    const live: Data = [ss.map((s) => (x === 'time' ? s.t / 1000 : (s.tokens as number))), ss.map((s) => s.online)];
    data = hasContrib ? uPlot.join([live, [ps.map((p) => xOf(p, x) as number), contributors]]) : live;
    note = `Online: counted from the islands list since this page opened.${hasContrib ? ' Contributors: islands whose Δ went into each outer update.' : ''}`;
  }
  const series: uPlot.Series[] = [
    { label: 'online', stroke: PALETTE[2], fill: 'rgba(63,143,90,0.12)', width: 2, paths: uPlot.paths.stepped?.({ align: 1 }), value: (_u, v) => fmtInt(v), spanGaps: true, points: { show: false } },
  ];
  if (hasContrib) series.push({ label: 'contributors / update', stroke: PALETTE[0], width: 1.5, paths: uPlot.paths.stepped?.({ align: 1 }), value: (_u, v) => fmtInt(v), spanGaps: true, points: { show: false } });
  const any = (data.slice(1) as Y[]).some((ys) => ys.some(isNum));
  return {
    key: `islands/${x}/${fromHistory}/${hasContrib}`,
    x,
    data,
    series,
    yFmt: (v) => fmtInt(v),
    empty: data[0].length === 0 ? 'No islands yet' : any ? null : 'No island counts yet',
    note,
  };
}

/**
 * Do these per-point byte counts look like a running total rather than per-version amounts?
 * With the server's total at hand: whichever reading lands nearer to it. Without: strictly increasing.
 */
function looksCumulative(ys: Y, total: number | null): boolean {
  if (!isCumulative(ys)) return false;
  const nums = ys.filter(isNum);
  const last = nums[nums.length - 1];
  const sum = nums.reduce((a, b) => a + b, 0);
  if (isNum(total) && total > 0) return Math.abs(last - total) < Math.abs(sum - total);
  for (let i = 1; i < nums.length; i++) if (nums[i] <= nums[i - 1]) return false;
  return nums.length > 2;
}

function bytesDef(store: Store, x: XAxis): ChartDef {
  const ps = withX(store.history, x);
  const times = ps.map((p) => p.time);
  let cin: Y = ps.map((p) => p.bytesIn);
  let cout: Y = ps.map((p) => p.bytesOut);
  if (!looksCumulative(cin, store.status?.bytesIn ?? null)) cin = cumulate(cin);
  if (!looksCumulative(cout, store.status?.bytesOut ?? null)) cout = cumulate(cout);
  const up = rate(cin, times);
  const down = rate(cout, times);
  // Compression: the server's per-version figure (f32 bytes of counted Δs ÷ their frame bytes),
  // else fp32 bytes of every Δ received so far ÷ bytes that came in.
  let ratio: Y | null = null;
  let ratioHow = '';
  if (ps.some((p) => p.compressionRatio !== null)) {
    ratio = ps.map((p) => p.compressionRatio);
    ratioHow = 'Compression: fp32 bytes of the accepted Δs ÷ their frame bytes, per version.';
  } else {
    const nParams = store.run ? runParams(store.run) : null;
    if (nParams) {
      let deltas = 0;
      ratio = ps.map((p, i) => {
        deltas += (p.accepted ?? 0) + Object.values(p.rejectedByCode ?? {}).reduce((a, b) => a + b, 0);
        const b = cin[i];
        return isNum(b) && b > 0 && deltas > 0 ? (deltas * 4 * nParams) / b : null;
      });
      ratioHow = 'Compression: fp32 bytes of every Δ received ÷ bytes received, so far.';
    }
  }
  const series: uPlot.Series[] = [
    { label: 'up (islands → server)', stroke: PALETTE[0], width: 2, value: (_u, v) => (isNum(v) ? `${fmtBytes(v)}/s` : '–'), spanGaps: true, points: { show: false } },
    { label: 'down (server → islands)', stroke: PALETTE[3], width: 2, value: (_u, v) => (isNum(v) ? `${fmtBytes(v)}/s` : '–'), spanGaps: true, points: { show: false } },
  ];
  const data: Data = [ps.map((p) => xOf(p, x) as number), up, down];
  if (ratio) {
    series.push({ label: 'compression', scale: 'r', stroke: PALETTE[6], width: 1.5, dash: [4, 3], value: (_u, v) => fmtRatio(v), spanGaps: true, points: { show: false } });
    data.push(ratio);
  }
  const any = up.some(isNum) || down.some(isNum);
  return {
    key: `bytes/${x}/${!!ratio}`,
    x,
    data,
    series,
    yFmt: (v) => fmtBytes(v),
    yRight: ratio ? { label: 'ratio', fmt: (v) => `${v.toPrecision(3)}×` } : undefined,
    empty: ps.length === 0 ? WAIT : any ? null : 'No traffic measured yet',
    note: `Bytes/s between outer steps (delta frames up, update frames down). ${ratioHow}`,
  };
}

function versionDef(points: HistoryPoint[], x: XAxis): ChartDef {
  const ps = withX(points, x);
  return {
    key: `version/${x}`,
    x,
    data: [ps.map((p) => xOf(p, x) as number), ps.map((p) => p.version)],
    series: [{ label: 'outer version', stroke: PALETTE[4], width: 2, paths: uPlot.paths.stepped?.({ align: 1 }), value: (_u, v) => fmtInt(v), points: { show: false } }],
    yFmt: (v) => fmtInt(v),
    empty: ps.length === 0 ? WAIT : null,
  };
}

function stalenessDef(points: HistoryPoint[]): ChartDef {
  const counts = new Map<number, number>();
  for (const p of points) {
    for (const [k, v] of Object.entries(p.staleness ?? {})) {
      const t = Number(k);
      if (Number.isInteger(t) && t >= 0) counts.set(t, (counts.get(t) ?? 0) + v);
    }
  }
  // Buckets up to the largest staleness seen (at least τ = 0..2, for scale); the server's last
  // bucket collects everything at or above it.
  let max = -1;
  for (const [t, c] of counts) if (c > 0 && t > max) max = t;
  const lastBucket = counts.size ? Math.max(...counts.keys()) : -1;
  if (max >= 0) max = Math.max(max, Math.min(2, lastBucket));
  const xs: number[] = [];
  const ys: Y = [];
  for (let t = 0; t <= max; t++) { xs.push(t); ys.push(counts.get(t) ?? 0); }
  const total = ys.reduce<number>((a, b) => a + (b ?? 0), 0);
  return {
    key: 'staleness',
    x: 'linear',
    bars: true,
    data: [xs, ys],
    series: [{ label: 'accepted Δs', stroke: PALETTE[0], fill: PALE[0], width: 1, paths: uPlot.paths.bars?.({ size: [0.7, 60] }), value: (_u, v) => fmtInt(v), points: { show: false } }],
    xValues: (v) => (Number.isInteger(v) ? (v === lastBucket && lastBucket > 2 ? `τ≥${v}` : `τ=${v}`) : ''),
    xLabel: 'staleness',
    yFmt: (v) => fmtInt(v),
    empty: total === 0 ? 'No accepted deltas yet' : null,
    note: total ? `${fmtInt(total)} accepted Δs by staleness τ = version at apply − base version.` : '',
  };
}

function outcomesDef(points: HistoryPoint[], x: XAxis): ChartDef {
  const ps = withX(points, x);
  const codes = new Set<string>();
  for (const p of ps) for (const k of Object.keys(p.rejectedByCode ?? {})) codes.add(k);
  const list = [...codes].sort();
  let acc = 0;
  const accepted: Y = ps.map((p) => (acc += p.accepted ?? 0));
  const byCode: Y[] = list.map((c) => { let s = 0; return ps.map((p) => (s += p.rejectedByCode?.[c] ?? 0)); });
  const totals = list.map((c, i) => `${c} ${fmtInt(byCode[i][byCode[i].length - 1])}`);
  return {
    key: `outcomes/${x}/${list.join(',')}`,
    x,
    data: [ps.map((p) => xOf(p, x) as number), accepted, ...byCode],
    series: [
      { label: 'accepted', stroke: PALETTE[2], width: 2, value: (_u, v) => fmtInt(v), points: { show: false } },
      ...list.map((c, i): uPlot.Series => ({ label: `rejected ${c}`, stroke: PALETTE[(i + 4) % PALETTE.length], width: 1.5, dash: [5, 3], value: (_u, v) => fmtInt(v), points: { show: false } })),
    ],
    yFmt: (v) => fmtSI(v),
    empty: ps.length === 0 ? WAIT : null,
    note: ps.length ? `Cumulative. Accepted ${fmtInt(acc)}${list.length ? '; rejected: ' + totals.join(', ') : '; none rejected'}.` : '',
  };
}

// ---------------------------------------------------------------- the panel

export class Charts {
  private boxes: ChartBox[] = [];
  private byId = new Map<string, ChartBox>();
  private seen = '';
  private ro: ResizeObserver;

  /** `requestRender`: called when some charts were left for the next frame (creation is staged). */
  constructor(private root: HTMLElement, private requestRender: () => void = () => {}) {
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
      raf = requestAnimationFrame(() => { for (const b of this.boxes) b.resize(); });
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
    const sig = `${store.rev.history}/${store.rev.samples}/${store.rev.run}/${x}/${smooth}`;
    if (sig === this.seen || this.root.clientWidth === 0) return;
    const t0 = performance.now();
    const pts = store.history;
    const { history: hr, samples: sr, run: rr } = store.rev;
    // [id, what the chart depends on, builder]: a chart whose inputs did not change is skipped.
    const defs: Array<[string, string, () => ChartDef]> = [
      ['loss', `${hr}/${x}/${smooth}`, () => lossDef(pts, x, smooth)],
      ['tps', `${hr}/${sr}/${x}`, () => throughputDef(store, x)],
      ['islands', `${hr}/${sr}/${x}`, () => islandsDef(store, x)],
      ['bytes', `${hr}/${rr}/${x}`, () => bytesDef(store, x)],
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
        if (buildBudgetMs <= 0 || (builds > 0 && performance.now() - t0 > buildBudgetMs)) { deferred = true; continue; }
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

