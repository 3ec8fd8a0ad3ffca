// `atoll simulate` takes serve's knob flags from the same definitions (--outer-lr, --outer-momentum,
// --inner-lr, --inner-steps, --codec) and --network; its rows start from serve's outer step unless a
// row says otherwise, and the report's header says the knobs, the differing rows, the network and DDP's time.

import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildRunConfig } from '../server/run/config.ts';
import { runSimulate, simulateOptionsFromCli } from '../instruments/simulate/index.ts';
import { buildProgram } from '../instruments/cli.ts';

describe('simulate on the live defaults', () => {
  it('the flags exist with their ranges, and parse', async () => {
    const cmd = buildProgram().commands.find((c) => c.name() === 'simulate')!;
    const flags = cmd.options.map((o) => o.flags);
    for (const f of ['--outer-lr <lr>', '--outer-momentum <m>', '--inner-lr <lr>', '--network <up,down,ms>'])
      expect(flags).toContain(f);
    expect(cmd.options.find((o) => o.long === '--outer-lr')!.description).toMatch(/outer learning rate, \[0, 10\]/);
    const o = simulateOptionsFromCli({ outerLr: 0.5, outerMomentum: 0.8, innerLr: 0.002, network: '10,50,20' });
    expect(o.ok && o.value).toMatchObject({
      outerLr: 0.5,
      outerMomentum: 0.8,
      innerLr: 0.002,
      network: { upBytesPerSec: 1.25e6, downBytesPerSec: 6.25e6, latencyMs: 20 },
    });
    expect(simulateOptionsFromCli({ network: '10,50' })).toMatchObject({ ok: false, error: { code: 'E_BAD_REQUEST' } });
  });

  it("at its defaults the diloco row takes serve's outer step; flags override it; the header says so", async () => {
    const out = mkdtempSync(join(tmpdir(), 'atoll-sim-knobs-'));
    const serve = buildRunConfig(null, {}).coordinator.outer;
    const base = { preset: 'smoke' as const, compare: 'ddp', workers: 0, print: false, log: () => {} };
    const live = await runSimulate({ ...base, out });
    const row = live.config.rows.find((r) => r.kind === 'diloco')!;
    expect(row.coordinator.outer).toEqual(serve);
    expect(live.config.setting.join('\n')).toMatch(/outer nesterov lr 0\.7 μ 0\.9 \(0\.7, 0\.9\)/);
    expect(live.config.setting.join('\n')).toMatch(/network: 20 Mbit\/s up, 100 Mbit\/s down, 30 ms one way/);
    expect(live.config.setting.join('\n')).toMatch(/DDP: its islands at 1× in lockstep/);
    const told = await runSimulate({
      ...base,
      out,
      outerLr: 0.4,
      outerMomentum: 0.5,
      innerLr: 0.002,
      network: { upBytesPerSec: 1e6, downBytesPerSec: 2e6, latencyMs: 5 },
    });
    const r2 = told.config.rows.find((r) => r.kind === 'diloco')!;
    expect(r2.coordinator.outer).toMatchObject({ lr: 0.4, momentum: 0.5 });
    expect(r2.lr).toMatchObject({ maxLr: 0.002, minLr: 0.0002 });
    expect(told.config.network.latencyMs).toBe(5);
    expect(readFileSync(join(out, 'report.html'), 'utf8')).toMatch(/8 Mbit\/s up, 16 Mbit\/s down, 5 ms one way/);
  }, 120_000);
});
