// `atoll bench kernels`, matmul part: our matmul (shaders/matmul.wgsl, on the variant the
// autotuner picks) against tf.matMul on the same adapter, for the forward, dX and dW products of
// every linear layer of the presets, on identical data, checked against each other once per shape.
// Timing as instruments/bench/kernels.ts says (interleaved rounds, medians, wall clock on both sides).

import { DEFAULT_BATCH, type GPTConfig, getPreset, type PresetName } from '../../core/model/config.ts';
import type { NodeGpu } from '../../client/island/engine/dawn.ts';
import { KernelSet, Program, readF32 } from '../../client/island/engine/webgpu-kernels.ts';
import type { DispatchSpec, Shape } from '../../shaders/kernel.ts';
import * as op from '../../shaders/ops.ts';
import type { TfWebgpu } from './tfjs-webgpu.ts';
import { drain, geomean, randomArray, timeInterleaved } from './timing.ts';
import { submitPasses } from './attention.ts';
import {
  type MatmulChoice,
  autotuneMatmuls,
  choiceLabel,
  defaultChoice,
  tuneKey,
  tunedDims,
} from '../../client/island/engine/webgpu-tune.ts';

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

// ------------------------------------------------------------------ our matmul (shaders/matmul.wgsl)

// We time exactly the dispatches the engine records: the specs of
// shaders/matmul.ts (matmulForward / matmulBackward: entry point, vec4
// choice, uniforms, grid), built into a Program of client/island/engine/webgpu-kernels.ts.

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
    const r = await autotuneMatmuls(this.device, this.kernels, [{ pass: c.pass, C: c.cin, OC: c.cout }], c.rows, {
      adapter,
      cache: null,
      budgetMs: Infinity,
    });
    return r.report[0].chosen;
  }

  async prepare(
    c: MatmulCase,
    inp: Float32Array,
    w: Float32Array,
    dout: Float32Array,
    bias: Float32Array | null,
    choice?: MatmulChoice,
  ): Promise<OurMatmul> {
    const device = this.device;
    const tuned = tunedDims(
      new Map(choice ? [[tuneKey({ pass: c.pass, C: c.cin, OC: c.cout }), choice]] : []),
      c.cin,
      c.cout,
    );
    const dims = {
      C: c.cin,
      OC: c.cout,
      wOff: 0,
      biasOff: bias ? w.length : null,
      ...(c.pass === 'fwd' ? tuned.fwd : tuned.bwd),
    };
    const params = new Float32Array(w.length + (bias?.length ?? 0));
    params.set(w);
    if (bias) params.set(bias, w.length);
    const bufParams = this.storage(params);
    const owned: GPUBuffer[] = [bufParams];
    let out: GPUBuffer, outLen: number, specs: DispatchSpec[];
    if (c.pass === 'fwd') {
      const bufInp = this.storage(inp);
      out = this.storage(c.rows * c.cout);
      outLen = c.rows * c.cout;
      owned.push(bufInp, out);
      specs = [op.matmulForward(out, bufInp, bufParams, dims)];
    } else {
      const bufInp = this.storage(inp),
        bufDout = this.storage(dout);
      const grads = this.storage(params.length);
      owned.push(bufInp, bufDout, grads);
      if (c.pass === 'dX') {
        out = this.storage(c.rows * c.cin);
        outLen = c.rows * c.cin;
        owned.push(out);
        specs = [
          op.matmulBackward(out, grads, bufDout, bufInp, bufParams, { ...dims, biasOff: null, partials: grads })[0],
        ];
      } else {
        // dW as the engine records it: direct, or split-K slices into scratch plus their reduce
        // (the shape picks which; the other dispatches have an empty grid and are skipped)
        const partials = this.storage(op.partialsScratch(c.cout * c.cin, c.rows, c.cout));
        owned.push(partials);
        out = grads;
        outLen = c.cout * c.cin;
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
  const expr =
    c.pass === 'fwd'
      ? `${R}x${I} * (${O}x${I})^T`
      : c.pass === 'dX'
        ? `${R}x${O} * ${O}x${I}`
        : `(${R}x${O})^T * ${R}x${I}`;
  return `${c.preset}.${c.layer}.${c.pass} ${expr}`;
}

async function benchMatmulCase(
  c: MatmulCase,
  ours: OurMatmulHarness,
  tfw: TfWebgpu,
  targetMs: number,
  repeats: number,
  peakTflops?: number,
  choice?: MatmulChoice,
): Promise<MatmulRow> {
  const tf = tfw.tf;
  const [M, N, K] = mnk(c);
  const seed = M * 31 + N * 7 + K;
  // the operands of the pass, in the memory order both sides read them
  const inp = randomArray(c.rows * c.cin, seed + 1); // (rows, in)
  const w = randomArray(c.cout * c.cin, seed + 2); // (out, in)
  const dout = randomArray(c.rows * c.cout, seed + 3); // (rows, out)
  const bias = c.pass === 'fwd' && c.bias ? randomArray(c.cout, seed + 4) : null;
  let tfRun: () => import('@tensorflow/tfjs').Tensor;
  let ta: import('@tensorflow/tfjs').Tensor2D, tb: import('@tensorflow/tfjs').Tensor2D;
  if (c.pass === 'fwd') {
    ta = tf.tensor2d(inp, [c.rows, c.cin]);
    tb = tf.tensor2d(w, [c.cout, c.cin]);
    tfRun = () => tf.matMul(ta, tb, false, true);
  } else if (c.pass === 'dX') {
    ta = tf.tensor2d(dout, [c.rows, c.cout]);
    tb = tf.tensor2d(w, [c.cout, c.cin]);
    tfRun = () => tf.matMul(ta, tb, false, false);
  } else {
    ta = tf.tensor2d(dout, [c.rows, c.cout]);
    tb = tf.tensor2d(inp, [c.rows, c.cin]);
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
    let maxDiff = 0,
      scale = 0;
    for (let i = 0; i < want.length; i++) {
      const d = Math.abs(got[i] - want[i]);
      maxDiff = Number.isNaN(d) ? Infinity : Math.max(maxDiff, d);
      scale = Math.max(scale, Math.abs(want[i]));
    }
    err = maxDiff / Math.max(scale, 1e-30);
    [oursMs, tfMs] = await timeInterleaved(
      [
        (n, e) => mm.run(n, e),
        async (n, e) => {
          for (let i = 0; i < n; i++) tfRun().dispose();
          await tfSync(tfw, e);
        },
      ],
      targetMs,
      repeats,
    );
  } finally {
    mm.destroy();
    ta.dispose();
    tb.dispose();
  }

  const ours_gflops = flop / (oursMs * 1e6);
  const tfjs_gflops = flop / (tfMs * 1e6);
  const row: MatmulRow = {
    shape: shapeLabel(c),
    preset: c.preset,
    layer: c.layer,
    pass: c.pass,
    M,
    N,
    K,
    ours_gflops,
    tfjs_gflops,
    ratio: ours_gflops / tfjs_gflops,
    ours_ms: oursMs,
    tfjs_ms: tfMs,
    max_rel_err: err,
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
  const b = tfw.tf.backend() as unknown as {
    ensureCommandEncoderReady(): void;
    endComputePassEncoder(): void;
    submitQueue(): void;
  };
  b.ensureCommandEncoderReady();
  b.endComputePassEncoder();
  b.submitQueue();
}

/** TF.js: flush its pending encoder, then drain as for ours. */
async function tfSync(tfw: TfWebgpu, expectMs: number): Promise<void> {
  flushTf(tfw);
  await drain(tfw.device, expectMs);
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
export async function benchMatmul(
  gpu: NodeGpu,
  tfw: TfWebgpu,
  o: {
    quick?: boolean;
    software?: boolean;
    peakTflops?: number;
    autotune?: boolean;
    log?: (s: string) => void;
    cases?: MatmulCase[];
    targetMs?: number;
    repeats?: number;
  },
): Promise<MatmulBench> {
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
    log(
      `matmul ${row.shape.padEnd(42)} ours ${row.ours_gflops.toFixed(2).padStart(9)} GFLOP/s  tfjs ` +
        `${row.tfjs_gflops.toFixed(2).padStart(9)} GFLOP/s  ×${row.ratio.toFixed(2)}  (err ` +
        `${row.max_rel_err.toExponential(1)}, ${row.variant})`,
    );
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
