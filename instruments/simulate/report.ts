// Report outputs of `atoll simulate`: the terminal table, curves.csv, a self-contained SVG plot
// and an HTML page that embeds both.

import type { EvalPoint, ReportRow, SimReport, SimRunResult } from './types.ts';

const COLORS = [
  '#222222',
  '#888888',
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#17becf',
];

export function fmtBytes(b: number): string {
  if (!Number.isFinite(b)) return '-';
  if (b >= 1e9) return `${(b / 1e9).toFixed(2)} GB`;
  if (b >= 1e6) return `${(b / 1e6).toFixed(2)} MB`;
  if (b >= 1e3) return `${(b / 1e3).toFixed(1)} kB`;
  return `${Math.round(b)} B`;
}

function fmtX(x: number): string {
  if (x === Infinity) return 'no comm';
  if (!Number.isFinite(x)) return '-';
  return x >= 100 ? `${Math.round(x)}×` : `${x.toFixed(1)}×`;
}

function fmtRejected(r: Record<string, number>): string {
  const e = Object.entries(r).filter(([, v]) => v > 0);
  return e.length ? e.map(([k, v]) => `${k.replace(/^E_/, '')}:${v}`).join(' ') : '-';
}

/** A row's eval curve, `[{tokens, evalLoss}]` (a rise inside a run can be read from the JSON). */
export function evalCurve(curve: SimRunResult['curve']): EvalPoint[] {
  return curve.map((p) => ({ tokens: p.tokens, evalLoss: p.evalLoss }));
}

/** The most the eval loss ever stood above its running best, as a fraction (0: it never rose). */
export function maxRise(curve: readonly EvalPoint[]): number {
  let best = Infinity,
    rise = 0;
  for (const p of curve) {
    if (!Number.isFinite(p.evalLoss)) return Infinity;
    best = Math.min(best, p.evalLoss);
    rise = Math.max(rise, p.evalLoss / best - 1);
  }
  return rise;
}

/** A result as a report's row: its figures and its eval curve. */
export function reportRow({ curve, ...rest }: SimRunResult): ReportRow {
  const points = evalCurve(curve);
  return { ...rest, evalCurve: points, maxRise: maxRise(points) };
}

