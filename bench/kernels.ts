// `atoll bench kernels`: our WGSL kernels and training step against TF.js's webgpu
// backend on the SAME Dawn adapter, in the same process, plus the CPU reference.
//
//  - matmul: GFLOP/s of the forward (out = inp·Wᵀ), dX (dinp = dout·W) and dW
//    (dW = doutᵀ·inp) products of every linear layer of the `small` and `base` presets,
//    ours (shaders/matmul.wgsl) vs tf.matMul with transpose flags, on identical data
//    (and checked against each other once per shape).
//  - training step: tokens/s of a full step of the `small` preset: WebGpuEngine
//    (step + takeLosses), the same GPT in TF.js (bench/tfjs-gpt.ts: autograd + Adam),
//    and CpuEngine, all on the same batches.
//
// Timing: warm-up first (pipeline compilation), then `repeats` rounds that measure ours
// and TF.js in turn, each measurement `n` back-to-back products (n calibrated to ~100 ms)
// ending when the queue has drained (onSubmittedWorkDone). Figures are medians. Wall
// clock on both sides, so both pay their own dispatch overhead. bench/README.md has more.
//
// On a software adapter (SwiftShader) everything is scaled down (1 sequence per batch,
// 5 repeats per matmul shape rather than 7) so the whole run takes minutes; the figures then only mean something
// as ratios.

import { allocBatch, sampleBatch } from '../core/data/dataset.ts';
import type { Batch, TrainingEngine } from '../core/engine.ts';
import { DEFAULT_BATCH, flopsPerToken, type GPTConfig, getPreset, mfu, type PresetName } from '../core/model/config.ts';
import { initParams } from '../core/model/gpt.ts';
import { CpuEngine } from '../client/engine/cpu.ts';
import { estimateGpuBytes } from '../client/engine/webgpu-plan.ts';
import { loadCorpus } from '../server/corpus.ts';
import { createNodeGpu, type NodeGpu } from '../server/gpu.ts';
import { KernelSet, Program, readF32 } from '../client/engine/webgpu-kernels.ts';
import type { DispatchSpec, Shape } from '../shaders/kernel.ts';
import * as op from '../shaders/ops.ts';
import { setupTfjsWebgpu, type TfWebgpu } from './tfjs-webgpu.ts';
import { drain, geomean, median, randomArray, sleep, timeInterleaved } from './timing.ts';
import { benchHalf, type HalfRow } from './half.ts';
import { type AttentionRow, benchAttention, submitPasses } from './attention.ts';
import { type MatmulChoice, type TuneResult, autotuneMatmuls, choiceLabel, defaultChoice, tuneKey, tunedDims } from '../client/engine/webgpu-tune.ts';
import { type KernelTime, kernelShares } from '../client/engine/webgpu-profile.ts';

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

export type MatmulPass = 'fwd' | 'dX' | 'dW';

export interface MatmulRow {
  /** e.g. "small.fc.fwd 1024x192 * (768x192)^T" */
  shape: string;
  preset: PresetName;
  layer: string;
  pass: MatmulPass;
  /** out (M,N) = A (M,K) · B (K,N) in the pass's own orientation */
  M: number;
  N: number;
  K: number;
  ours_gflops: number;
  tfjs_gflops: number;
  /** ours / TF.js */
  ratio: number;
  ours_ms: number;
  tfjs_ms: number;
  /** max |ours − TF.js| / max |TF.js| on this shape */
  max_rel_err: number;
  /** our variant: the autotuner's choice for this pass and rows (the default with --no-autotune) */
  variant: string;
  ours_mfu?: number;
  tfjs_mfu?: number;
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
  /** the bandwidth-bound kernels, f32 against their f16-storage forms (bench/half.ts) */
  half: HalfRow[];
  trainStep: TrainStepResult;
  /** bytes our engine holds on the device for the train-step model */
  gpuBytes: number;
  /** the train-step engine's matmul autotuner: choice per shape, where it came from, variant timings */
  autotune: TuneResult['report'] | null;
  /** with --profile: GPU ms per entry point over one training step (timestamp-query) and its share */
  profile: { step_gpu_ms: number; kernels: ReturnType<typeof kernelShares> } | null;
  /** bytes the engine allocates per preset, batch (at T = blockSize) and precision: nothing is allocated per step, so this is the peak */
  memory: Array<{ preset: PresetName; batch: number; precision: 'f32' | 'f16'; bytes: number }>;
  seconds: number;
}

