// Dashboard formatting: the shared helpers in client/ui/format.ts, plus the few the
// dashboard needs beyond them (loss, ratio, wall-clock time). Tabular numerals in CSS.

import { formatAgo, formatBytes, formatCount, formatFixed, formatPercent } from '../ui/format.ts';

export const DASH = '–';

export function isNum(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v);
}

// Not client/ui's formatInt: Number#toLocaleString builds a new formatter per call (~50 µs in
// Chromium), which made a 1,000-island table render take 100+ ms. One cached Intl.NumberFormat.
const INT = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** 1234 → "1,234"; null → "–". */
export function fmtInt(v: number | null | undefined): string {
  return isNum(v) ? INT.format(Math.round(v)) : DASH;
}

export const fmtBytes = formatBytes;
export const fmtFixed = formatFixed;
export const fmtPct = formatPercent;
export const fmtAgo = formatAgo;

/** 1234 → "1.23 k"; with a unit: "1.23 k tok/s". Values under 10 keep two decimals. */
export function fmtSI(v: number | null | undefined, unit = ''): string {
  if (!isNum(v)) return DASH;
  const s = Math.abs(v) < 10 && !Number.isInteger(v) ? v.toFixed(2) : formatCount(v);
  return s + unit;
}

export function fmtLoss(v: number | null | undefined): string {
  return isNum(v) ? v.toFixed(3) : DASH;
}

export function fmtRatio(v: number | null | undefined): string {
  return isNum(v) ? `${v >= 100 ? v.toFixed(0) : v.toFixed(1)}×` : DASH;
}

/** Local wall-clock time, "2026-11-29 17:30:43". */
export function fmtTime(t: number | null | undefined): string {
  if (!isNum(t)) return DASH;
  const d = new Date(t);
  const p = (n: number) => String(n).padStart(2, '0');
  const date = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
  return `${date} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/**
 * The verified-work flag of an island: '' before any audit, '✓ verified N' while all passed, '⚑ N failed audits'.
 */
export function fmtAudits(a: { passed: number; failed: number } | undefined): string {
  if (!a || a.passed + a.failed === 0) return '';
  return a.failed > 0 ? `⚑ ${a.failed} failed audit${a.failed === 1 ? '' : 's'}` : `✓ verified ${a.passed}`;
}

/** An island's numerics: 'f16', or 'f16 × 2 devices' for an island of several devices. */
export function fmtNumerics(i: { numerics?: string; devices?: number }): string {
  const n = i.devices ?? 1;
  return `${i.numerics ?? 'f32'}${n > 1 ? ` × ${n} devices` : ''}`;
}
