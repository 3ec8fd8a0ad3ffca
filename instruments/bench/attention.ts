// `atoll bench kernels`, attention part: the flash kernels the engine uses
// (shaders/attention.wgsl through shaders/attention.ts) against the kernels they replaced
// (instruments/bench/attention-naive.wgsl, kept here only as the baseline), forward + backward on
// the same data in the same run, interleaved. Both results are checked against each other.

import naiveSrc from './attention-naive.wgsl?raw';
import { KernelSet, Program, readF32 } from '../../client/island/engine/webgpu-kernels.ts';
import { type DispatchSpec, withPrelude } from '../../shaders/kernel.ts';
import * as op from '../../shaders/ops.ts';
import { getPreset, type PresetName } from '../../core/model/config.ts';

export interface AttentionRow {
  /** e.g. "base B=1 T=256 NH=6 hs=64" */
  shape: string;
  preset: PresetName;
  B: number;
  T: number;
  /** median ms of one forward + backward */
  old_ms: number;
  new_ms: number;
  /** old / new: how much faster the flash kernels are */
  speedup: number;
  /** max |new − old| / max |old| over out and dinp */
  max_rel_err: number;
}

type Timer = (n: number, expectMs: number) => Promise<void>;

/** Records `record` n times into one compute pass and submits it (the bench's unit of timing). */
export function submitPasses(device: GPUDevice, n: number, record: (pass: GPUComputePassEncoder) => void): void {
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  for (let i = 0; i < n; i++) record(pass);
  pass.end();
  device.queue.submit([enc.finish()]);
}
export type TimeInterleaved = (runners: Timer[], targetMs: number, repeats: number) => Promise<number[]>;

interface Side {
  run: Timer;
  out: GPUBuffer;
  dinp: GPUBuffer;
  /** every buffer it made, to destroy */
  owned: GPUBuffer[];
}

function storage(device: GPUDevice, data: Float32Array | number): GPUBuffer {
  const n = typeof data === 'number' ? data : data.length;
  const buf = device.createBuffer({
    size: Math.max(16, n * 4),
    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
  });
  if (typeof data !== 'number') device.queue.writeBuffer(buf, 0, data);
  return buf;
}

function random(n: number, seed: number): Float32Array {
  let s = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s / 4294967296 - 0.5;
  }
  return out;
}

/** The baseline: its three entry points with hand-made bind groups (it has no kernel module). */
function naiveSide(
  device: GPUDevice,
  inp: GPUBuffer,
  dout: GPUBuffer,
  d: { B: number; T: number; C: number; NH: number },
  drain: (ms: number) => Promise<void>,
): Side {
  const rows = d.B * d.NH * d.T;
  const out = storage(device, d.B * d.T * d.C),
    att = storage(device, rows * d.T),
    dpreatt = storage(device, rows * d.T),
    dinp = storage(device, d.B * d.T * 3 * d.C);
  const uniform = device.createBuffer({ size: 32, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  const u = new DataView(new ArrayBuffer(32));
  [d.B, d.T, d.C, d.NH, 0].forEach((v, i) => u.setUint32(4 * i, v, true));
  u.setFloat32(20, 1 / Math.sqrt(d.C / d.NH), true);
  device.queue.writeBuffer(uniform, 0, u.buffer);
  const module = device.createShaderModule({ code: withPrelude(naiveSrc), label: 'attention-naive.wgsl' });
  const steps = (
    [
      ['attention_forward', [out, att, inp]],
      ['attention_backward_dq', [dinp, dpreatt, inp, att, dout]],
      ['attention_backward_dkv', [dinp, dpreatt, inp, att, dout]],
    ] as const
  ).map(([entry, bufs]) => {
    const pipeline = device.createComputePipeline({
      layout: 'auto',
      compute: { module, entryPoint: entry, constants: { MAX_T: d.T } },
    });
    const bindings = entry === 'attention_forward' ? [1, 2, 3] : [1, 2, 3, 4, 5];
    const entries: GPUBindGroupEntry[] = [
      { binding: 0, resource: { buffer: uniform } },
      ...bufs.map((buffer, i) => ({ binding: bindings[i], resource: { buffer } })),
    ];
    return { pipeline, bind: device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries }) };
  });
  return {
    out,
    dinp,
    owned: [out, att, dpreatt, dinp, uniform],
    async run(n, expectMs) {
      submitPasses(device, n, (pass) => {
        for (const s of steps) {
          pass.setPipeline(s.pipeline);
          pass.setBindGroup(0, s.bind);
          pass.dispatchWorkgroups(d.T, d.B * d.NH);
        }
      });
      await drain(expectMs);
    },
  };
}

