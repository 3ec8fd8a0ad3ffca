// The dashboard shows where the outer step's safety rules acted: the update-norm chart marks each version the
// trust region clipped (HistoryPoint.trustGain) and each sync round that closed short (shortClose), and its
// note counts them. Built from a real coordinator's history shape (HistoryPoint), read as the page reads it.

import { describe, expect, it } from 'vitest';
import { normDef } from '../client/dashboard/chart-defs-train.ts';
import type { HistoryPoint } from '../core/api.ts';

const point = (version: number, extra: Partial<HistoryPoint> = {}): HistoryPoint =>
  ({ version, time: 1000 * version, tokens: 512 * version, updateNorm: 0.5 + version / 10, ...extra }) as never;

describe('dashboard: the safety rules on the update-norm chart', () => {
  it('marks clipped versions and short rounds on their norms, and counts them', () => {
    const ps = [point(0), point(1), point(2, { trustGain: 0.4 }), point(3, { shortClose: 'members-in' }), point(4)];
    const def = normDef(ps, 'tokens');
    const [, norm, clipped, short] = def.data as Array<Array<number | null>>;
    expect(norm).toEqual([null, 0.6, 0.7, 0.8, 0.9]);
    expect(clipped).toEqual([null, null, 0.7, null, null]);
    expect(short).toEqual([null, null, null, 0.8, null]);
    expect(def.series.map((s) => s.label)).toEqual([
      '‖outer update‖',
      'clipped by the trust region',
      'sync round closed short',
    ]);
    expect(def.note).toContain('clipped 1 update to its limit');
    expect(def.note).toContain('1 sync round closed below minContributors');
  });

  it('says none acted on a run where neither did', () => {
    const def = normDef([point(0), point(1), point(2)], 'time');
    expect(def.note).toContain('clipped 0 updates');
    expect(def.note).toContain('0 sync rounds closed');
    expect((def.data[2] as Array<number | null>).every((v) => v === null)).toBe(true);
  });
});
