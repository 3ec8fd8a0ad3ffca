// Kernel profiler: a program's dispatches, each in its own compute pass with
// timestamp-query writes at its start and end, so each kernel's GPU time can be read.
// Used by WebGpuEngine.profileStep (and `atoll bench kernels --profile`); not in the
// training path (one pass per dispatch costs more than the one-pass step).

import type { Program } from './webgpu-kernels.ts';
import type { Shape } from '../../../shaders/kernel.ts';

export interface KernelTime {
  /** entry point */
  entry: string;
  ms: number;
}

/** What recordProfiled left to read after the submit. */
export interface PendingProfile {
  read(): Promise<KernelTime[]>;
}

/** Records `program` one dispatch per pass with timestamps (dispatches the shape skips are left out of the result). */
export function recordProfiled(
  device: GPUDevice,
  enc: GPUCommandEncoder,
  program: Program,
  shape: Shape,
): PendingProfile {
  const n = program.length;
  const querySet = device.createQuerySet({ type: 'timestamp', count: 2 * n });
  const resolved = device.createBuffer({ size: 16 * n, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
  const staging = device.createBuffer({ size: 16 * n, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const entries = program.encodeEach(enc, shape, (i) => ({
    timestampWrites: { querySet, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 },
  }));
  enc.resolveQuerySet(querySet, 0, 2 * n, resolved, 0);
  enc.copyBufferToBuffer(resolved, 0, staging, 0, 16 * n);
  return {
    async read() {
      await staging.mapAsync(GPUMapMode.READ);
      const ts = new BigUint64Array(staging.getMappedRange().slice(0));
      staging.unmap();
      for (const x of [staging, resolved]) x.destroy();
      querySet.destroy();
      return entries.flatMap((entry, i) => (entry ? [{ entry, ms: Number(ts[2 * i + 1] - ts[2 * i]) / 1e6 }] : []));
    },
  };
}

/** Per entry point: total ms and share of the step, largest first. */
export function kernelShares(
  times: KernelTime[],
): Array<{ entry: string; ms: number; share: number; dispatches: number }> {
  const total = times.reduce((a, t) => a + Math.max(0, t.ms), 0);
  const by = new Map<string, { ms: number; dispatches: number }>();
  for (const t of times) {
    const e = by.get(t.entry) ?? { ms: 0, dispatches: 0 };
    e.ms += Math.max(0, t.ms);
    e.dispatches += 1;
    by.set(t.entry, e);
  }
  return [...by]
    .map(([entry, e]) => ({ entry, ms: e.ms, share: total > 0 ? e.ms / total : 0, dispatches: e.dispatches }))
    .sort((a, b) => b.ms - a.ms);
}
