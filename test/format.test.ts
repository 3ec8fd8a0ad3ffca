import { describe, expect, it } from 'vitest';
import { formatBytes, formatCount, formatRate, formatStepTime } from '../client/ui/format.ts';

describe('live readout formatting', () => {
  it('counts in SI steps of 1000 and bytes in binary steps of 1024, 3 significant digits', () => {
    expect(formatCount(999)).toBe('999');
    expect(formatCount(1234567)).toBe('1.23 M');
    expect(formatCount(-12345)).toBe('-12.3 k');
    expect(formatBytes(100)).toBe('100 B');
    expect(formatBytes(1536)).toBe('1.50 KiB');
    expect(formatBytes(1023.4)).toBe('1023 B');
    expect(formatBytes(-3e9)).toBe('-2.79 GiB');
    expect(formatRate(1234, 'tok')).toBe('1.23 k tok/s');
    expect(formatCount(null)).toBe('–');
    expect(formatBytes(Number.NaN)).toBe('–');
  });
  it('a step time in ms under a second, in tenths of a second under a minute, then as a duration', () => {
    expect(formatStepTime(3.4)).toBe('3 ms');
    expect(formatStepTime(2200)).toBe('2.2 s');
    expect(formatStepTime(125_000)).toBe('2 min 05 s');
    expect(formatStepTime(null)).toBe('–');
  });
});
