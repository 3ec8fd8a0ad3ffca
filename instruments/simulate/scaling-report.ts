// Report outputs of the scaling ladder: a table per rung, the power-law fits, the verdict, and an
// SVG of eval loss against training FLOPs (log–log) with each row's fitted line.

import { fmtBytes } from './report.ts';
import type { GPTConfig } from '../../core/model/config.ts';
import type { OuterConfig } from '../../core/coord/outer.ts';
import type { SimEngineKind } from './engines.ts';
import type { SimRunResult } from './types.ts';

/** One row of a rung: the compare preset's row fields plus its training compute. */
export type ScalingRow = Omit<SimRunResult, 'curve'> & {
  flops: number;
  vsDdp: number;
  lessDownThanDdp: number;
  lr: number;
  innerSteps?: number;
};

export interface ScalingRung {
  name: string;
  config: GPTConfig;
  params: number;
  flopsPerToken: number;
  tokens: number;
  /** H of the islands' nominal (fastest) island at this rung. */
  innerSteps: number;
  warmStart: { tokens: number; evalLoss: number };
  /** The sweep's DDP rows: peak lr and eval loss; `ddp` is the best of them. */
  ddpSweep: Array<{ lr: number; evalLoss: number }>;
  ddpLr: number;
  rows: ScalingRow[];
}

export interface ScalingReport {
  config: {
    preset: 'scaling-v1';
    tokensPerParam: number;
    outerRounds: number;
    lrSweep: number[];
    globalBatch: number;
    seqLen: number;
    hRule: string;
    /** The islands' outer optimizer (Nesterov lr, momentum). */
    outer: OuterConfig;
    data: string;
    seed: number;
    workers: number;
    engine: SimEngineKind;
    realTimeMs: number;
    cpuTimeMs: number;
  };
  rungs: ScalingRung[];
  /** Per row name: eval loss ≈ a · C^−b over the rungs (C = training FLOPs). */
  fits: Array<{ row: string; a: number; b: number }>;
  verdict: {
    word: 'narrows' | 'holds' | 'widens';
    sentence: string;
    ratios: Array<{ rung: string; row: string; ratio: number }>;
  };
}

/** Least squares of log L = log a − b log C: eval loss ≈ a · C^−b. */
export function fitPowerLaw(points: Array<[number, number]>): { a: number; b: number } {
  const p = points.filter(([c, l]) => c > 0 && l > 0 && Number.isFinite(l));
  if (p.length < 2) return { a: NaN, b: NaN };
  const xs = p.map(([c]) => Math.log(c)),
    ys = p.map(([, l]) => Math.log(l));
  const mx = xs.reduce((s, x) => s + x, 0) / xs.length,
    my = ys.reduce((s, y) => s + y, 0) / ys.length;
  let sxy = 0,
    sxx = 0;
  for (let i = 0; i < xs.length; i++) {
    sxy += (xs[i] - mx) * (ys[i] - my);
    sxx += (xs[i] - mx) ** 2;
  }
  const slope = sxx > 0 ? sxy / sxx : 0;
  return { a: Math.exp(my - slope * mx), b: -slope };
}

/** A change in the ratio to DDP smaller than this between the first and the last rung "holds". */
export const HOLD_TOLERANCE = 0.005;

/**
 * Narrows, holds or widens: each island row's eval-loss ratio to the tuned DDP at the smallest rung
 * against the largest. Widens if any row's ratio grows by more than HOLD_TOLERANCE, narrows if every
 * row's falls by more, holds otherwise.
 */