// ------------------------------------------------------------------ our matmul (shaders/matmul.wgsl)

// We time exactly the dispatches the engine records: the specs of
// shaders/matmul.ts (matmulForward / matmulBackward: entry point, vec4
// choice, uniforms, grid), built into a Program of client/engine/webgpu-kernels.ts.

interface OurMatmul {
  /** Our result, for the cross-check. */
  read(): Promise<Float32Array>;
  run(n: number, expectMs: number): Promise<void>;
  destroy(): void;
}

class OurMatmulHarness {
  private readonly kernels: KernelSet;

  constructor(private readonly device: GPUDevice) {
    this.kernels = new KernelSet(device);
  }

  private storage(data: Float32Array | number): GPUBuffer {
    const n = typeof data === 'number' ? data : data.length;
    const buf = this.device.createBuffer({
      size: Math.max(16, Math.ceil((n * 4) / 16) * 16),
      usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
      mappedAtCreation: typeof data !== 'number',
    });
    if (typeof data !== 'number') {
      new Float32Array(buf.getMappedRange()).set(data);
      buf.unmap();
    }
    return buf;
  }

  /**
   * One pass of a linear layer (rows = B·T, in = C, out = OC), as the engine dispatches it:
   *   fwd: out = inp · Wᵀ + bias (W and bias in the params buffer)
   *   dX:  dinp = dout · W          (overwrite, as for the first writer)
   *   dW:  dW = doutᵀ · inp         (overwrite)
   */
  /** The autotuner's choice for the case's pass and rows (timed afresh: no cache, no budget). */
  async tune(c: MatmulCase, adapter: string): Promise<MatmulChoice | undefined> {
    const r = await autotuneMatmuls(this.device, this.kernels, [{ pass: c.pass, C: c.cin, OC: c.cout }], c.rows, { adapter, cache: null, budgetMs: Infinity });
    return r.report[0].chosen;
  }

  async prepare(c: MatmulCase, inp: Float32Array, w: Float32Array, dout: Float32Array, bias: Float32Array | null, choice?: MatmulChoice): Promise<OurMatmul> {
    const device = this.device;
    const tuned = tunedDims(new Map(choice ? [[tuneKey({ pass: c.pass, C: c.cin, OC: c.cout }), choice]] : []), c.cin, c.cout);
    const dims = { C: c.cin, OC: c.cout, wOff: 0, biasOff: bias ? w.length : null, ...(c.pass === 'fwd' ? tuned.fwd : tuned.bwd) };
    const params = new Float32Array(w.length + (bias?.length ?? 0));
    params.set(w);
    if (bias) params.set(bias, w.length);
    const bufParams = this.storage(params);
    const owned: GPUBuffer[] = [bufParams];
    let out: GPUBuffer, outLen: number, specs: DispatchSpec[];
    if (c.pass === 'fwd') {
      const bufInp = this.storage(inp);
      out = this.storage(c.rows * c.cout); outLen = c.rows * c.cout;
      owned.push(bufInp, out);
      specs = [op.matmulForward(out, bufInp, bufParams, dims)];
    } else {
      const bufInp = this.storage(inp), bufDout = this.storage(dout);
      const grads = this.storage(params.length);
      owned.push(bufInp, bufDout, grads);
      if (c.pass === 'dX') {
        out = this.storage(c.rows * c.cin); outLen = c.rows * c.cin;
        owned.push(out);
        specs = [op.matmulBackward(out, grads, bufDout, bufInp, bufParams, { ...dims, biasOff: null, partials: grads })[0]];
      } else {
        // dW as the engine records it: direct, or split-K slices into scratch plus their reduce
        // (the shape picks which; the other dispatches have an empty grid and are skipped)
        const partials = this.storage(op.partialsScratch(c.cout * c.cin, c.rows, c.cout));
        owned.push(partials);
        out = grads; outLen = c.cout * c.cin;
        specs = op.matmulBackward(null, grads, bufDout, bufInp, bufParams, { ...dims, biasOff: null, partials });
      }
    }
    const T = c.rows % 128 === 0 ? 128 : c.rows;
    const shape: Shape = { B: c.rows / T, T };
    const program = await Program.build(this.kernels, specs, shape, undefined, `bench.${c.pass}`);
    program.setShape(shape);
    return {
      async run(n, expectMs) {
        submitPasses(device, n, (pass) => program.encode(pass, shape));
        await drain(device, expectMs);
      },
      read: () => readF32(device, out, outLen),
      destroy() {
        program.destroy();
        for (const buf of owned) buf.destroy();
      },
    };
  }
}

