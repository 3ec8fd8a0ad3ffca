// `atoll bench kernels`: our WGSL kernels and training step against TF.js's webgpu
// backend on the SAME Dawn adapter, in the same process, plus the CPU reference.
//
//  - matmul (instruments/bench/matmul.ts): GFLOP/s of the forward (out = inp·Wᵀ), dX (dinp = dout·W) and dW
//    (dW = doutᵀ·inp) products of every linear layer of the `small` and `base` presets,
//    ours (shaders/matmul.wgsl) vs tf.matMul with transpose flags, on identical data
//    (and checked against each other once per shape).
//  - training step: tokens/s of a full step of the `small` preset: WebGpuEngine
//    (step + takeLosses), the same GPT in TF.js (instruments/bench/tfjs-gpt.ts: autograd + Adam),
//    and JsEngine, all on the same batches.
//
// Timing: warm-up first (pipeline compilation), then `repeats` rounds that measure ours
// and TF.js in turn, each measurement `n` back-to-back products (n calibrated to ~100 ms)
// ending when the queue has drained (onSubmittedWorkDone). Figures are medians. Wall
// clock on both sides, so both pay their own dispatch overhead. bench/README.md has more.
//
// On a software adapter (SwiftShader) everything is scaled down (1 sequence per batch,
// 5 repeats per matmul shape rather than 7) so the whole run takes minutes; the figures then only mean something
// as ratios.

import { allocBatch, sampleBatch } from '../../core/data/dataset.ts';
import type { Batch, TrainingEngine } from '../../core/engine/index.ts';
import {
  DEFAULT_BATCH,
  flopsPerToken,
  type GPTConfig,
  getPreset,
  mfu,
  type PresetName,
} from '../../core/model/config.ts';
import { initParams } from '../../core/model/gpt.ts';
import { JsEngine } from '../../core/engine/js.ts';
import { estimateGpuBytes } from '../../client/island/engine/webgpu-plan.ts';
import { loadCorpus } from '../../server/run/corpus.ts';
import { createNodeGpu, type NodeGpu } from '../../client/island/engine/dawn.ts';
import { setupTfjsWebgpu, type TfWebgpu } from './tfjs-webgpu.ts';
import { drain, median, timeInterleaved } from './timing.ts';
import { type AttentionRow, benchAttention } from './attention.ts';
import { type TuneResult, choiceLabel } from '../../client/island/engine/webgpu-tune.ts';
import { benchHalf, type HalfRow } from './half.ts';
import { type KernelTime, kernelShares } from '../../client/island/engine/webgpu-profile.ts';
import { type MatmulRow, benchMatmul, isSoftware } from './matmul.ts';

export interface KernelBenchOptions {
  /** Peak of the adapter in TFLOP/s (fp32); adds MFU figures. */
  peakTflops?: number;
  /** Fewer shapes (small preset only), fewer repeats and steps. */
  quick?: boolean;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
  /** Train step: tune the matmuls at engine start (default true; cached in a file). */
  autotune?: boolean;
  /** Time each kernel of a training step (timestamp-query). */
  profile?: boolean;
}

export interface TrainStepResult {
  preset: PresetName;
  batch: number;
  T: number;
  steps: number;
  ours_tokens_per_sec: number;
  /** our engine with --precision f16 */
  ours_f16_tokens_per_sec: number;
  tfjs_tokens_per_sec: number;
  cpu_tokens_per_sec: number;
  /** ours / TF.js */
  ratio_vs_tfjs: number;
  /** ours with f16 storage / TF.js */
  ratio_f16_vs_tfjs: number;
  /** ours / CPU */
  ratio_vs_cpu: number;
  /** training FLOPs per token (core/model/config.ts flopsPerToken) */
  flops_per_token: number;
  ours_loss: number[];
  ours_f16_loss: number[];
  tfjs_loss: number[];
  cpu_loss: number[];
  ours_mfu?: number;
  tfjs_mfu?: number;
}

