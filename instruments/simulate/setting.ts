// What a simulation assumed, said at the top of its report: the knobs against serve's defaults (the
// rows start from them), the rows that deliberately differ and why, the network model and the time
// axis's assumptions for DDP. And `--network`'s parser.

import { type Result, err, ok } from '../../core/result.ts';
import { defaultRunConfig } from '../../server/run/config.ts';
import { SHORT_RUN_OUTER, type RowDefaults } from './scenarios.ts';
import type { NetworkSpec, SimRow } from './types.ts';

const MBIT = 1e6 / 8;

/** `--network 20,100,30`: Mbit/s up, Mbit/s down, ms one way. */
export function parseNetwork(v: string): Result<NetworkSpec> {
  const parts = v.split(',').map((x) => Number(x.trim()));
  if (parts.length !== 3 || parts.some((x) => !Number.isFinite(x)) || parts[0] <= 0 || parts[1] <= 0 || parts[2] < 0)
    return err('E_BAD_REQUEST', `--network must be up,down,latency (Mbit/s > 0, Mbit/s > 0, ms ≥ 0), got '${v}'`);
  return ok({ upBytesPerSec: parts[0] * MBIT, downBytesPerSec: parts[1] * MBIT, latencyMs: parts[2] });
}

export const networkText = (n: NetworkSpec) =>
  `${+(n.upBytesPerSec / MBIT).toPrecision(4)} Mbit/s up, ${+(n.downBytesPerSec / MBIT).toPrecision(4)} Mbit/s ` +
  `down, ${n.latencyMs} ms one way`;

/** The report's header lines. */
export function describeSetting(rows: SimRow[], d: RowDefaults, network: NetworkSpec, preset: string): string[] {
  const serve = defaultRunConfig('tiny').coordinator;
  const outer = d.outer ?? serve.outer;
  const lines = [
    `knobs (serve's default run on tiny in brackets): outer ${outer.kind} lr ${outer.lr} μ ${outer.momentum} ` +
      `(${serve.outer.lr}, ${serve.outer.momentum}); inner lr ${d.lr.maxLr} → ${d.lr.minLr} ` +
      `(${serve.innerLr.maxLr} → ${serve.innerLr.minLr}); H ${d.innerSteps} (${serve.innerSteps})`,
    `network: ${networkText(network)} (--network)`,
  ];
  const differ: string[] = [];
  if (preset === 'compare' && outer.lr === SHORT_RUN_OUTER.lr && outer.momentum === SHORT_RUN_OUTER.momentum)
    differ.push(`outer lr ${outer.lr}, μ ${outer.momentum} on every DiLoCo row: runs of 15–30 outer steps`);
  const dilocos = rows.filter((r) => r.kind === 'diloco');
  if (dilocos.some((r) => r.codec.encoding === 'int4' && r.codec.blockSize !== 64))
    differ.push('int4 rows in blocks of 256, deflated (serve --codec int4: blocks of 64)');
  if (dilocos.some((r) => (r.coordinator.targetRoundMs ?? 0) > 0))
    differ.push("round time from DyLU's time rule: the fastest island does H steps");
  if (differ.length) lines.push(`rows that differ from serve's defaults, on purpose: ${differ.join('; ')}`);
  lines.push(
    'time axis (virtual): DiLoCo islands at their speeds (1×, 2×, 4× in the heterogeneous rows) over their ' +
      "links; DDP: its islands at 1× in lockstep, each step the slowest one's compute plus a ring all-reduce " +
      'of fp32 gradients over the same link; single: one island at 1×, no communication',
  );
  return lines;
}
