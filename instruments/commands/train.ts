// `atoll train`: one island, locally, no server. Trains, evaluates on the held-out
// split every so often, and writes a safetensors checkpoint, and its scalars per step (loss, lr, tokens,
// eval) to <metrics>/scalars.jsonl and a TensorBoard event file (server/run/scalars.ts).

import { SingleBar, Presets } from 'cli-progress';
import { encodeCheckpoint } from '../../core/checkpoint.ts';
import { evalBatches, allocBatch } from '../../core/data/dataset.ts';
import { sampleShardBatch } from '../../core/data/shards.ts';
import type { Batch, TrainingEngine } from '../../core/engine/index.ts';
import { DEFAULT_BATCH, getPreset, numParams, type PresetName } from '../../core/model/config.ts';
import { initParams } from '../../core/model/gpt.ts';
import { learningRate, type LrSchedule } from '../../core/model/schedule.ts';
import { loadDataset } from '../../server/run/corpus.ts';
import { isShardDir, loadShardDir } from '../../server/run/shard-dir.ts';
import { checkVocab, checkpointTokenizer } from '../../core/data/tokenizer.ts';
import type { CpuEngineName } from '../../core/engine/cpu.ts';
import type { EngineKind } from '../../core/protocol.ts';
import { createEngine } from '../../client/island/engine/node-engines.ts';
import { type MemoryPlan, memoryPlan } from '../../client/island/engine/webgpu-plan.ts';
import { assertWritable, writeFileAtomic } from '../../server/fsutil.ts';
import { ScalarLog } from '../../server/run/scalars.ts';

export interface TrainOptions {
  preset: PresetName;
  steps: number;
  data?: string;
  out: string;
  json: boolean;
  engine: EngineKind | CpuEngineName;
  /** CPU (Wasm): threads the step runs on (default 1). */
  threads?: number;
  /** WebGPU: tune the matmuls at start (default true). */
  autotune?: boolean;
  /** Storage of activations, the matmuls' weight copy and Δ (default f32; master weights and Adam stay f32). */
  precision?: 'f32' | 'f16';
  batch?: number;
  /** WebGPU: sequences per forward and backward pass, their gradients added (default: the whole batch). */
  microBatch?: number;
  /** Tokens per sequence (default: the preset's context, blockSize); at most blockSize. */
  seqLen?: number;
  lr: number;
  seed: number;
  evalEvery: number;
  evalBatches: number;
  /** The folder of its scalars (default: the checkpoint's path less .safetensors, plus .metrics). */
  metrics?: string;
}

/** One step of the curve: after `step` steps (0: the init), `tokens` trained on. */
export interface TrainCurvePoint {
  step: number;
  tokens: number;
  lr: number | null;
  trainLoss: number | null;
  evalLoss: number | null;
}

/** The default folder of a checkpoint's scalars: ckpt.safetensors → ckpt.metrics/. */
export const metricsDirOf = (out: string) => `${out.replace(/\.safetensors$/, '')}.metrics`;

export interface TrainReport {
  preset: string;
  engine: string;
  device: string;
  params: number;
  steps: number;
  /** Tokens per sequence trained and evaluated on. */
  seqLen: number;
  tokens: number;
  trainLoss: number;
  trainLosses: number[];
  evalLossFirst: number;
  evalLossLast: number;
  tokensPerSec: number;
  precision: 'f32' | 'f16';
  /** WebGPU: the bytes the engine allocates on the device (its plan, webgpu-plan.ts); null on the CPU */
  gpuBytes: number | null;
  /** WebGPU: those bytes by category and the LM head's chunking (webgpu-plan.ts's memoryPlan); null on the CPU */
  memoryPlan: MemoryPlan | null;
  checkpoint: string;
  /** Every step's lr and train loss, and the evals (at step 0 and every --eval-every). */
  curve: TrainCurvePoint[];
  /** Where the scalars were written. */
  metrics: string;
}

async function meanEvalLoss(engine: TrainingEngine, batches: Batch[]): Promise<number> {
  let s = 0;
  for (const b of batches) s += await engine.evalLoss(b);
  return s / batches.length;
}

export { writeFileAtomic } from '../../server/fsutil.ts';