export interface KernelBenchResult {
  adapter: {
    description: string;
    vendor: string;
    architecture: string;
    device: string;
    isFallbackAdapter: boolean;
    /** vendor and architecture of the adapter TF.js's own device came from */
    tfjs_description: string;
    /** TF.js's adapter has our adapter's vendor and architecture */
    same_adapter: boolean;
  };
  settings: { quick: boolean; matmul_repeats: number; target_ms: number; peak_tflops?: number };
  matmul: MatmulRow[];
  matmul_summary: { geomean_ratio: number; min_ratio: number; max_ratio: number };
  /** flash attention (forward + backward) against the kernels it replaced */
  attention: AttentionRow[];
  /** the bandwidth-bound kernels, f32 against their f16-storage forms (instruments/bench/half.ts) */
  half: HalfRow[];
  trainStep: TrainStepResult;
  /** bytes our engine holds on the device for the train-step model */
  gpuBytes: number;
  /** the train-step engine's matmul autotuner: choice per shape, where it came from, variant timings */
  autotune: TuneResult['report'] | null;
  /** with --profile: GPU ms per entry point over one training step (timestamp-query) and its share */
  profile: { step_gpu_ms: number; kernels: ReturnType<typeof kernelShares> } | null;
  /**
   * bytes the engine allocates per preset, batch (at T = blockSize) and precision: nothing is allocated per step, so
   * this is the peak
   */
  memory: Array<{ preset: PresetName; batch: number; precision: 'f32' | 'f16'; bytes: number }>;
  seconds: number;
}

// ------------------------------------------------------------------ training step

interface StepTimer {
  /** Queue `n` steps on the given batches and wait for their losses. Returns the losses. */
  steps(batches: Batch[]): Promise<number[]>;
  dispose(): void | Promise<void>;
}

function engineTimer(engine: TrainingEngine, lr: number): StepTimer {
  return {
    async steps(batches) {
      for (const b of batches) await engine.step(b, { lr, gradClip: 1 });
      return engine.takeLosses();
    },
    dispose() {
      engine.destroy();
    },
  };
}

async function tfjsTimer(_tfw: TfWebgpu, config: GPTConfig, init: Float32Array, lr: number): Promise<StepTimer> {
  const { TfGpt, tfBatch } = await import('./tfjs-gpt.ts');
  const model = new TfGpt({ config, init, lr });
  return {
    async steps(batches) {
      for (const b of batches) {
        const { x, y } = tfBatch(b.inputs, b.targets, b.B, b.T);
        model.step(x, y);
        x.dispose();
        y.dispose();
      }
      return model.takeLosses();
    },
    dispose() {
      model.dispose();
    },
  };
}

// ------------------------------------------------------------------ the bench
const TRAIN_PRESET: PresetName = 'small';

/**
 * The training-step half of the bench: tokens/s of ours, TF.js and the CPU reference on
 * the `small` preset, from the same init on the same batches. Each runs its warm-up
 * steps, then `rounds` rounds time each of them in turn (interleaved, like the matmuls);
 * the figure is the median over rounds.
 */
