// The simulated twin of a live fleet run, and its baselines. The twin is the same run in virtual
// time: the same model, data, seed (θ0 = initParams(model, seed), the cold start a fresh
// `atoll serve` begins from), the live run's own coordinator config (mode, codecs, inner lr plan,
// outer optimizer, merge windows), and one simulated island per live island process or page, with
// the speed that island measured, its batch, and the times it joined and left. DDP and a single
// island train on the same data to the same tokens. Every row, and θ the live run served at its
// evaluation marks, is evaluated by one Evaluator on the same held-out batches.

import type { RunConfig } from '../../core/api.ts';
import { getPreset, numParams } from '../../core/model/config.ts';
import { ddpBytesPerIsland, runRows } from '../simulate/index.ts';
import { createCpuEngine } from '../../core/engine/cpu.ts';
import { Evaluator, modelConfig, rowData } from '../simulate/row-shared.ts';
import type {
  CurvePoint,
  IslandSpec,
  NetworkSpec,
  SimCommon,
  SimRow,
  SimRunResult,
  TwinSpec,
} from '../simulate/types.ts';
import { island } from '../simulate/scenarios.ts';
import type { LiveIsland, LiveRun } from './types.ts';
import { parseFleetEngine } from './engine-spec.ts';
import { mixSettings } from '../../server/gateway/mix-settings.ts';

/** Loopback: the live run's islands and server share one machine. */
export const LOOPBACK: NetworkSpec = { upBytesPerSec: 1e9, downBytesPerSec: 1e9, latencyMs: 0.1 };
/** The twin's unit of speed (an island's `speed` is its measured tokens/s over this). */
const BASE_TOKENS_PER_SEC = 1000;

/** The simulator's island for a live one: measured speed, batch, join and leave times. */
function twinIsland(l: LiveIsland): IslandSpec {
  const e = parseFleetEngine(l.engine);
  return island(l.name, {
    // a several-device island trains as one device at its whole batch (test/multi-device.test.ts)
    ...(e ? { precision: e.precision, devices: e.devices } : {}),
    speed: l.tokensPerSec / BASE_TOKENS_PER_SEC,
    batchSize: l.batchSize * (e?.devices ?? 1), // --batch is per device
    joinAtMs: Math.max(0, l.joinAtMs),
    leaveAtMs: l.leaveAtMs ?? Infinity,
    network: LOOPBACK,
  });
}

/**
 * The twin, DDP and single rows of a live run (islands that never trained two steps in a row have no speed to copy and
 * are left out).
 */
export function twinSpec(live: LiveRun, tokens: number, evals: number, evalBatches: number): TwinSpec {
  const cfg: RunConfig = live.runConfig;
  const cc = cfg.coordinator;
  if (cfg.preset === 'custom')
    throw Object.assign(new Error('the twin needs a model preset (tiny, small, base), not a custom model'), {
      code: 'E_BAD_REQUEST',
    });
  const common: SimCommon = {
    model: cfg.preset,
    seqLen: cc.seqLen,
    seed: cfg.seed,
    evals,
    evalBatches,
    evalBatchSize: 16,
    data: cfg.data,
  };
  const measured = live.islands.filter((l) => l.tokensPerSec > 0 && l.batchSize > 0 && l.joinAtMs >= 0);
  const islands = measured.map(twinIsland);
  // the baselines' batch is the fleet's at full strength: one of each island, a restart not counted twice
  const nominal = measured.filter((l) => !l.name.endsWith('-restart')).map(twinIsland);
  const lr = { maxLr: cc.innerLr.maxLr, minLr: cc.innerLr.minLr, warmupTokens: cc.innerLr.warmupTokens };
  const base = {
    lr,
    tokens,
    baseTokensPerSec: BASE_TOKENS_PER_SEC,
    codec: { encoding: 'f32', blockSize: 64, deflate: false } as SimRow['codec'],
  };
  const rows: SimRow[] = [
    {
      ...base,
      name: 'twin',
      kind: 'diloco',
      mode: cc.mode,
      islands,
      codec: { deflate: false, blockSize: 64, ...cc.uplink } as SimRow['codec'],
      // the live run's coordinator as it ran, to the same budget; no heartbeats in virtual time
      coordinator: { ...cc, totalTokens: tokens, islandTimeoutMs: 1e10 },
      // a mixing run's twin mixes in groups of the same k, with the server's own timings
      ...(live.mix
        ? {
            mix: (({ k, formWaitMs, formWaitFraction, maxFormWaitMs, spotRate, exchangeTimeoutMs }) => ({
              k,
              formWaitMs,
              formWaitFraction,
              maxFormWaitMs,
              spotRate,
              exchangeTimeoutMs,
            }))(mixSettings({ k: live.mix.k }, cc)),
          }
        : {}),
    },
    // the baselines stop at the tokens the live run ended with
    { ...base, tokens: live.tokens, name: 'ddp', kind: 'ddp', mode: 'sync', islands: nominal, coordinator: {} },
    {
      ...base,
      tokens: live.tokens,
      name: 'single',
      kind: 'single',
      mode: 'sync',
      islands: nominal.slice(0, 1),
      coordinator: {},
    },
  ];
  return { common, rows };
}