// ------------------------------------------------------------------ shapes

export interface MatmulCase {
  preset: PresetName;
  layer: string;
  pass: MatmulPass;
  /** rows of the layer input (B·T), its in and out features */
  rows: number;
  cin: number;
  cout: number;
  bias: boolean;
}

/** The linear layers of a preset: (name, in, out, has bias). The head is tied to wte (no bias). */
function linearLayers(c: GPTConfig): Array<[string, number, number, boolean]> {
  const C = c.nEmbd;
  return [
    ['qkv', C, 3 * C, true],
    ['attproj', C, C, true],
    ['fc', C, 4 * C, true],
    ['fcproj', 4 * C, C, true],
    ['head', C, c.vocabSize, false],
  ];
}

/**
 * The shapes: every linear layer of `small` and `base` (rows = batch·blockSize), three
 * passes each. `quick`: `small` only, without attproj and head. `software`: base without
 * attproj and head (their shapes are like qkv's), to keep a SwiftShader run short.
 */
export function matmulCases(quick: boolean, batchFor: (p: PresetName) => number, software = false): MatmulCase[] {
  const presets: PresetName[] = quick ? ['small'] : ['small', 'base'];
  const out: MatmulCase[] = [];
  for (const preset of presets) {
    const c = getPreset(preset);
    const rows = batchFor(preset) * c.blockSize;
    for (const [layer, cin, cout, bias] of linearLayers(c)) {
      if ((quick || (software && preset === 'base')) && (layer === 'attproj' || layer === 'head')) continue;
      for (const pass of ['fwd', 'dX', 'dW'] as const) out.push({ preset, layer, pass, rows, cin, cout, bias });
    }
  }
  return out;
}

/** (M, N, K) of a pass: fwd (rows, out, in), dX (rows, in, out), dW (out, in, rows). */
function mnk(c: MatmulCase): [number, number, number] {
  if (c.pass === 'fwd') return [c.rows, c.cout, c.cin];
  if (c.pass === 'dX') return [c.rows, c.cin, c.cout];
  return [c.cout, c.cin, c.rows];
}

function shapeLabel(c: MatmulCase): string {
  const { rows: R, cin: I, cout: O } = c;
  const expr = c.pass === 'fwd' ? `${R}x${I} * (${O}x${I})^T` : c.pass === 'dX' ? `${R}x${O} * ${O}x${I}` : `(${R}x${O})^T * ${R}x${I}`;
  return `${c.preset}.${c.layer}.${c.pass} ${expr}`;
}