export async function benchTrainStep(
  gpu: NodeGpu,
  tfw: TfWebgpu,
  o: {
    quick?: boolean;
    software?: boolean;
    peakTflops?: number;
    autotune?: boolean;
    profile?: boolean;
    log?: (s: string) => void;
  },
): Promise<{
  trainStep: TrainStepResult;
  gpuBytes: number;
  autotune: TuneResult['report'] | null;
  profile: KernelBenchResult['profile'];
}> {
  const quick = !!o.quick;
  const software = o.software ?? isSoftware(gpu);
  const log = o.log ?? (() => {});
  const { WebGpuEngine } = await import('../../client/island/engine/webgpu.ts');
  const config = getPreset(TRAIN_PRESET);
  // software adapter: one sequence of 64 (half the block) keeps a step within seconds
  const B = software ? 1 : DEFAULT_BATCH[TRAIN_PRESET];
  const T = software ? Math.min(64, config.blockSize) : config.blockSize;
  const engineOpts = { config, maxBatch: B, maxT: T };
  const warmup = software ? 1 : 3;
  const rounds = quick ? (software ? 1 : 3) : 5;
  const perRound = software ? 1 : 5; // GPU steps per round (the CPU does one)
  const cpuRounds = Math.min(rounds, 2);
  const data = loadCorpus();
  const nBatches = warmup + rounds * perRound;
  const batches: Batch[] = [];
  for (let s = 0; s < nBatches; s++) batches.push(sampleBatch(data.train, B, T, 1234, 0, s, allocBatch(B, T)));
  const init = initParams(config, 1234);
  const lr = 1e-3;
  log(
    `train step: preset ${TRAIN_PRESET}, B=${B}, T=${T}: ${warmup} warm-up step(s), then ${rounds} round(s) of ` +
      `${perRound} step(s) each (CPU: 1 step, ${cpuRounds} round(s))`,
  );

  const { fileTuneCache } = await import('../../client/island/engine/tune-cache.ts');
  const engine = await WebGpuEngine.create(gpu.device, {
    ...engineOpts,
    adapterInfo: gpu.info.description,
    peakTflops: o.peakTflops,
    autotune: o.autotune === false ? undefined : { cache: fileTuneCache(), budgetMs: Infinity },
  }); // every shape tuned (or cached): the bench measures the tuned engine
  if (engine.tuning)
    log(
      `  autotune (${engine.tuning.ms.toFixed(0)} ms): ` +
        `${engine.tuning.report.map((r) => `${r.shape} ${choiceLabel(r.chosen)} (${r.from})`).join(', ')}`,
    );
  const engine16 = await WebGpuEngine.create(gpu.device, {
    ...engineOpts,
    precision: 'f16',
    adapterInfo: gpu.info.description,
    autotune: o.autotune === false ? undefined : { cache: fileTuneCache(), budgetMs: Infinity },
  });
  const cpu = new JsEngine(engineOpts);
  let tfTimer: StepTimer | null = null;
  try {
    await engine.setParams(init);
    await engine16.setParams(init);
    await cpu.setParams(init);
    tfTimer = await tfjsTimer(tfw, config, init, lr);
    const timers: Array<[string, StepTimer, number]> = [
      ['ours', engineTimer(engine, lr), perRound],
      ['ours_f16', engineTimer(engine16, lr), perRound],
      ['tfjs', tfTimer, perRound],
      ['cpu', engineTimer(cpu, lr), 1],
    ];
    const tps: Record<string, number[]> = { ours: [], ours_f16: [], tfjs: [], cpu: [] };
    const losses: Record<string, number[]> = { ours: [], ours_f16: [], tfjs: [], cpu: [] };
    for (const [name, t] of timers) losses[name].push(...(await t.steps(batches.slice(0, warmup))));
    for (let r = 0; r < rounds; r++) {
      for (const [name, t, k] of timers) {
        if (name === 'cpu' && r >= cpuRounds) continue;
        const chunk = batches.slice(warmup + r * perRound, warmup + r * perRound + k);
        const t0 = performance.now();
        losses[name].push(...(await t.steps(chunk)));
        const sec = (performance.now() - t0) / 1e3;
        tps[name].push(chunk.reduce((a, b) => a + b.B * b.T, 0) / sec);
      }
      log(
        `  round ${r + 1}/${rounds}: ours ${tps.ours[r].toFixed(1)}, ours f16 ${tps.ours_f16[r].toFixed(1)}, tfjs ` +
          `${tps.tfjs[r].toFixed(1)}${r < cpuRounds ? `, cpu ${tps.cpu[r].toFixed(1)}` : ''} tok/s`,
      );
    }
    const ours = median(tps.ours),
      ours16 = median(tps.ours_f16),
      tfjs = median(tps.tfjs),
      cpuTps = median(tps.cpu);
    const trainStep: TrainStepResult = {
      preset: TRAIN_PRESET,
      batch: B,
      T,
      steps: rounds * perRound,
      ours_tokens_per_sec: ours,
      ours_f16_tokens_per_sec: ours16,
      tfjs_tokens_per_sec: tfjs,
      cpu_tokens_per_sec: cpuTps,
      ratio_vs_tfjs: ours / tfjs,
      ratio_f16_vs_tfjs: ours16 / tfjs,
      ratio_vs_cpu: ours / cpuTps,
      flops_per_token: flopsPerToken(config, T),
      ours_loss: losses.ours,
      ours_f16_loss: losses.ours_f16,
      tfjs_loss: losses.tfjs,
      cpu_loss: losses.cpu,
    };
    if (o.peakTflops) {
      trainStep.ours_mfu = engine.mfu(ours, T) ?? undefined;
      trainStep.tfjs_mfu = mfu(config, tfjs, o.peakTflops * 1e12, T);
    }
    log(
      `  losses: ours ${losses.ours.map((l) => l.toFixed(3)).join(' ')} | ours f16 ` +
        `${losses.ours_f16.map((l) => l.toFixed(3)).join(' ')} | tfjs ` +
        `${losses.tfjs.map((l) => l.toFixed(3)).join(' ')} | cpu ${losses.cpu.map((l) => l.toFixed(3)).join(' ')}`,
    );
    let profile: KernelBenchResult['profile'] = null;
    if (o.profile) {
      // the median of three profiled steps, per kernel (each dispatch in its own pass: the total is above a normal
      // step's)
      const runs: KernelTime[][] = [];
      for (let i = 0; i < 3; i++) runs.push(await engine.profileStep(batches[i % batches.length], { lr, gradClip: 1 }));
      await engine.takeLosses();
      const total = (r: KernelTime[]) => r.reduce((a, t) => a + t.ms, 0);
      const mid = [...runs].sort((a, b) => total(a) - total(b))[1];
      profile = { step_gpu_ms: total(mid), kernels: kernelShares(mid) };
      log(
        `  profile (GPU ms of one step, timestamp-query): ${total(mid).toFixed(1)} ms; ${profile.kernels
          .slice(0, 6)
          .map((k) => `${k.entry} ${(100 * k.share).toFixed(1)}%`)
          .join(', ')}`,
      );
    }
    return { trainStep, gpuBytes: engine.gpuBytes, autotune: engine.tuning?.report ?? null, profile };
  } finally {
    engine.destroy();
    engine16.destroy();
    await tfTimer?.dispose();
  }
}