async function flashSide(
  device: GPUDevice,
  inp: GPUBuffer,
  dout: GPUBuffer,
  d: { B: number; T: number; C: number; NH: number },
  drain: (ms: number) => Promise<void>,
): Promise<Side> {
  const rows = d.B * d.NH * d.T;
  const out = storage(device, d.B * d.T * d.C),
    lse = storage(device, rows),
    dsum = storage(device, rows),
    dinp = storage(device, d.B * d.T * 3 * d.C);
  const specs: DispatchSpec[] = [
    op.attentionForward(out, lse, inp, d),
    ...op.attentionBackward(dinp, dsum, dout, inp, out, lse, d),
  ];
  const shape = { B: d.B, T: d.T };
  const program = await Program.build(new KernelSet(device), specs, shape, undefined, 'bench.attention');
  program.setShape(shape);
  return {
    out,
    dinp,
    owned: [out, lse, dsum, dinp, program.uniform],
    async run(n, expectMs) {
      submitPasses(device, n, (pass) => program.encode(pass, shape));
      await drain(expectMs);
    },
  };
}

function relErr(a: Float32Array, b: Float32Array): number {
  let d = 0,
    m = 0;
  for (let i = 0; i < a.length; i++) {
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return d / Math.max(m, 1e-30);
}

/** Old vs flash attention, forward + backward, at T = 256 (the `base` block) and the `small` block. */
export async function benchAttention(
  device: GPUDevice,
  o: {
    software: boolean;
    time: TimeInterleaved;
    drain: (device: GPUDevice, ms: number) => Promise<void>;
    repeats: number;
    targetMs: number;
    log: (s: string) => void;
  },
): Promise<AttentionRow[]> {
  const rows: AttentionRow[] = [];
  for (const preset of ['small', 'base'] as const) {
    const c = getPreset(preset);
    const d = { B: o.software ? 1 : 8, T: c.blockSize, C: c.nEmbd, NH: c.nHead };
    const inp = storage(device, random(d.B * d.T * 3 * d.C, 7)),
      dout = storage(device, random(d.B * d.T * d.C, 8));
    const drain = (ms: number) => o.drain(device, ms);
    const old = naiveSide(device, inp, dout, d, drain);
    const flash = await flashSide(device, inp, dout, d, drain);
    const [oldMs, newMs] = await o.time([old.run, flash.run], o.targetMs, o.repeats);
    // both ran the same work: compare the last results
    const n = d.B * d.T;
    const err = Math.max(
      relErr(await readF32(device, flash.out, n * d.C), await readF32(device, old.out, n * d.C)),
      relErr(await readF32(device, flash.dinp, n * 3 * d.C), await readF32(device, old.dinp, n * 3 * d.C)),
    );
    const row: AttentionRow = {
      shape: `${preset} B=${d.B} T=${d.T} NH=${d.NH} hs=${d.C / d.NH}`,
      preset,
      B: d.B,
      T: d.T,
      old_ms: oldMs,
      new_ms: newMs,
      speedup: oldMs / newMs,
      max_rel_err: err,
    };
    o.log(
      `attention ${row.shape.padEnd(28)} old ${oldMs.toFixed(2)} ms  flash ${newMs.toFixed(2)} ms  ` +
        `×${row.speedup.toFixed(2)} faster  (err ${err.toExponential(1)})`,
    );
    rows.push(row);
    for (const b of [inp, dout, ...old.owned, ...flash.owned]) b.destroy();
  }
  return rows;
}