async function benchMatmulCase(c: MatmulCase, ours: OurMatmulHarness, tfw: TfWebgpu, targetMs: number, repeats: number, peakTflops?: number, choice?: MatmulChoice): Promise<MatmulRow> {
  const tf = tfw.tf;
  const [M, N, K] = mnk(c);
  const seed = M * 31 + N * 7 + K;
  // the operands of the pass, in the memory order both sides read them
  const inp = randomArray(c.rows * c.cin, seed + 1);     // (rows, in)
  const w = randomArray(c.cout * c.cin, seed + 2);       // (out, in)
  const dout = randomArray(c.rows * c.cout, seed + 3);   // (rows, out)
  const bias = c.pass === 'fwd' && c.bias ? randomArray(c.cout, seed + 4) : null;
  let tfRun: () => import('@tensorflow/tfjs').Tensor;
  let ta: import('@tensorflow/tfjs').Tensor2D, tb: import('@tensorflow/tfjs').Tensor2D;
  if (c.pass === 'fwd') {
    ta = tf.tensor2d(inp, [c.rows, c.cin]); tb = tf.tensor2d(w, [c.cout, c.cin]);
    tfRun = () => tf.matMul(ta, tb, false, true);
  } else if (c.pass === 'dX') {
    ta = tf.tensor2d(dout, [c.rows, c.cout]); tb = tf.tensor2d(w, [c.cout, c.cin]);
    tfRun = () => tf.matMul(ta, tb, false, false);
  } else {
    ta = tf.tensor2d(dout, [c.rows, c.cout]); tb = tf.tensor2d(inp, [c.rows, c.cin]);
    tfRun = () => tf.matMul(ta, tb, true, false);
  }
  const flop = 2 * M * N * K;

  const mm = await ours.prepare(c, inp, w, dout, bias, choice);
  let oursMs: number, tfMs: number, err: number;
  try {
    // cross-check against TF.js once (bias added on the TF.js side)
    await mm.run(1, 0);
    const got = await mm.read();
    const ref = tf.tidy(() => (bias ? tf.add(tfRun(), tf.tensor1d(bias)) : tfRun()));
    const want = (await ref.data()) as Float32Array;
    ref.dispose();
    let maxDiff = 0, scale = 0;
    for (let i = 0; i < want.length; i++) {
      const d = Math.abs(got[i] - want[i]);
      maxDiff = Number.isNaN(d) ? Infinity : Math.max(maxDiff, d);
      scale = Math.max(scale, Math.abs(want[i]));
    }
    err = maxDiff / Math.max(scale, 1e-30);
    [oursMs, tfMs] = await timeInterleaved([
      (n, e) => mm.run(n, e),
      async (n, e) => {
        for (let i = 0; i < n; i++) tfRun().dispose();
        await tfSync(tfw, e);
      },
    ], targetMs, repeats);
  } finally {
    mm.destroy();
    ta.dispose(); tb.dispose();
  }

  const ours_gflops = flop / (oursMs * 1e6);
  const tfjs_gflops = flop / (tfMs * 1e6);
  const row: MatmulRow = {
    shape: shapeLabel(c), preset: c.preset, layer: c.layer, pass: c.pass, M, N, K,
    ours_gflops, tfjs_gflops, ratio: ours_gflops / tfjs_gflops, ours_ms: oursMs, tfjs_ms: tfMs, max_rel_err: err,
    variant: choiceLabel(choice ?? defaultChoice({ pass: c.pass, C: c.cin, OC: c.cout })),
  };
  if (peakTflops) {
    row.ours_mfu = ours_gflops / (peakTflops * 1e3);
    row.tfjs_mfu = tfjs_gflops / (peakTflops * 1e3);
  }
  return row;
}

/** Submits whatever TF.js has encoded so far (its open compute pass included). */
function flushTf(tfw: TfWebgpu): void {
  const b = tfw.tf.backend() as unknown as { ensureCommandEncoderReady(): void; endComputePassEncoder(): void; submitQueue(): void };
  b.ensureCommandEncoderReady();
  b.endComputePassEncoder();
  b.submitQueue();
}

/** TF.js: flush its pending encoder, then drain as for ours. */
async function tfSync(tfw: TfWebgpu, expectMs: number): Promise<void> {
  flushTf(tfw);
  await drain(tfw.device, expectMs);
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
    dispose() { engine.destroy(); },
  };
}

