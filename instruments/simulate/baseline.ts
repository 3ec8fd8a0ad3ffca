// The baselines of a comparison row in virtual time: DDP (fp32 gradients all-reduced every step) and a single
// island, on the DiLoCo rows' data streams and token budget.

import { type TextDataset, allocBatch, sampleBatch } from '../../core/data/dataset.ts';
import { numParams } from '../../core/model/config.ts';
import { initParams } from '../../core/model/gpt.ts';
import { type InnerLrPlan, innerLearningRate } from '../../core/protocol.ts';
import type { EngineMaker } from './engines.ts';
import { type ScalarRow, evalRows } from './metrics.ts';
import type { CurvePoint, SimCommon, SimRow, SimRunResult } from './types.ts';
import { type RowContext, Evaluator, emptyResult, islandStream, modelConfig, rowEngines } from './row-shared.ts';

/**
 * DDP: one model whose batch is every island's batch together (gradient averaging every step =
 * one step on the N×B batch), fp32 gradients all-reduced every step. Single: one island alone.
 * Same lr schedule (in tokens), same data streams as the DiLoCo islands.
 */
export async function runBaseline(
  row: SimRow,
  common: SimCommon,
  ds: TextDataset,
  ctx: RowContext,
): Promise<SimRunResult> {
  const islands = row.kind === 'single' ? row.islands.slice(0, 1) : row.islands;
  const engines = await rowEngines(
    common,
    islands.reduce((a, s) => a + s.batchSize, 0),
  );
  try {
    return await runBaselineOn(engines, row, common, ds, ctx);
  } finally {
    await engines.dispose();
  }
}

async function runBaselineOn(
  engines: EngineMaker,
  row: SimRow,
  common: SimCommon,
  ds: TextDataset,
  { log, progress }: RowContext,
): Promise<SimRunResult> {
  const config = modelConfig(common);
  const islands = row.kind === 'single' ? row.islands.slice(0, 1) : row.islands;
  const N = islands.length;
  const T = common.seqLen;
  const totalB = islands.reduce((a, s) => a + s.batchSize, 0);
  const engine = await engines.make({ config, maxBatch: totalB, maxT: T });
  await engine.setParams(common.init ?? initParams(config, common.seed));
  const evaluator = await Evaluator.create(engines, common, ds);
  const nParams = numParams(config);
  const big = allocBatch(totalB, T);
  const part = allocBatch(Math.max(...islands.map((s) => s.batchSize)), T);
  const tokensPerStep = totalB * T;
  const steps = Math.ceil(row.tokens / tokensPerStep);
  const plan: InnerLrPlan = {
    maxLr: row.lr.maxLr,
    minLr: row.lr.minLr,
    warmupTokens: row.lr.warmupTokens,
    totalTokens: row.tokens,
    tokensStart: 0,
    tokensPerStep,
    localWarmupSteps: 0,
  };
  // virtual time: the slowest island's compute, then a ring all-reduce of fp32 gradients
  const computeMs = Math.max(...islands.map((s) => (1000 * s.batchSize * T) / (s.speed * row.baseTokensPerSec)));
  const ringBytes = N > 1 ? ((2 * (N - 1)) / N) * 4 * nParams : 0;
  const commMs =
    N > 1
      ? Math.max(
          ...islands.map(
            (s) =>
              (1000 * ringBytes) / Math.min(s.network.upBytesPerSec, s.network.downBytesPerSec) +
              2 * (N - 1) * s.network.latencyMs,
          ),
        )
      : 0;
  const out = emptyResult(row, N);
  const evalEvery = row.tokens / common.evals;
  let nextEval = 0;
  let timeMs = 0;
  const curve: CurvePoint[] = [];
  // the metrics folder's rows (common.scalars): `atoll train`'s per step
  const rows: ScalarRow[] = [];
  const evalNow = async (step: number) => {
    const tokens = step * tokensPerStep;
    const l = await evaluator.loss(await engine.getParams());
    curve.push({ tokens, tokensComputed: tokens, timeMs, evalLoss: l, version: step });
    return l;
  };
  for (let s = 0; s < steps; s++) {
    if (s * tokensPerStep >= nextEval) {
      await evalNow(s);
      nextEval += evalEvery;
    }
    let o = 0;
    for (let i = 0; i < N; i++) {
      const B = islands[i].batchSize;
      sampleBatch(ds.train, B, T, common.seed, islandStream(i), s, part);
      big.inputs.set(part.inputs.subarray(0, B * T), o * T);
      big.targets.set(part.targets.subarray(0, B * T), o * T);
      o += B;
    }
    const lr = innerLearningRate(plan, s);
    await engine.step(big, { lr, gradClip: 1 });
    const losses = await engine.takeLosses();
    timeMs += computeMs + commMs;
    if (common.scalars)
      rows.push({
        step: s + 1,
        timeMs,
        scalars: { 'train/loss': losses[0] ?? null, 'lr/inner': lr, 'tokens/total': (s + 1) * tokensPerStep },
      });
    progress?.((s + 1) / steps);
  }
  const tokens = steps * tokensPerStep;
  out.evalLoss = await evalNow(steps);
  out.tokens = tokens;
  out.tokensComputed = tokens;
  out.bytesUpPerIsland = steps * ringBytes;
  out.bytesDownPerIsland = steps * ringBytes;
  out.commReductionVsDdp = row.kind === 'ddp' ? 1 : Infinity;
  out.virtualTimeMs = timeMs;
  out.versions = steps;
  out.curve = curve;
  if (common.scalars) out.scalars = [...rows, ...evalRows(curve)];
  out.perIsland = islands.map((s) => ({
    name: s.name,
    speed: s.speed,
    batchSize: s.batchSize,
    behaviour: s.behaviour,
    bytesUp: steps * ringBytes,
    bytesDown: steps * ringBytes,
    tokensComputed: steps * s.batchSize * T,
    rounds: steps,
    accepted: steps,
    acceptedTokens: steps * s.batchSize * T,
    rejected: {},
    drops: 0,
  }));
  log?.(`${row.name}: eval ${out.evalLoss.toFixed(4)} after ${tokens} tokens`);
  return out;
}
