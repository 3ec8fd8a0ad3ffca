// `atoll chaos` on the embedded server: a run under island kills (kill -9, replaced), dropped
// connections and a SIGSTOP pause finishes, loses no acknowledged delta and logs none twice.
// `atoll chaos --cluster` on the Redis layer: aggregator kill -9 and SIGSTOP past the lease, a
// gateway closed, islands replaced: takeovers, the deposed one exits fenced, lost = duplicates = 0.

import { describe, expect, it } from 'vitest';
import { buildProgram } from '../server/cli.ts';
import { chaosCluster } from '../server/cluster/chaos-cluster.ts';
import { chaos } from '../server/commands/chaos.ts';

describe('atoll chaos', () => {
  it('is a command with its flags', () => {
    const c = buildProgram().commands.find((x) => x.name() === 'chaos')!;
    expect(c.options.map((o) => o.long)).toEqual(expect.arrayContaining(['--islands', '--fail', '--tokens', '--latency', '--no-baseline', '--roles', '--cluster', '--versions', '--json']));
  });

  it('a faulty run: every fault fires, lost = 0, duplicates = 0, goodput and eval loss reported', async () => {
    const r = await chaos({ islands: 2, failFraction: 0.5, tokens: 8_000, innerSteps: 4, baseline: false });
    const f = r.faulty;
    expect(r.faults).toHaveLength(4);
    expect([f.islandKills, f.connectionDrops, f.pauses]).toEqual([1, 2, 1]);
    expect(f.acked).toBeGreaterThan(0);
    expect(f.lost).toBe(0);
    expect(f.duplicates).toBe(0);
    expect(f.tokensInTheta).toBeGreaterThanOrEqual(8_000);
    expect(f.goodput).toBeGreaterThan(0);
    expect(f.goodput).toBeLessThanOrEqual(1);
    expect(Number.isFinite(f.evalLoss)).toBe(true);
    expect(r.clean).toBeNull();
  });

  it('--cluster: two takeovers, the deposed aggregator exits fenced, islands retry through other gateways, nothing lost or doubled, θ replays', async () => {
    const r = await chaosCluster({ islands: 4, versions: 14, failFraction: 0.25 });
    expect(r.faults).toHaveLength(4);
    expect(r.failoverMs).toHaveLength(2);
    expect(r.deposedExitedFenced).toBe(true);
    expect(r.gatewayRetries).toBeGreaterThan(0);
    expect(r.versions).toBeGreaterThanOrEqual(14);
    expect(r.acked).toBeGreaterThan(0);
    expect([r.lost, r.duplicates]).toEqual([0, 0]);
    expect(r.replayMatches).toBe(true);
    expect(r.goodput).toBeGreaterThan(0.5);
  });
});
