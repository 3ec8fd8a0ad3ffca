// Compute islands as they really are, in one simulated run (issue 24): f32 islands, f16 islands
// (the CPU engine with the f16 kernels' CPU twins) and a 2-device island train one model through
// the real coordinator, codec and island runtime; the held-out loss is within 1.01× of the same
// fleet all in f32, and every island's θ matches the server's hash after every update. The hellos
// carry each island's numerics and devices into the coordinator's records (the checkpoint's).

import { describe, expect, it } from 'vitest';
import { runRow } from '../instruments/simulate/row.ts';
import { mixedComputeRows } from '../instruments/simulate/scenarios.ts';
import { parseFleetEngine } from '../instruments/fleet/engine-spec.ts';
import { fleetSpecFromCli } from '../instruments/commands/fleet.ts';

describe('mixed numerics and parallelism in one run (simulator)', () => {
  it('f32 + f16 + 2-device islands: eval loss within 1.01× of all-f32, θ hashes agree', async () => {
    const d = {
      islands: 4,
      seeds: [1],
      batchSize: 4,
      tokens: 12_288,
      innerSteps: 8,
      baseTokensPerSec: 4000,
      seqLen: 32,
      lr: { maxLr: 3e-3, minLr: 3e-4, warmupTokens: 2048 },
    };
    const [mixed, allF32] = mixedComputeRows(d);
    expect(mixed.islands.map((s) => [s.precision ?? 'f32', s.devices ?? 1])).toEqual([
      ['f32', 1],
      ['f16', 1],
      ['f32', 1],
      ['f32', 2],
    ]);
    const common = { model: 'tiny' as const, seqLen: d.seqLen, seed: 1, evals: 2, evalBatches: 4, evalBatchSize: 8 };
    const a = await runRow(mixed, { common });
    const b = await runRow(allF32, { common });
    console.log(
      `mixed ${a.evalLoss.toFixed(6)} vs all-f32 ${b.evalLoss.toFixed(6)}: ×${(a.evalLoss / b.evalLoss).toFixed(6)}; hash checks ${a.perIsland.map((r) => r.hashChecks ?? 0).join(' ')}`,
    );
    expect(a.tokens).toBeGreaterThanOrEqual(d.tokens);
    expect(a.evalLoss).toBeLessThan(b.evalLoss * 1.01);
    expect(a.evalLoss).not.toBe(b.evalLoss); // the f16 islands computed differently
    expect(a.evalLoss).toBeLessThan(5); // it learned (uniform over bytes: 5.55)
    for (const r of a.perIsland) {
      expect(r.hashChecks ?? 0, r.name).toBeGreaterThan(0);
      expect(r.hashMismatches ?? 0, r.name).toBe(0);
    }
  });

  it("atoll fleet --engines names each Node island's numerics and devices (live mixed fleets)", () => {
    expect(parseFleetEngine('cpu')).toEqual({ kind: 'cpu', precision: 'f32', devices: 1 });
    expect(parseFleetEngine('webgpu:f16')).toEqual({ kind: 'webgpu', precision: 'f16', devices: 1 });
    expect(parseFleetEngine('webgpu:f16x2')).toEqual({ kind: 'webgpu', precision: 'f16', devices: 2 });
    expect(parseFleetEngine('webgpux2')).toEqual({ kind: 'webgpu', precision: 'f32', devices: 2 });
    for (const bad of ['cpux2', 'webgpu:bf16', 'webgpu:f16x0', 'gpu']) expect(parseFleetEngine(bad), bad).toBeNull();
    expect(fleetSpecFromCli({ engines: 'cpu,webgpu:f16,webgpu:f32x2' }).engines).toEqual([
      'cpu',
      'webgpu:f16',
      'webgpu:f32x2',
    ]);
    expect(() => fleetSpecFromCli({ engines: 'cpu,cpux2' })).toThrow("--engines: 'cpux2'");
  });
});
