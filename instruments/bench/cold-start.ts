// `atoll bench cold-start`: what an island's first round does to the shared model, on the default
// run of a preset (its lr, batch, context, data split, eval batches and init, as `atoll serve` builds
// them), with and without the inner-lr warmup of a fresh AdamW state.
//
// One island, alone at v0, trains H steps and hands in Δ through the run's uplink codec; with one
// island online the server applies it as it is (soloPlainStep), so v1 = θ0 − decode(encode(Δ)). A
// round of H steps is the first H steps of one trajectory: one run gives every round length. A late
// joiner: θ after `late` steps of that island, then a second island with a fresh AdamW (and its own
// data stream) trains from it. The Wasm engine on one thread: the figures are deterministic.

import { createCpuEngine } from '../../core/engine/cpu.ts';
import { ErrorFeedback, decodeDelta, encodeWithFeedback } from '../../core/codec/index.ts';
import { allocBatch, evalBatches, sampleBatch, streamId } from '../../core/data/dataset.ts';
import type { Batch } from '../../core/engine/index.ts';
import { initParams } from '../../core/model/gpt.ts';
import { type InnerLrPlan, innerLearningRate } from '../../core/protocol.ts';
import { loadCorpus } from '../../server/run/corpus.ts';
import { buildRunConfig } from '../../server/run/config.ts';

export interface ColdStartOptions {
  preset: string;
  /** The run's `--codec` (default: the default run's uplink, sparse). */
  codec?: string;
  /** Round lengths (inner steps) to evaluate v1 after. */
  rounds: number[];
  /** Warmups to compare, in AdamW steps (0: none). */
  warmups: number[];
  /** A late joiner trains from θ after this many steps of the first island (0: none). */
  late: number;
  log?: (line: string) => void;
}

export interface ColdStartRow {
  /** 'cold': the first island at v0; 'late': a fresh AdamW on θ after `late` steps. */
  start: 'cold' | 'late';
  warmup: number;
  /** Held-out loss of the θ the round started from, and of v1 after each round length. */
  before: number;
  after: Record<number, number>;
}

export interface ColdStartReport {
  preset: string;
  codec: string;
  params: number;
  batch: number;
  seqLen: number;
  maxLr: number;
  late: number;
  rows: ColdStartRow[];
}

export async function benchColdStart(o: ColdStartOptions): Promise<ColdStartReport> {
  const run = buildRunConfig(null, { preset: o.preset, codec: o.codec });
  const cc = run.coordinator;
  const ds = loadCorpus(run.data);
  const B = cc.batchSize,
    T = cc.seqLen;
  const evalB = evalBatches(ds.heldOut, run.eval.batchSize, run.model.blockSize, run.eval.batches);
  const evaluator = await createCpuEngine('cpu', { config: run.model, maxBatch: run.eval.batchSize });
  const evalLoss = async (p: Float32Array) => {
    await evaluator.setParams(p);
    let s = 0;
    for (const b of evalB) s += await evaluator.evalLoss(b);
    return s / evalB.length;
  };
  const theta0 = initParams(run.model, run.seed);
  const batch = allocBatch(B, T);

  /** One island from θ with a fresh AdamW: v1 after each round length (and θ after `keepAt` steps). */
  const trajectory = async (
    theta: Float32Array,
    warmup: number,
    stream: string,
    keepAt = 0,
  ): Promise<{ after: Record<number, number>; kept: Float32Array | null }> => {
    const engine = await createCpuEngine('cpu', { config: run.model, maxBatch: B, maxT: T });
    await engine.setParams(theta);
    const plan: InnerLrPlan = {
      maxLr: cc.innerLr.maxLr,
      minLr: cc.innerLr.minLr,
      warmupTokens: 0,
      totalTokens: 0,
      tokensStart: 0,
      tokensPerStep: B * T,
      localWarmupSteps: warmup,
    };
    const after: Record<number, number> = {};
    let kept: Float32Array | null = null;
    const last = Math.max(...o.rounds, keepAt);
    for (let i = 0; i < last; i++) {
      const b: Batch = sampleBatch(ds.train, B, T, cc.dataSeed, streamId(stream), i, batch);
      await engine.step(b, { lr: innerLearningRate(plan, i), gradClip: cc.gradClip });
      await engine.takeLosses();
      if (o.rounds.includes(i + 1)) {
        const enc = encodeWithFeedback(await engine.readDelta(), new ErrorFeedback(theta.length), cc.uplink);
        if (!enc.ok) {
          after[i + 1] = NaN;
          continue;
        }
        const d = decodeDelta(enc.value.frame, theta.length);
        if (!d.ok) throw new Error(d.error.message);
        const v1 = theta.slice();
        for (let k = 0; k < v1.length; k++) v1[k] -= d.value[k];
        after[i + 1] = await evalLoss(v1);
        o.log?.(`${stream} warmup ${warmup}: ${i + 1} steps → ${after[i + 1].toFixed(3)}`);
      }
      if (i + 1 === keepAt) kept = await engine.getParams();
    }
    return { after, kept };
  };

  const rows: ColdStartRow[] = [];
  const v0 = await evalLoss(theta0);
  let warm: Float32Array | null = null;
  for (const w of o.warmups) {
    // the late joiner starts from θ after `late` steps of the first island (the first warmup listed)
    const t = await trajectory(theta0, w, 'island-1', warm ? 0 : o.late);
    warm ??= t.kept;
    rows.push({ start: 'cold', warmup: w, before: v0, after: t.after });
  }
  if (o.late > 0 && warm) {
    const before = await evalLoss(warm);
    for (const w of o.warmups)
      rows.push({ start: 'late', warmup: w, before, after: (await trajectory(warm, w, 'island-2')).after });
  }
  return {
    preset: o.preset,
    codec: cc.uplink.encoding,
    params: theta0.length,
    batch: B,
    seqLen: T,
    maxLr: cc.innerLr.maxLr,
    late: o.late,
    rows,
  };
}

export function formatColdStart(r: ColdStartReport): string {
  const lines = [
    `${r.preset} (${r.params.toLocaleString('en-US')} params, batch ${r.batch} × ${r.seqLen}, max lr ${r.maxLr}, ` +
      `${r.codec} uplink): held-out loss before → after one island's first round of H steps`,
  ];
  const hs = Object.keys(r.rows[0]?.after ?? {}).map(Number);
  lines.push(['start', 'warmup', 'before', ...hs.map((h) => `H=${h}`)].join('\t'));
  for (const row of r.rows)
    lines.push(
      [
        row.start === 'late' ? `late (θ after ${r.late} steps)` : 'cold (v0)',
        row.warmup,
        row.before.toFixed(3),
        ...hs.map((h) => row.after[h].toFixed(3)),
      ].join('\t'),
    );
  return lines.join('\n');
}
