// Progress bars for `atoll simulate`: one line per row. On a terminal the lines are redrawn in
// place (log lines print above them); elsewhere each bar prints a line at every tenth.

import type { SimulateOptions } from './types.ts';

export interface ProgressSink {
  write(s: string): unknown;
  isTTY?: boolean;
}

const WIDTH = 30;

export class ProgressBars {
  private readonly frac: number[];
  private readonly tenths: number[];
  private drawn = 0;
  private lastDraw = 0;

  constructor(
    private readonly out: ProgressSink,
    private readonly names: string[],
  ) {
    this.frac = names.map(() => 0);
    this.tenths = names.map(() => -1);
  }

  private line(i: number): string {
    const f = Math.min(1, Math.max(0, this.frac[i]));
    const full = Math.round(f * WIDTH);
    const w = Math.max(...this.names.map((n) => n.length));
    return (
      `  ${this.names[i].padEnd(w)} [${'#'.repeat(full)}${'.'.repeat(WIDTH - full)}] ` +
      `${(100 * f).toFixed(0).padStart(3)}%`
    );
  }

  private redraw(): void {
    const up = this.drawn > 0 ? `\x1b[${this.drawn}F` : '';
    this.out.write(up + this.names.map((_, i) => `\x1b[2K${this.line(i)}\n`).join(''));
    this.drawn = this.names.length;
    this.lastDraw = performance.now();
  }

  /** Row i is `frac` done (0..1). */
  update(i: number, frac: number): void {
    this.frac[i] = frac;
    if (this.out.isTTY) {
      if (frac >= 1 || performance.now() - this.lastDraw > 100) this.redraw();
      return;
    }
    const t = Math.floor(Math.min(1, frac) * 10);
    if (t > this.tenths[i]) {
      this.tenths[i] = t;
      this.out.write(this.line(i) + '\n');
    }
  }

  /** A log line, above the bars on a terminal. */
  log(line: string): void {
    if (!this.out.isTTY) {
      this.out.write(line + '\n');
      return;
    }
    if (this.drawn > 0) this.out.write(`\x1b[${this.drawn}F\x1b[J`);
    this.drawn = 0;
    this.out.write(line + '\n');
    this.redraw();
  }
}

/** The `log` and `progress` of a run drawn on stderr: log lines print above the bars (none when `bars` is false). */
export function stderrProgress(bars: boolean): { log: (line: string) => void; progress: SimulateOptions['progress'] } {
  let shown: ProgressBars | undefined;
  return {
    log: (l: string) => (shown ? shown.log(`  ${l}`) : process.stderr.write(`  ${l}\n`)),
    progress: bars
      ? {
          start: (names) => {
            shown = new ProgressBars(process.stderr, names);
          },
          update: (i, f) => shown?.update(i, f),
        }
      : undefined,
  };
}