export function verdictOf(rungs: ScalingRung[], islandRows: string[]): ScalingReport['verdict'] {
  const ratios = rungs.flatMap((g) =>
    islandRows.map((row) => ({ rung: g.name, row, ratio: g.rows.find((r) => r.name === row)?.vsDdp ?? NaN })),
  );
  const first = rungs[0],
    last = rungs[rungs.length - 1];
  const at = (g: ScalingRung, row: string) => ratios.find((r) => r.rung === g.name && r.row === row)!.ratio;
  const deltas = islandRows.map((row) => at(last, row) - at(first, row));
  const word: ScalingReport['verdict']['word'] = deltas.some((d) => !(d <= HOLD_TOLERANCE))
    ? 'widens'
    : deltas.every((d) => d < -HOLD_TOLERANCE)
      ? 'narrows'
      : 'holds';
  const parts = islandRows.map(
    (row) => `${row.replace('islands-', '')} islands ${at(first, row).toFixed(3)}× → ${at(last, row).toFixed(3)}×`,
  );
  const sentence =
    `From ${first.name} (${first.params.toLocaleString('en-US')} parameters) to ` +
    `${last.name} (${last.params.toLocaleString('en-US')}), the islands' gap to the tuned DDP ${word}: ` +
    `${parts.join(', ')} its eval loss.`;
  return { word, sentence, ratios };
}

const fmtX = (x: number) =>
  x === Infinity ? 'no comm' : !Number.isFinite(x) ? '-' : x >= 100 ? `${Math.round(x)}×` : `${x.toFixed(1)}×`;

/** One table per rung, then the fits and the verdict (plain text). */
export function scalingTable(report: ScalingReport): string {
  const out: string[] = [];
  for (const g of report.rungs) {
    out.push(
      `${g.name}: ${g.params.toLocaleString('en-US')} params, ${g.tokens.toLocaleString('en-US')} tokens, H ` +
        `${g.innerSteps}, DDP lr ${g.ddpLr} (sweep ` +
        `${g.ddpSweep.map((s) => `${s.lr}: ${s.evalLoss.toFixed(4)}`).join(', ')})`,
    );
    const head = [
      'row',
      'lr',
      'eval loss',
      'vs DDP',
      'FLOPs',
      'up/island',
      'less up',
      'down/island',
      'less down',
      'goodput',
      'virt time',
      'real time',
    ];
    const rows = g.rows.map((r) => [
      r.name,
      String(r.lr),
      Number.isFinite(r.evalLoss) ? r.evalLoss.toFixed(4) : 'diverged',
      `${r.vsDdp.toFixed(3)}×`,
      r.flops.toExponential(2),
      fmtBytes(r.bytesUpPerIsland),
      fmtX(r.commReductionVsDdp),
      fmtBytes(r.bytesDownPerIsland),
      fmtX(r.lessDownThanDdp),
      r.goodput.toFixed(3),
      `${(r.virtualTimeMs / 1000).toFixed(0)} s`,
      `${(r.realTimeMs / 1000).toFixed(0)} s`,
    ]);
    const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
    const line = (c: string[]) => c.map((x, i) => (i === 0 ? x.padEnd(w[i]) : x.padStart(w[i]))).join('  ');
    out.push(line(head), w.map((n) => '-'.repeat(n)).join('  '), ...rows.map(line), '');
  }
  out.push('power law per row (eval loss ≈ a · FLOPs^−b):');
  for (const f of report.fits) out.push(`  ${f.row.padEnd(11)} a ${f.a.toFixed(3)}  b ${f.b.toFixed(4)}`);
  out.push('', report.verdict.sentence);
  return out.join('\n');
}