async function tfjsTimer(tfw: TfWebgpu, config: GPTConfig, init: Float32Array, lr: number): Promise<StepTimer> {
  const { TfGpt, tfBatch } = await import('./tfjs-gpt.ts');
  const model = new TfGpt({ config, init, lr });
  return {
    async steps(batches) {
      for (const b of batches) {
        const { x, y } = tfBatch(b.inputs, b.targets, b.B, b.T);
        model.step(x, y);
        x.dispose(); y.dispose();
      }
      return model.takeLosses();
    },
    dispose() { model.dispose(); },
  };
}

// ------------------------------------------------------------------ the bench

export function isSoftware(gpu: NodeGpu): boolean {
  return gpu.info.isFallbackAdapter || /swiftshader|llvmpipe|lavapipe|software/i.test(gpu.info.description);
}

export interface MatmulBench {
  rows: MatmulRow[];
  summary: { geomean_ratio: number; min_ratio: number; max_ratio: number };
  repeats: number;
  targetMs: number;
}

/** The matmul half of the bench, on an existing device and TF.js. */
export async function benchMatmul(gpu: NodeGpu, tfw: TfWebgpu, o: { quick?: boolean; software?: boolean; peakTflops?: number; autotune?: boolean; log?: (s: string) => void; cases?: MatmulCase[]; targetMs?: number; repeats?: number }): Promise<MatmulBench> {
  const quick = !!o.quick;
  const software = o.software ?? isSoftware(gpu);
  const log = o.log ?? (() => {});
  const targetMs = o.targetMs ?? 100;
  const repeats = o.repeats ?? (software ? 5 : 7);
  const cases = o.cases ?? matmulCases(quick, (p: PresetName) => (software ? 1 : DEFAULT_BATCH[p]), software);
  const harness = new OurMatmulHarness(gpu.device);
  const matmul: MatmulRow[] = [];
  for (const c of cases) {
    const choice = o.autotune === false ? undefined : await harness.tune(c, gpu.info.description);
    const row = await benchMatmulCase(c, harness, tfw, targetMs, repeats, o.peakTflops, choice);
    log(`matmul ${row.shape.padEnd(42)} ours ${row.ours_gflops.toFixed(2).padStart(9)} GFLOP/s  tfjs ${row.tfjs_gflops.toFixed(2).padStart(9)} GFLOP/s  ×${row.ratio.toFixed(2)}  (err ${row.max_rel_err.toExponential(1)}, ${row.variant})`);
    matmul.push(row);
  }
  const ratios = matmul.map((r) => r.ratio);

  return {
    rows: matmul,
    summary: { geomean_ratio: geomean(ratios), min_ratio: Math.min(...ratios), max_ratio: Math.max(...ratios) },
    repeats,
    targetMs,
  };
}

const TRAIN_PRESET: PresetName = 'small';

/**
 * The training-step half of the bench: tokens/s of ours, TF.js and the CPU reference on
 * the `small` preset, from the same init on the same batches. Each runs its warm-up
 * steps, then `rounds` rounds time each of them in turn (interleaved, like the matmuls);
 * the figure is the median over rounds.
 */