const HALF_REPEATS = 7;
const HALF_TARGET_MS = 500;

export async function benchKernels(opts: KernelBenchOptions = {}): Promise<KernelBenchResult> {
  const t0 = performance.now();
  const log = opts.log ?? (() => {});
  const quick = !!opts.quick;
  // The engine's limits decide the device (requested limits below WebGPU's defaults
  // leave the defaults, which the matmul shapes fit in).
  const { requiredLimits } = await import('../../client/island/engine/webgpu.ts');
  const { ENGINE_FEATURES } = await import('../../client/island/engine/webgpu.ts');
  const gpu: NodeGpu = await createNodeGpu({
    requiredLimits: requiredLimits({ config: getPreset(TRAIN_PRESET), maxBatch: DEFAULT_BATCH[TRAIN_PRESET] }),
    optionalFeatures: ENGINE_FEATURES,
  });
  const software = isSoftware(gpu);
  let tfw: TfWebgpu | null = null;
  try {
    tfw = await setupTfjsWebgpu(gpu);
    log(
      `adapter: ${gpu.info.description} ` +
        `(${gpu.info.vendor}${gpu.info.isFallbackAdapter ? ', fallback adapter' : ''}); ` +
        `TF.js: ${tfw.description}`,
    );

    // ---- matmul
    const mm = await benchMatmul(gpu, tfw, {
      quick,
      software,
      peakTflops: opts.peakTflops,
      autotune: opts.autotune,
      log,
    });

    // ---- attention: the flash kernels against the old ones
    const attention = await benchAttention(gpu.device, {
      software,
      time: timeInterleaved,
      drain,
      repeats: mm.repeats,
      targetMs: mm.targetMs,
      log,
    });

    // ---- f16 storage against f32 on the bandwidth-bound kernels
    // these kernels take 3–200 ms on a software adapter: ≥ 0.5 s a measurement and ≥ 7 of them,
    // so that a moment of load on a shared machine is a small part of each (both forms alike)
    const half = await benchHalf(gpu.device, {
      time: timeInterleaved,
      drain,
      repeats: Math.max(mm.repeats, HALF_REPEATS),
      targetMs: Math.max(mm.targetMs, HALF_TARGET_MS),
      log,
    });

    // ---- training step
    const { trainStep, gpuBytes, autotune, profile } = await benchTrainStep(gpu, tfw, {
      quick,
      software,
      peakTflops: opts.peakTflops,
      autotune: opts.autotune,
      profile: opts.profile,
      log,
    });

    return {
      adapter: {
        description: gpu.info.description,
        vendor: gpu.info.vendor,
        architecture: gpu.info.architecture,
        device: gpu.info.device,
        isFallbackAdapter: gpu.info.isFallbackAdapter,
        tfjs_description: tfw.description,
        same_adapter: tfw.description === `${gpu.info.vendor} ${gpu.info.architecture}`.trim(),
      },
      settings: {
        quick,
        matmul_repeats: mm.repeats,
        target_ms: mm.targetMs,
        ...(opts.peakTflops ? { peak_tflops: opts.peakTflops } : {}),
      },
      matmul: mm.rows,
      matmul_summary: mm.summary,
      attention,
      half,
      trainStep,
      gpuBytes,
      autotune,
      profile,
      memory: memoryTable(),
      seconds: (performance.now() - t0) / 1e3,
    };
  } finally {
    await tfw?.dispose();
    await gpu.dispose();
  }
}

/** Bytes the engine allocates per preset and batch (estimateGpuBytes: what create() allocates). */
function memoryTable(): KernelBenchResult['memory'] {
  const out: KernelBenchResult['memory'] = [];
  for (const precision of ['f32', 'f16'] as const) {
    for (const preset of ['tiny', 'small', 'base'] as const)
      for (const batch of [1, 4, 8, 16])
        out.push({
          preset,
          batch,
          precision,
          bytes: estimateGpuBytes({ config: getPreset(preset), maxBatch: batch, precision }),
        });
  }
  return out;
}