const COLORS: Record<string, string> = {
  ddp: '#222222',
  single: '#888888',
  'islands-8': '#1f77b4',
  'islands-32': '#ff7f0e',
};
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** Eval loss against training FLOPs, log–log: each row's points over the rungs and its fitted power law. */
export function scalingPlotSvg(report: ScalingReport): string {
  const W = 720,
    H = 440,
    left = 80,
    top = 50,
    pw = 560,
    ph = 300;
  const pts = report.rungs.flatMap((g) =>
    g.rows
      .filter((r) => r.name in COLORS && r.flops > 0 && r.evalLoss > 0)
      .map((r) => ({ row: r.name, c: r.flops, l: r.evalLoss })),
  );
  const lx = pts.map((p) => Math.log10(p.c)),
    ly = pts.map((p) => Math.log10(p.l));
  const x0 = Math.floor(Math.min(...lx) * 4) / 4,
    x1 = Math.ceil(Math.max(...lx) * 4) / 4;
  const y0 = Math.min(...ly) - 0.01,
    y1 = Math.max(...ly) + 0.01;
  const sx = (v: number) => left + ((v - x0) / Math.max(1e-9, x1 - x0)) * pw;
  const sy = (v: number) => top + (1 - (v - y0) / Math.max(1e-9, y1 - y0)) * ph;
  const o: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`,
    '<rect width="100%" height="100%" fill="white"/>',
  ];
  const heading = `atoll simulate --preset scaling (${report.config.data}): eval loss vs training FLOPs`;
  o.push(`<text x="${W / 2}" y="24" text-anchor="middle" font-size="15">${esc(heading)}</text>`);
  o.push(`<rect x="${left}" y="${top}" width="${pw}" height="${ph}" fill="none" stroke="#999"/>`);
  for (let k = 0; k <= 4; k++) {
    const xv = x0 + ((x1 - x0) * k) / 4,
      yv = y0 + ((y1 - y0) * k) / 4;
    o.push(`<text x="${sx(xv)}" y="${top + ph + 16}" text-anchor="middle">1e${xv.toFixed(2)}</text>`);
    o.push(
      `<line x1="${left}" x2="${left + pw}" y1="${sy(yv)}" y2="${sy(yv)}" stroke="#eee"/><text x="${left - 6}" ` +
        `y="${sy(yv) + 4}" text-anchor="end">${(10 ** yv).toFixed(3)}</text>`,
    );
  }
  o.push(`<text x="${left + pw / 2}" y="${top + ph + 36}" text-anchor="middle">training FLOPs (log)</text>`);
  o.push(
    `<text x="${left - 60}" y="${top + ph / 2}" transform="rotate(-90 ${left - 60} ${top + ph / 2})" ` +
      `text-anchor="middle">held-out loss (log)</text>`,
  );
  report.fits.forEach((f, i) => {
    const color = COLORS[f.row] ?? '#999';
    if (Number.isFinite(f.a)) {
      const ly0 = Math.log10(f.a) - f.b * x0,
        ly1 = Math.log10(f.a) - f.b * x1;
      o.push(
        `<line x1="${sx(x0)}" x2="${sx(x1)}" y1="${sy(ly0)}" y2="${sy(ly1)}" stroke="${color}" stroke-dasharray="5 ` +
          `3"/>`,
      );
    }
    for (const p of pts.filter((q) => q.row === f.row))
      o.push(
        `<circle cx="${sx(Math.log10(p.c)).toFixed(1)}" cy="${sy(Math.log10(p.l)).toFixed(1)}" r="4" fill="${color}"/>`,
      );
    const lx0 = left + i * 140,
      ly0 = top + ph + 62;
    o.push(
      `<circle cx="${lx0 + 6}" cy="${ly0 - 4}" r="4" fill="${color}"/><text x="${lx0 + 16}" ` +
        `y="${ly0}">${esc(`${f.row}: b ${f.b.toFixed(3)}`)}</text>`,
    );
  });
  o.push('</svg>');
  return o.join('\n');
}

export function scalingHtml(report: ScalingReport, svg: string, table: string): string {
  const c = report.config;
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>atoll simulate: scaling</title>
<style>body{font-family:sans-serif;margin:24px;max-width:1200px}
pre{background:#f6f6f6;padding:12px;overflow-x:auto}</style></head>
<body>
<h1>atoll simulate — scaling ladder</h1>
<p>${esc(report.verdict.sentence)}</p>
<p>${esc(c.hRule)}; islands' outer step ${c.outer.kind} lr ${c.outer.lr}, momentum ${c.outer.momentum};
${c.tokensPerParam} tokens per parameter; DDP lr sweep ${c.lrSweep.join(', ')};
global batch ${c.globalBatch} × ${c.seqLen} tokens. Real time ${(c.realTimeMs / 1000).toFixed(0)} s.</p>
${svg}
<pre>${esc(table)}</pre>
</body></html>
`;
}
