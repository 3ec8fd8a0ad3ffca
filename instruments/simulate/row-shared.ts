// What a row's runs share: the model shape, the engines, held-out evaluation, the islands' data streams and
// the empty result a run fills in.

import type { VirtualClock } from './clock.ts';
import { type TextDataset, evalBatches, streamId } from '../../core/data/dataset.ts';
import type { Batch, TrainingEngine } from '../../core/engine/index.ts';
import { type GPTConfig, getPreset } from '../../core/model/config.ts';
import { type EngineMaker, engineMaker, holdClock } from './engines.ts';
import type { SimCommon, SimRow, SimRunResult } from './types.ts';
import { tokenizerOfVocab } from '../../core/data/tokenizer.ts';
import { loadCorpus } from '../../server/run/corpus.ts';

/** Island ids the coordinator hands out, in join order; baselines use the same data streams. */
export const islandStream = (i: number) => streamId(`island-${i + 1}`);

/** The row's model shape: a named preset, or the config the common settings carry (scaling rungs). */
export const modelConfig = (common: SimCommon): GPTConfig => common.config ?? getPreset(common.model);

/** The rows' data: `common.data`, a text or a folder of shards in the tokenizer the model's vocabulary fits. */
export const rowData = (common: SimCommon): TextDataset =>
  loadCorpus(common.data, tokenizerOfVocab(modelConfig(common).vocabSize) ?? 'byte');

/** Engines of a row; the largest batch it trains is `maxBatch` (evaluation's batch included). */
export async function rowEngines(common: SimCommon, maxBatch: number): Promise<EngineMaker> {
  const m = await engineMaker(common.engine ?? 'cpu', {
    config: modelConfig(common),
    maxBatch: Math.max(maxBatch, common.evalBatchSize),
    maxT: common.seqLen,
  });
  // common.adam (AdamW's betas) reaches every engine the row makes
  const adam = common.adam;
  return adam ? { kind: m.kind, make: (o) => m.make({ ...adam, ...o }), dispose: () => m.dispose() } : m;
}

/** Held-out evaluation of a parameter vector. */
export class Evaluator {
  private readonly batches: Batch[];
  constructor(
    private readonly engine: TrainingEngine,
    common: SimCommon,
    ds: TextDataset,
  ) {
    this.batches = evalBatches(ds.heldOut, common.evalBatchSize, common.seqLen, common.evalBatches);
  }
  static async create(
    engines: EngineMaker,
    common: SimCommon,
    ds: TextDataset,
    clock?: VirtualClock,
  ): Promise<Evaluator> {
    const e = await engines.make({ config: modelConfig(common), maxBatch: common.evalBatchSize, maxT: common.seqLen });
    return new Evaluator(clock && engines.kind !== 'cpu' ? holdClock(e, clock) : e, common, ds);
  }
  async loss(params: Float32Array): Promise<number> {
    await this.engine.setParams(params);
    let s = 0;
    for (const b of this.batches) s += await this.engine.evalLoss(b);
    return s / this.batches.length;
  }
}

export interface RowContext {
  common: SimCommon;
  ds?: TextDataset;
  log?: (line: string) => void;
  /** The row is this fraction of its token budget done. */
  progress?: (frac: number) => void;
}

export function emptyResult(row: SimRow, n: number): SimRunResult {
  return {
    name: row.name,
    kind: row.kind,
    mode: row.kind === 'diloco' ? row.mode : row.kind,
    codec: row.kind === 'diloco' ? row.codec.encoding + (row.codec.deflate ? '+deflate' : '') : 'f32 (all-reduce)',
    islands: n,
    evalLoss: NaN,
    evalLossSd: 0,
    seedLosses: [],
    tokens: 0,
    tokensComputed: 0,
    bytesUpPerIsland: 0,
    bytesDownPerIsland: 0,
    commReductionVsDdp: NaN,
    goodput: 1,
    accepted: 0,
    rejected: {},
    versions: 0,
    virtualTimeMs: 0,
    realTimeMs: 0,
    curve: [],
    perIsland: [],
    notes: [],
    server: { bytesIn: 0, bytesOut: 0, snapshotBytes: 0, inPerToken: NaN, outPerToken: NaN },
  };
}
