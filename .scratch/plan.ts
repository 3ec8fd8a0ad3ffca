import { estimateGpuBytes, plan } from '../client/engine/webgpu-plan.ts';
import { PRESETS } from '../core/model/config.ts';
for (const precision of ['f32', 'f16'] as const) {
  const o = { config: PRESETS.base, maxBatch: 8, precision };
  const p = plan(o);
  const agg = new Map<string, number>();
  for (const [k, v] of [...p.storage, ...p.other]) { const n = k.split('.')[0]; agg.set(n, (agg.get(n) ?? 0) + v); }
  console.log(precision, (estimateGpuBytes(o) / 2 ** 20).toFixed(1), 'MiB;', [...agg].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([k, v]) => `${k} ${(v / 2 ** 20).toFixed(1)}`).join(', '));
}
