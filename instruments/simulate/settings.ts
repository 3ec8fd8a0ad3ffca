// The `settings` preset: every setting a user can pick from the CLI, each at the defaults it gets
// there: every uplink codec × sync / async × no mixing / groups of 4, on one heterogeneous fleet.
// Each row's outer step, rounds, windows, norm bound, trust region and codecs are `atoll serve
// --mode M --codec C`'s (buildRunConfig); the simulator sets only the run's length and its model's
// context. The report flags any row whose eval loss ever rose more than 2 % above its running best.

import { ENCODINGS, type Encoding } from '../../core/codec/index.ts';
import type { CoordinatorConfig, CoordinatorConfigPatch } from '../../core/coord/index.ts';
import type { TrainingMode } from '../../core/protocol.ts';
import { buildRunConfig } from '../../server/run/config.ts';
import { MIX_SPOT_RATE, type RowDefaults, heterogeneous } from './scenarios.ts';
import type { SimRow } from './types.ts';

/** A row whose eval loss rose more than this above its running best is flagged. */
export const RISE_LIMIT = 0.02;

/** The coordinator knobs a CLI run decides (not the run's length, shapes, data or bookkeeping). */
const ALGORITHM_KEYS = [
  'mode',
  'outer',
  'soloPlainStep',
  'innerSteps',
  'minInnerSteps',
  'maxInnerSteps',
  'dylu',
  'targetRoundMs',
  'quorum',
  'minContributors',
  'grace',
  'roundTimeoutMs',
  'lateDeltas',
  'aggregation',
  'asyncWindow',
  'maxStaleness',
  'staleness',
  'maxTokenWeight',
  'normBound',
  'trustRegion',
  'uplink',
  'downlink',
] as const satisfies ReadonlyArray<keyof CoordinatorConfig>;

/** `atoll serve --preset tiny --mode <mode> --codec <encoding>`'s coordinator, as a row's patch. */
export function cliCoordinator(mode: TrainingMode, encoding: Encoding): CoordinatorConfigPatch {
  const c = buildRunConfig(null, { preset: 'tiny', mode, codec: encoding }).coordinator;
  return Object.fromEntries(ALGORITHM_KEYS.map((k) => [k, structuredClone(c[k])])) as CoordinatorConfigPatch;
}

/** Every codec × sync/async × mixing off / groups of 4, at the CLI's defaults. */
export function settingsRows(d: RowDefaults): SimRow[] {
  const islands = heterogeneous(d.islands, d.batchSize);
  const rows: SimRow[] = [];
  for (const encoding of ENCODINGS)
    for (const mode of ['sync', 'async'] as const)
      for (const k of [0, 4]) {
        const coordinator = cliCoordinator(mode, encoding);
        const up = coordinator.uplink as CoordinatorConfig['uplink'];
        // a round of the slowest island at H steps: the mixing groups' waits scale with it (as mixSettings' live)
        const roundMs = Math.max(
          ...islands.map((s) => (1000 * d.innerSteps * s.batchSize * d.seqLen) / (s.speed * d.baseTokensPerSec)),
        );
        rows.push({
          name: `${mode}-${encoding}${k ? `-mix${k}` : ''}`,
          kind: 'diloco',
          mode,
          islands,
          codec: { ...up, blockSize: up.blockSize ?? 64, deflate: up.deflate ?? false },
          coordinator,
          lr: d.lr,
          tokens: d.tokens,
          baseTokensPerSec: d.baseTokensPerSec,
          seeds: d.seeds.slice(0, 1),
          ...(k
            ? { mix: { k, formWaitMs: roundMs / 4, exchangeTimeoutMs: 2 * roundMs, spotRate: MIX_SPOT_RATE } }
            : {}),
        });
      }
  return rows;
}