export async function benchTrainStep(gpu: NodeGpu, tfw: TfWebgpu, o: { quick?: boolean; software?: boolean; peakTflops?: number; autotune?: boolean; profile?: boolean; log?: (s: string) => void }): Promise<{ trainStep: TrainStepResult; gpuBytes: number; autotune: TuneResult['report'] | null; profile: KernelBenchResult['profile'] }> {
  const quick = !!o.quick;
  const software = o.software ?? isSoftware(gpu);
  const log = o.log ?? (() => {});
  const { WebGpuEngine } = await import('../client/engine/webgpu.ts');
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
  log(`train step: preset ${TRAIN_PRESET}, B=${B}, T=${T}: ${warmup} warm-up step(s), then ${rounds} round(s) of ${perRound} step(s) each (CPU: 1 step, ${cpuRounds} round(s))`);

  const { fileTuneCache } = await import('../server/tune-cache.ts');
  const engine = await WebGpuEngine.create(gpu.device, { ...engineOpts, adapterInfo: gpu.info.description, peakTflops: o.peakTflops, autotune: o.autotune === false ? undefined : { cache: fileTuneCache(), budgetMs: Infinity } }); // every shape tuned (or cached): the bench measures the tuned engine
  if (engine.tuning) log(`  autotune (${engine.tuning.ms.toFixed(0)} ms): ${engine.tuning.report.map((r) => `${r.shape} ${choiceLabel(r.chosen)} (${r.from})`).join(', ')}`);
  const engine16 = await WebGpuEngine.create(gpu.device, { ...engineOpts, precision: 'f16', adapterInfo: gpu.info.description, autotune: o.autotune === false ? undefined : { cache: fileTuneCache(), budgetMs: Infinity } });
  const cpu = new CpuEngine(engineOpts);
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
    for (const [name, t] of timers) losses[name].push(...await t.steps(batches.slice(0, warmup)));
    for (let r = 0; r < rounds; r++) {
      for (const [name, t, k] of timers) {
        if (name === 'cpu' && r >= cpuRounds) continue;
        const chunk = batches.slice(warmup + r * perRound, warmup + r * perRound + k);
        const t0 = performance.now();
        losses[name].push(...await t.steps(chunk));
        const sec = (performance.now() - t0) / 1e3;
        tps[name].push(chunk.reduce((a, b) => a + b.B * b.T, 0) / sec);
      }
      log(`  round ${r + 1}/${rounds}: ours ${tps.ours[r].toFixed(1)}, ours f16 ${tps.ours_f16[r].toFixed(1)}, tfjs ${tps.tfjs[r].toFixed(1)}${r < cpuRounds ? `, cpu ${tps.cpu[r].toFixed(1)}` : ''} tok/s`);
    }
    const ours = median(tps.ours), ours16 = median(tps.ours_f16), tfjs = median(tps.tfjs), cpuTps = median(tps.cpu);
    const trainStep: TrainStepResult = {
      preset: TRAIN_PRESET, batch: B, T, steps: rounds * perRound,
      ours_tokens_per_sec: ours,
      ours_f16_tokens_per_sec: ours16,
      tfjs_tokens_per_sec: tfjs,
      cpu_tokens_per_sec: cpuTps,
      ratio_vs_tfjs: ours / tfjs,
      ratio_f16_vs_tfjs: ours16 / tfjs,
      ratio_vs_cpu: ours / cpuTps,
      flops_per_token: flopsPerToken(config, T),
      ours_loss: losses.ours, ours_f16_loss: losses.ours_f16, tfjs_loss: losses.tfjs, cpu_loss: losses.cpu,
    };
    if (o.peakTflops) {
      trainStep.ours_mfu = engine.mfu(ours, T) ?? undefined;
      trainStep.tfjs_mfu = mfu(config, tfjs, o.peakTflops * 1e12, T);
    }
    log(`  losses: ours ${losses.ours.map((l) => l.toFixed(3)).join(' ')} | ours f16 ${losses.ours_f16.map((l) => l.toFixed(3)).join(' ')} | tfjs ${losses.tfjs.map((l) => l.toFixed(3)).join(' ')} | cpu ${losses.cpu.map((l) => l.toFixed(3)).join(' ')}`);
    let profile: KernelBenchResult['profile'] = null;
    if (o.profile) {
      // the median of three profiled steps, per kernel (each dispatch in its own pass: the total is above a normal step's)
      const runs: KernelTime[][] = [];
      for (let i = 0; i < 3; i++) runs.push(await engine.profileStep(batches[i % batches.length], { lr, gradClip: 1 }));
      await engine.takeLosses();
      const total = (r: KernelTime[]) => r.reduce((a, t) => a + t.ms, 0);
      const mid = [...runs].sort((a, b) => total(a) - total(b))[1];
      profile = { step_gpu_ms: total(mid), kernels: kernelShares(mid) };
      log(`  profile (GPU ms of one step, timestamp-query): ${total(mid).toFixed(1)} ms; ${profile.kernels.slice(0, 6).map((k) => `${k.entry} ${(100 * k.share).toFixed(1)}%`).join(', ')}`);
    }
    return { trainStep, gpuBytes: engine.gpuBytes, autotune: engine.tuning?.report ?? null, profile };
  } finally {
    engine.destroy();
    engine16.destroy();
    await tfTimer?.dispose();
  }
}