/** What the live server took in and sent out (the islands' own counts), per accepted token. */
function serverBytes(bytesIn: number, bytesOut: number, tokens: number): SimRunResult['server'] {
  return {
    bytesIn,
    bytesOut,
    snapshotBytes: 0,
    inPerToken: bytesIn / Math.max(1, tokens),
    outPerToken: bytesOut / Math.max(1, tokens),
  };
}

/** The live run as a report row: θ at each mark through the same evaluator as the simulated rows. */
export async function liveRow(live: LiveRun, common: SimCommon, ddpRow: SimRow): Promise<SimRunResult> {
  const ds = rowData(common);
  const evaluator = new Evaluator(
    await createCpuEngine('cpu', { config: modelConfig(common), maxBatch: common.evalBatchSize, maxT: common.seqLen }),
    common,
    ds,
  );
  const curve: CurvePoint[] = [];
  for (const s of live.snapshots)
    curve.push({
      tokens: s.tokens,
      tokensComputed: s.tokens,
      timeMs: s.timeMs,
      evalLoss: await evaluator.loss(s.params),
      version: s.version,
    });
  const isl = live.islands;
  const computed = isl.reduce((a, l) => a + l.stepTokens, 0);
  const up = isl.reduce((a, l) => a + l.bytesUp, 0) / Math.max(1, isl.length);
  const rejected: Record<string, number> = {};
  for (const l of isl)
    for (const [k, v] of Object.entries(l.rejectedByCode)) if (k !== 'E_DONE') rejected[k] = (rejected[k] ?? 0) + v;
  const cc = live.runConfig.coordinator;
  const final = curve[curve.length - 1];
  return {
    name: 'live',
    kind: 'diloco',
    mode: cc.mode,
    codec: cc.uplink.encoding + (cc.uplink.deflate ? '+deflate' : ''),
    islands: isl.length,
    evalLoss: final.evalLoss,
    evalLossSd: 0,
    seedLosses: [final.evalLoss],
    tokens: live.tokens,
    tokensComputed: computed,
    bytesUpPerIsland: up,
    bytesDownPerIsland: isl.reduce((a, l) => a + l.bytesDown, 0) / Math.max(1, isl.length),
    commReductionVsDdp:
      ddpBytesPerIsland(ddpRow, live.tokens, common.seqLen, numParams(live.runConfig.model)) / Math.max(1, up),
    goodput: live.tokens / Math.max(1, computed),
    accepted: isl.reduce((a, l) => a + l.accepted, 0),
    rejected,
    versions: live.versions,
    virtualTimeMs: live.seconds * 1000,
    realTimeMs: live.seconds * 1000,
    curve,
    perIsland: [],
    notes: [],
    server: serverBytes(
      isl.reduce((a, l) => a + l.bytesUp, 0),
      isl.reduce((a, l) => a + l.bytesDown, 0),
      live.tokens,
    ),
  };
}

/** Runs the twin, DDP and single rows (worker threads) and evaluates the live θ alongside. */
export async function runTwin(
  spec: TwinSpec,
  workers: number,
  log: (l: string) => void,
  progress?: (i: number, frac: number) => void,
): Promise<SimRunResult[]> {
  const results = await runRows(
    spec.rows,
    spec.rows.map(() => ({ ...spec.common, scalars: true })),
    workers,
    log,
    progress,
  );
  const ddp = results.find((r) => r.kind === 'ddp');
  for (const r of results) {
    if (r.kind === 'ddp') r.commReductionVsDdp = 1;
    else if (r.kind === 'single') r.commReductionVsDdp = Infinity;
    else
      r.commReductionVsDdp = ddp
        ? ddpBytesPerIsland(
            spec.rows.find((x) => x.kind === 'ddp')!,
            r.tokens,
            spec.common.seqLen,
            numParams(getPreset(spec.common.model)),
          ) / Math.max(1, r.bytesUpPerIsland)
        : NaN;
    r.seedLosses = [r.evalLoss];
  }
  return results;
}