export async function train(o: TrainOptions): Promise<TrainReport> {
  assertWritable('--out', o.out, 'file'); // before any training
  const config = getPreset(o.preset);
  const B = o.batch ?? DEFAULT_BATCH[o.preset];
  const T = o.seqLen ?? config.blockSize;
  if (!Number.isInteger(T) || T < 1 || T > config.blockSize)
    throw Object.assign(
      new Error(`E_BAD_CONFIG: --seq-len ${T}: the ${o.preset} model's context is 1..${config.blockSize}`),
      {
        code: 'E_BAD_CONFIG',
      },
    );
  // the tokenizer is the one the preset's vocabulary fits; the data must be in its ids
  const tokenizer = checkpointTokenizer({}, config);
  // a shard folder is read and checked in full here, before the engine exists; a text is one train shard
  const shards = o.data && isShardDir(o.data) ? loadShardDir(o.data, tokenizer) : null;
  const data = shards ?? (await loadDataset(o.data, tokenizer));
  checkVocab(config, data.tokenizer);
  const trainParts = 'trainShards' in data ? data.trainShards : [data.train];
  const trainTokens = trainParts.reduce((a, s) => a + s.length, 0);
  const precision = o.precision ?? 'f32';
  const engineOpts = { config, maxBatch: B, maxT: T, precision, microBatch: o.microBatch };
  const engine = await createEngine(o.engine, engineOpts, { autotune: o.autotune, threads: o.threads, precision });
  // the engine's own plan where it has one (it names the device's binding limit and windows), else the options'
  const own = (engine as { memory?: MemoryPlan }).memory;
  const memory = o.engine === 'webgpu' ? (own ?? memoryPlan(engineOpts)) : null;
  const gpuBytes = memory?.total ?? null;
  try {
    await engine.setParams(initParams(config, o.seed));
    const evalSet = evalBatches(data.heldOut, B, T, o.evalBatches);
    const sched: LrSchedule = {
      maxLr: o.lr,
      minLr: o.lr / 10,
      warmup: Math.min(100, Math.ceil(o.steps / 10)),
      total: o.steps,
    };
    const log = (s: string) => {
      if (!o.json) process.stderr.write(s + '\n');
    };
    log(
      `atoll train: preset ${o.preset} (${numParams(config).toLocaleString()} params), engine ${engine.kind} on ` +
        `${engine.device}, data ${data.name} (${trainTokens.toLocaleString()} train / ` +
        `${data.heldOut.length.toLocaleString()} held-out ${tokenizer} tokens)`,
    );
    const evalLossFirst = await meanEvalLoss(engine, evalSet);
    let evalLossLast = evalLossFirst;
    const metrics = o.metrics ?? metricsDirOf(o.out);
    const scalars = new ScalarLog(metrics, { fresh: true });
    const tokensPerStep = B * T;
    const curve: TrainCurvePoint[] = [{ step: 0, tokens: 0, lr: null, trainLoss: null, evalLoss: evalLossFirst }];
    const record = (p: TrainCurvePoint) => {
      const at = curve[p.step];
      if (at) Object.assign(at, Object.fromEntries(Object.entries(p).filter(([, v]) => v !== null)));
      else curve[p.step] = p;
      scalars.write(p.step, Date.now(), {
        'train/loss': p.trainLoss,
        'eval/loss': p.evalLoss,
        'lr/inner': p.lr,
        'tokens/total': p.tokens,
      });
    };
    scalars.write(0, Date.now(), { 'eval/loss': evalLossFirst, 'tokens/total': 0 });
    const lrs: number[] = [];
    const bar = new SingleBar(
      {
        format: 'train |{bar}| {value}/{total} steps | loss {loss} | eval {evalLoss} | {tps} tok/s',
        stream: process.stderr,
        hideCursor: true,
        noTTYOutput: !o.json,
        notTTYSchedule: 5000,
      },
      Presets.shades_classic,
    );
    if (!o.json) bar.start(o.steps, 0, { loss: '-', evalLoss: evalLossFirst.toFixed(3), tps: '-' });
    const batch = allocBatch(B, T);
    const losses: number[] = [];
    let trainTime = 0;
    for (let step = 0; step < o.steps; step++) {
      const t0 = performance.now();
      sampleShardBatch(trainParts, B, T, o.seed, 0, step, batch);
      lrs.push(learningRate(sched, step));
      await engine.step(batch, { lr: lrs[step], gradClip: 1.0 });
      const last = step === o.steps - 1;
      if ((step + 1) % 10 === 0 || last) {
        // losses are read back in batches
        const from = losses.length;
        losses.push(...(await engine.takeLosses()));
        for (let i = from; i < losses.length; i++)
          record({ step: i + 1, tokens: (i + 1) * tokensPerStep, lr: lrs[i], trainLoss: losses[i], evalLoss: null });
      }
      trainTime += performance.now() - t0;
      if ((step + 1) % o.evalEvery === 0 || last) {
        evalLossLast = await meanEvalLoss(engine, evalSet);
        const n = step + 1;
        record({ step: n, tokens: n * tokensPerStep, lr: lrs[step], trainLoss: null, evalLoss: evalLossLast });
      }
      const tps = ((step + 1) * B * T) / (trainTime / 1000);
      if (!o.json)
        bar.update(step + 1, {
          loss: losses.length ? losses[losses.length - 1].toFixed(3) : '-',
          evalLoss: evalLossLast.toFixed(3),
          tps: tps.toFixed(0),
        });
    }
    if (!o.json) bar.stop();
    const params = await engine.getParams();
    const tokens = o.steps * B * T;
    writeFileAtomic(
      o.out,
      encodeCheckpoint({
        config,
        params,
        extra: {},
        meta: {
          preset: o.preset,
          steps: String(o.steps),
          tokens: String(tokens),
          evalLoss: String(evalLossLast),
          data: data.name,
          tokenizer,
        },
      }),
    );
    log(`wrote ${o.out}`);
    const tail = losses.slice(-Math.min(10, losses.length));
    return {
      preset: o.preset,
      engine: engine.kind,
      device: engine.device,
      params: numParams(config),
      steps: o.steps,
      seqLen: T,
      tokens,
      trainLoss: tail.reduce((a, b) => a + b, 0) / tail.length,
      trainLosses: losses,
      evalLossFirst,
      evalLossLast,
      tokensPerSec: tokens / (trainTime / 1000),
      precision,
      gpuBytes,
      memoryPlan: memory,
      checkpoint: o.out,
      curve,
      metrics,
    };
  } finally {
    engine.destroy();
  }
}