export async function benchKernels(opts: KernelBenchOptions = {}): Promise<KernelBenchResult> {
  const t0 = performance.now();
  const log = opts.log ?? (() => {});
  const quick = !!opts.quick;
  // The engine's limits decide the device (requested limits below WebGPU's defaults
  // leave the defaults, which the matmul shapes fit in).
  const { requiredLimits } = await import('../client/engine/webgpu.ts');
  const { ENGINE_FEATURES } = await import('../client/engine/webgpu.ts');
  const gpu: NodeGpu = await createNodeGpu({ requiredLimits: requiredLimits({ config: getPreset(TRAIN_PRESET), maxBatch: DEFAULT_BATCH[TRAIN_PRESET] }), optionalFeatures: ENGINE_FEATURES });
  const software = isSoftware(gpu);
  let tfw: TfWebgpu | null = null;
  try {
    tfw = await setupTfjsWebgpu(gpu);
    log(`adapter: ${gpu.info.description} (${gpu.info.vendor}${gpu.info.isFallbackAdapter ? ', fallback adapter' : ''}); TF.js: ${tfw.description}`);

    // ---- matmul
    const mm = await benchMatmul(gpu, tfw, { quick, software, peakTflops: opts.peakTflops, autotune: opts.autotune, log });

    // ---- attention: the flash kernels against the old ones
    const attention = await benchAttention(gpu.device, { software, time: timeInterleaved, drain, repeats: mm.repeats, targetMs: mm.targetMs, log });

    // ---- f16 storage against f32 on the bandwidth-bound kernels
    const half = await benchHalf(gpu.device, { time: timeInterleaved, drain, repeats: mm.repeats, targetMs: mm.targetMs, log });

    // ---- training step
    const { trainStep, gpuBytes, autotune, profile } = await benchTrainStep(gpu, tfw, { quick, software, peakTflops: opts.peakTflops, autotune: opts.autotune, profile: opts.profile, log });

    return {
      adapter: {
        description: gpu.info.description, vendor: gpu.info.vendor, architecture: gpu.info.architecture,
        device: gpu.info.device, isFallbackAdapter: gpu.info.isFallbackAdapter, tfjs_description: tfw.description,
        same_adapter: tfw.description === `${gpu.info.vendor} ${gpu.info.architecture}`.trim(),
      },
      settings: { quick, matmul_repeats: mm.repeats, target_ms: mm.targetMs, ...(opts.peakTflops ? { peak_tflops: opts.peakTflops } : {}) },
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
    for (const preset of ['tiny', 'small', 'base'] as const) for (const batch of [1, 4, 8, 16]) out.push({ preset, batch, precision, bytes: estimateGpuBytes({ config: getPreset(preset), maxBatch: batch, precision }) });
  }
  return out;
}

/** The human-readable report. */
export function formatKernelBench(r: KernelBenchResult): string {
  const f = (x: number, d = 2) => x.toFixed(d);
  const lines: string[] = [];
  lines.push(`adapter: ${r.adapter.description} (${r.adapter.vendor}${r.adapter.isFallbackAdapter ? ', fallback/software adapter: figures are only meaningful as ratios' : ''})`);
  lines.push(`TF.js adapter: ${r.adapter.tfjs_description}${r.adapter.same_adapter ? ' (the same)' : ' (NOT the same adapter: ratios compare different hardware)'}`);
  lines.push('');
  lines.push('matmul (GFLOP/s, median)                          ours       TF.js    ours/TF.js');
  for (const m of r.matmul) {
    lines.push(`  ${m.shape.padEnd(44)} ${f(m.ours_gflops).padStart(9)} ${f(m.tfjs_gflops).padStart(11)} ${('×' + f(m.ratio)).padStart(10)}${m.ours_mfu !== undefined ? `  MFU ${(100 * m.ours_mfu).toFixed(1)}%` : ''}`);
  }
  const s = r.matmul_summary;
  lines.push(`  ratio: geomean ×${f(s.geomean_ratio)}, min ×${f(s.min_ratio)}, max ×${f(s.max_ratio)}  (goal ≥ ×1.5)`);
  lines.push('');
  lines.push('attention forward + backward (ms, median)        old      flash   speedup');
  for (const a of r.attention) lines.push(`  ${a.shape.padEnd(44)} ${f(a.old_ms).padStart(8)} ${f(a.new_ms).padStart(9)} ${('×' + f(a.speedup)).padStart(9)}  (goal ≥ ×2 at T=256)`);
  lines.push('');
  lines.push('f16 storage vs f32, bandwidth-bound kernels (ms, median)   f32       f16   speedup');
  for (const h of r.half) lines.push(`  ${(h.kernel + ' ' + h.shape).padEnd(52)} ${f(h.f32_ms, 3).padStart(8)} ${f(h.f16_ms, 3).padStart(9)} ${('×' + f(h.speedup)).padStart(8)}  (goal ≥ ×1.3)`);
  lines.push('');
  const t = r.trainStep;
  lines.push(`training step, preset ${t.preset} (B=${t.batch}, T=${t.T}), tokens/s:`);
  lines.push(`  ours (WebGPU)  ${f(t.ours_tokens_per_sec, 1)}${t.ours_mfu !== undefined ? `  MFU ${(100 * t.ours_mfu).toFixed(2)}%` : ''}`);
  lines.push(`  ours, f16      ${f(t.ours_f16_tokens_per_sec, 1)}  (×${f(t.ratio_f16_vs_tfjs)} vs TF.js)`);
  lines.push(`  TF.js (WebGPU) ${f(t.tfjs_tokens_per_sec, 1)}${t.tfjs_mfu !== undefined ? `  MFU ${(100 * t.tfjs_mfu).toFixed(2)}%` : ''}`);
  lines.push(`  CPU reference  ${f(t.cpu_tokens_per_sec, 1)}`);
  lines.push(`  ours/TF.js ×${f(t.ratio_vs_tfjs)} (goal ≥ ×5), ours/CPU ×${f(t.ratio_vs_cpu)}`);
  lines.push(`gpuBytes: ${r.gpuBytes.toLocaleString()} (${(r.gpuBytes / 2 ** 20).toFixed(1)} MiB)`);
  if (r.profile) {
    lines.push('', `profile: one training step, ${f(r.profile.step_gpu_ms, 1)} GPU ms (timestamp-query, one pass per dispatch)`);
    for (const k of r.profile.kernels) lines.push(`  ${k.entry.padEnd(36)} ${f(k.ms).padStart(9)} ms ${(100 * k.share).toFixed(1).padStart(6)}%  (${k.dispatches} dispatches)`);
  }
  lines.push('', 'peak GPU bytes (MiB) by preset, batch and precision, T = blockSize (goal: base B=8 ≤ 450):');
  for (const prec of ['f32', 'f16'] as const) {
    for (const p of ['tiny', 'small', 'base'] as const) lines.push(`  ${prec} ${p.padEnd(6)} ${r.memory.filter((m) => m.preset === p && m.precision === prec).map((m) => `B=${m.batch}: ${(m.bytes / 2 ** 20).toFixed(1)}`).join('  ')}`);
  }
  lines.push(`took ${f(r.seconds, 0)} s`);
  return lines.join('\n');
}
