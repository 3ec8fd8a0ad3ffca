// The dashboard charts' axis and gap helpers (client/dashboard/axes.ts).

import { describe, expect, it } from 'vitest';
import { breakGaps, clock, gapSeconds, INTEGER_INCRS, timeRange } from '../client/dashboard/axes.ts';

describe('dashboard axes', () => {
  it('a lone point gets a minute of time axis, so its ticks are clock times, not days', () => {
    const t = Date.UTC(2026, 1, 1, 12, 0, 0) / 1000;
    expect(timeRange([t], t, t + 86_400)).toEqual([t - 30, t + 30]); // uPlot offers a day for one point
    expect(timeRange([t, t + 600], t, t + 600)).toEqual([t, t + 600]);
    expect(clock(t, 10)).toMatch(/^\d\d:\d\d:\d\d$/);
    expect(clock(t, 86_400)).toMatch(/^\d\d-\d\d$/);
  });

  it('counting axes step in whole numbers', () => {
    expect(INTEGER_INCRS.every((x) => Number.isInteger(x) && x >= 1)).toBe(true);
  });

  it('a cumulative series breaks across a 29-minute gap instead of sloping over it', () => {
    const xs = [0, 10, 20, 30, 30 + 29 * 60, 30 + 29 * 60 + 10];
    const acc = [0, 2, 4, 6, 8, 10];
    const gap = gapSeconds(xs);
    expect(gap).toBe(100);
    const [x2, y2] = breakGaps([xs, acc], gap);
    expect(y2).toEqual([0, 2, 4, 6, null, 8, 10]);
    expect(x2[4]).toBeGreaterThan(30);
    expect(x2[4]).toBeLessThan(30 + 29 * 60);
    // no gap, nothing inserted
    expect(
      breakGaps(
        [
          [0, 10, 20],
          [1, 2, 3],
        ],
        60,
      ),
    ).toEqual([
      [0, 10, 20],
      [1, 2, 3],
    ]);
  });
});
