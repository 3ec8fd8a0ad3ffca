// Number formatting for live readouts. Every function returns a string of
// stable shape (fixed decimals, fixed unit set) so that, rendered with tabular
// numerals, a changing number does not make the layout jump. Pure: no DOM.

const DASH = '–';

const finite = (x: number | null | undefined): x is number => typeof x === 'number' && Number.isFinite(x);

/** 1234 → "1,234"; null → "–". */
export function formatInt(n: number | null | undefined): string {
  return finite(n) ? Math.round(n).toLocaleString('en-US') : DASH;
}

/** Fixed decimals: formatFixed(2.34567, 3) → "2.346". */
export function formatFixed(x: number | null | undefined, digits: number): string {
  return finite(x) ? x.toFixed(digits) : DASH;
}

/** |n| scaled by `base` until under it, with 3 significant digits and the unit it reached. */
function scaled(n: number, base: number, units: readonly string[]): string {
  let v = Math.abs(n);
  let i = 0;
  while (v >= base - 0.5 && i < units.length - 1) {
    v /= base;
    i++;
  }
  const s = i === 0 ? String(Math.round(v)) : v >= 99.95 ? v.toFixed(0) : v >= 9.995 ? v.toFixed(1) : v.toFixed(2);
  return (n < 0 ? '-' : '') + s + units[i];
}

/** Compact count with SI suffix and 3 significant digits: 1_234_567 → "1.23 M". */
export function formatCount(n: number | null | undefined): string {
  return finite(n) ? scaled(n, 1000, ['', ' k', ' M', ' G', ' T']) : DASH;
}

/** Bytes in binary units: 1536 → "1.50 KiB". */
export function formatBytes(n: number | null | undefined): string {
  return finite(n) ? scaled(n, 1024, [' B', ' KiB', ' MiB', ' GiB', ' TiB']) : DASH;
}

/** A rate per second: formatRate(1234, 'tok') → "1.23 k tok/s". */
export function formatRate(perSec: number | null | undefined, unit: string): string {
  return finite(perSec) ? `${formatCount(perSec)} ${unit}/s` : DASH;
}

/** Seconds as a short duration: 5 → "5 s", 125 → "2 min 5 s", 7260 → "2 h 1 min". */
export function formatDuration(seconds: number | null | undefined): string {
  if (!finite(seconds) || seconds < 0) return DASH;
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, '0')} s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${String(m % 60).padStart(2, '0')} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** A step's time: under a second in ms ("12 ms"), else as a duration. */
export function formatStepTime(ms: number | null | undefined): string {
  if (!finite(ms) || ms < 0) return DASH;
  return ms < 1000 ? `${Math.round(ms)} ms` : ms < 60_000 ? `${(ms / 1000).toFixed(1)} s` : formatDuration(ms / 1000);
}

/** A share as a percentage: 0.4567 → "45.7%". */
export function formatPercent(fraction: number | null | undefined, digits = 1): string {
  return finite(fraction) ? `${(fraction * 100).toFixed(digits)}%` : DASH;
}

/** "3 s ago", "2 min ago" relative to `now` (ms since epoch). */
export function formatAgo(thenMs: number | null | undefined, nowMs = Date.now()): string {
  if (!finite(thenMs)) return DASH;
  const d = Math.max(0, (nowMs - thenMs) / 1000);
  return d < 1 ? 'just now' : `${formatDuration(d)} ago`;
}