/** The terminal table (plain text, fixed-width columns). */
export function formatTable(runs: Array<Omit<SimRunResult, 'curve'>>): string {
  const ddp = runs.find((r) => r.kind === 'ddp');
  const head = [
    'row',
    'eval loss',
    'vs DDP',
    'tokens',
    'up/island',
    'less up than DDP',
    'down/island',
    'less down',
    'goodput',
    'srv in/tok',
    'srv out/tok',
    'rejected',
    'virt time',
    'real time',
  ];
  const rows = runs.map((r) => [
    r.name,
    Number.isFinite(r.evalLoss)
      ? r.evalLoss.toFixed(4) + (r.evalLossSd > 0 ? ` ± ${r.evalLossSd.toFixed(4)}` : '')
      : 'diverged',
    ddp && Number.isFinite(r.evalLoss) ? `${(r.evalLoss / ddp.evalLoss).toFixed(3)}×` : '-',
    `${(r.tokens / 1000).toFixed(0)}k`,
    fmtBytes(r.bytesUpPerIsland),
    fmtX(r.commReductionVsDdp),
    fmtBytes(r.bytesDownPerIsland),
    ddp && r.kind === 'diloco' ? fmtX(ddp.bytesDownPerIsland / Math.max(1, r.bytesDownPerIsland)) : '-',
    r.goodput.toFixed(3),
    Number.isFinite(r.server?.inPerToken) ? `${r.server.inPerToken.toFixed(2)} B` : '-',
    Number.isFinite(r.server?.outPerToken) ? `${r.server.outPerToken.toFixed(2)} B` : '-',
    fmtRejected(r.rejected),
    `${(r.virtualTimeMs / 1000).toFixed(0)} s`,
    `${(r.realTimeMs / 1000).toFixed(0)} s`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export function curvesCsv(runs: SimRunResult[]): string {
  const lines = ['row,tokens,tokens_computed,time_ms,eval_loss'];
  for (const r of runs)
    for (const p of r.curve)
      lines.push(`${r.name},${p.tokens},${p.tokensComputed},${p.timeMs.toFixed(1)},${p.evalLoss.toFixed(5)}`);
  return lines.join('\n') + '\n';
}

export const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** Two panels: eval loss vs tokens in θ, and vs virtual time. Self-contained SVG. */
export function plotSvg(runs: SimRunResult[], title: string): string {
  const W = 980,
    H = 420,
    panelW = 400,
    panelH = 300,
    top = 50,
    lefts = [70, 545];
  const pts = runs.flatMap((r) => r.curve.filter((p) => Number.isFinite(p.evalLoss)));
  const finite = pts.map((p) => p.evalLoss);
  // the first point (init) is far above the rest: clip the y range to what the runs reach after it
  const later = runs.flatMap((r) =>
    r.curve
      .slice(1)
      .map((p) => p.evalLoss)
      .filter(Number.isFinite),
  );
  const yMin = Math.min(...(later.length ? later : finite)) - 0.05;
  const yMaxRaw = later.length ? Math.max(...later) : Math.max(...finite);
  const yMax = Math.min(yMaxRaw, yMin + 3) + 0.05;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H + 20 * Math.ceil(runs.length / 4)}" ` +
      `font-family="sans-serif" font-size="12">`,
  );
  out.push(`<rect width="100%" height="100%" fill="white"/>`);
  out.push(`<text x="${W / 2}" y="22" text-anchor="middle" font-size="15">${esc(title)}</text>`);
  const panels: Array<{ label: string; x: (p: SimRunResult['curve'][number]) => number; fmt: (v: number) => string }> =
    [
      { label: 'tokens in θ', x: (p) => p.tokens, fmt: (v) => `${Math.round(v / 1000)}k` },
      { label: 'virtual time (s)', x: (p) => p.timeMs / 1000, fmt: (v) => v.toFixed(0) },
    ];
  panels.forEach((panel, pi) => {
    const left = lefts[pi];
    const xs = pts.map(panel.x);
    const xMax = Math.max(1e-9, ...xs);
    const sx = (v: number) => left + (v / xMax) * panelW;
    const sy = (v: number) => top + (1 - (Math.min(yMax, Math.max(yMin, v)) - yMin) / (yMax - yMin)) * panelH;
    out.push(`<rect x="${left}" y="${top}" width="${panelW}" height="${panelH}" fill="none" stroke="#999"/>`);
    for (let k = 0; k <= 4; k++) {
      const yv = yMin + ((yMax - yMin) * k) / 4;
      const xv = (xMax * k) / 4;
      out.push(`<line x1="${left}" x2="${left + panelW}" y1="${sy(yv)}" y2="${sy(yv)}" stroke="#eee"/>`);
      out.push(`<text x="${left - 6}" y="${sy(yv) + 4}" text-anchor="end">${yv.toFixed(2)}</text>`);
      out.push(`<text x="${sx(xv)}" y="${top + panelH + 16}" text-anchor="middle">${panel.fmt(xv)}</text>`);
    }
    out.push(`<text x="${left + panelW / 2}" y="${top + panelH + 34}" text-anchor="middle">${panel.label}</text>`);
    out.push(
      `<text x="${left - 50}" y="${top + panelH / 2}" transform="rotate(-90 ${left - 50} ${top + panelH / 2})" ` +
        `text-anchor="middle">held-out loss</text>`,
    );
    runs.forEach((r, ri) => {
      const path = r.curve
        .filter((p) => Number.isFinite(p.evalLoss))
        .map((p) => `${sx(panel.x(p)).toFixed(1)},${sy(p.evalLoss).toFixed(1)}`)
        .join(' ');
      if (path)
        out.push(`<polyline fill="none" stroke="${COLORS[ri % COLORS.length]}" stroke-width="1.6" points="${path}"/>`);
    });
  });
  runs.forEach((r, ri) => {
    const x = 70 + (ri % 4) * 225,
      y = top + panelH + 58 + 20 * Math.floor(ri / 4);
    out.push(
      `<line x1="${x}" x2="${x + 22}" y1="${y - 4}" y2="${y - 4}" stroke="${COLORS[ri % COLORS.length]}" ` +
        `stroke-width="3"/>`,
    );
    out.push(`<text x="${x + 28}" y="${y}">${esc(r.name)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n');
}

/** A self-contained HTML page: a heading, an introduction (HTML), the plot, the table and the JSON. */
export function htmlPage(title: string, intro: string, svg: string, table: string, json: unknown): string {
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>body{font-family:sans-serif;margin:24px;max-width:1100px}
pre{background:#f6f6f6;padding:12px;overflow-x:auto}</style></head>
<body>
<h1>${esc(title)}</h1>
${intro}
${svg}
<pre>${esc(table)}</pre>
<details><summary>report.json</summary><pre>${esc(JSON.stringify(json, null, 2))}</pre></details>
</body></html>
`;
}

export function reportHtml(report: SimReport, svg: string, table: string): string {
  const c = report.config;
  return htmlPage(
    `atoll simulate — ${c.preset}`,
    `<p>Model <b>${esc(c.model)}</b> (${c.params.toLocaleString()} parameters), sequence length ${c.seqLen},
${c.tokens.toLocaleString()} tokens per row, seed ${c.seed}. Virtual time: a speed-1 island trains
${c.baseTokensPerSec} tokens/s. Real time ${(c.realTimeMs / 1000).toFixed(0)} s on ${c.workers} worker(s).</p>`,
    svg,
    table,
    report,
  );
}
