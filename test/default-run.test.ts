// `npm start`'s run is the measured setting: the same mode, uplink and downlink as the simulator's
// comparison row (one source, core/coord/config.ts MEASURED_SETTING), a cold-start warmup, and sync
// int8 one pair of flags away.

import { describe, expect, it } from 'vitest';
import { DEFAULT_COORDINATOR_CONFIG, MEASURED_SETTING } from '../core/coord/index.ts';
import { buildRunConfig } from '../server/run/config.ts';
import { compareRows } from '../instruments/simulate/scenarios.ts';

const codecOf = (c: object) => ({ deflate: false, ...c });

describe('the default run', () => {
  it("is the simulator comparison row's setting: async, sparse up, int4 per 4096 down", () => {
    const run = buildRunConfig(null, {}).coordinator;
    const d = {
      islands: 8,
      seeds: [1],
      batchSize: 4,
      tokens: 200_000,
      innerSteps: 16,
      baseTokensPerSec: 2000,
      seqLen: 32,
      lr: { maxLr: 3e-3, minLr: 3e-4, warmupTokens: 0 },
    };
    const row = compareRows(d, true).find((r) => r.name === 'async-sparse-hetero')!;
    expect(run.mode).toBe(row.mode);
    expect(codecOf(run.uplink)).toEqual(codecOf(row.codec));
    expect(run.downlink).toEqual(row.coordinator.downlink);
    expect(run).toMatchObject(MEASURED_SETTING);
    // a merge window takes one Nesterov step, as the row does
    expect(run.outer.kind).toBe('nesterov');
    expect(run.asyncWindow.fraction).toBeGreaterThan(0);
    // the cold start is warmed up: every island's first AdamW steps
    expect(run.innerLr.localWarmupSteps).toBe(DEFAULT_COORDINATOR_CONFIG.innerLr.localWarmupSteps);
    expect(run.innerLr.localWarmupSteps).toBeGreaterThan(0);
  });

  it('sync int8 is a pair of flags away (its downlink int8 per 64); --codec sparse keeps the measured downlink', () => {
    const old = buildRunConfig(null, { mode: 'sync', codec: 'int8' }).coordinator;
    expect(old.mode).toBe('sync');
    expect(old.uplink).toEqual({ encoding: 'int8' });
    expect(old.downlink).toEqual({ encoding: 'int8', blockSize: 64 });
    expect(buildRunConfig(null, { mode: 'sync', codec: 'sparse' }).coordinator.downlink).toEqual(
      MEASURED_SETTING.downlink,
    );
    // async without merge windows: each arrival is its own step, the delayed Nesterov of Async Local-SGD
    expect(buildRunConfig({ coordinator: { asyncWindow: { fraction: 0 } } }, {}).coordinator.outer.kind).toBe(
      'delayed-nesterov',
    );
  });
});