/** The human-readable report. */
export function formatKernelBench(r: KernelBenchResult): string {
  const f = (x: number, d = 2) => x.toFixed(d);
  const mfu = (x: number | undefined, d: number) => (x !== undefined ? `  MFU ${(100 * x).toFixed(d)}%` : '');
  const lines: string[] = [];
  const software = r.adapter.isFallbackAdapter
    ? ', fallback/software adapter: figures are only meaningful as ratios'
    : '';
  lines.push(`adapter: ${r.adapter.description} (${r.adapter.vendor}${software})`);
  const same = r.adapter.same_adapter ? ' (the same)' : ' (NOT the same adapter: ratios compare different hardware)';
  lines.push(`TF.js adapter: ${r.adapter.tfjs_description}${same}`);
  lines.push('');
  lines.push('matmul (GFLOP/s, median)                          ours       TF.js    ours/TF.js');
  for (const m of r.matmul) {
    lines.push(
      `  ${m.shape.padEnd(44)} ${f(m.ours_gflops).padStart(9)} ${f(m.tfjs_gflops).padStart(11)} ` +
        `${('×' + f(m.ratio)).padStart(10)}${mfu(m.ours_mfu, 1)}`,
    );
  }
  const s = r.matmul_summary;
  const range = `min ×${f(s.min_ratio)}, max ×${f(s.max_ratio)}`;
  lines.push(`  ratio: geomean ×${f(s.geomean_ratio)}, ${range}  (goal ≥ ×1.5)`);
  lines.push('');
  lines.push('attention forward + backward (ms, median)        old      flash   speedup');
  for (const a of r.attention)
    lines.push(
      `  ${a.shape.padEnd(44)} ${f(a.old_ms).padStart(8)} ${f(a.new_ms).padStart(9)} ` +
        `${('×' + f(a.speedup)).padStart(9)}  (goal ≥ ×3 at T=256)`,
    );
  lines.push('');
  lines.push('f16 storage vs f32, bandwidth-bound kernels (ms, median)   f32       f16   speedup');
  for (const h of r.half)
    lines.push(
      `  ${(h.kernel + ' ' + h.shape).padEnd(52)} ${f(h.f32_ms, 3).padStart(8)} ${f(h.f16_ms, 3).padStart(9)} ` +
        `${('×' + f(h.speedup)).padStart(8)}  (goal ≥ ×1.3)`,
    );
  lines.push('');
  const t = r.trainStep;
  lines.push(`training step, preset ${t.preset} (B=${t.batch}, T=${t.T}), tokens/s:`);
  lines.push(`  ours (WebGPU)  ${f(t.ours_tokens_per_sec, 1)}${mfu(t.ours_mfu, 2)}`);
  lines.push(`  ours, f16      ${f(t.ours_f16_tokens_per_sec, 1)}  (×${f(t.ratio_f16_vs_tfjs)} vs TF.js)`);
  lines.push(`  TF.js (WebGPU) ${f(t.tfjs_tokens_per_sec, 1)}${mfu(t.tfjs_mfu, 2)}`);
  lines.push(`  CPU reference  ${f(t.cpu_tokens_per_sec, 1)}`);
  lines.push(`  ours/TF.js ×${f(t.ratio_vs_tfjs)} (goal ≥ ×5), ours/CPU ×${f(t.ratio_vs_cpu)}`);
  lines.push(`gpuBytes: ${r.gpuBytes.toLocaleString()} (${(r.gpuBytes / 2 ** 20).toFixed(1)} MiB)`);
  if (r.profile) {
    lines.push(
      '',
      `profile: one training step, ${f(r.profile.step_gpu_ms, 1)} GPU ms (timestamp-query, one pass per dispatch)`,
    );
    for (const k of r.profile.kernels)
      lines.push(
        `  ${k.entry.padEnd(36)} ${f(k.ms).padStart(9)} ms ${(100 * k.share).toFixed(1).padStart(6)}%  ` +
          `(${k.dispatches} dispatches)`,
      );
  }
  lines.push('', 'peak GPU bytes (MiB) by preset, batch and precision, T = blockSize (goal: base B=8 ≤ 450):');
  for (const prec of ['f32', 'f16'] as const) {
    for (const p of ['tiny', 'small', 'base'] as const)
      lines.push(
        `  ${prec} ${p.padEnd(6)} ${r.memory
          .filter((m) => m.preset === p && m.precision === prec)
          .map((m) => `B=${m.batch}: ${(m.bytes / 2 ** 20).toFixed(1)}`)
          .join('  ')}`,
      );
  }
  lines.push(`took ${f(r.seconds, 0)} s`);
  return lines.join('\n');
}
