import { plan } from '../client/engine/webgpu-plan.ts';
import { PRESETS } from '../core/model/config.ts';
const c = (PRESETS as any).base;
const p = plan({ config: c, maxBatch: 8 } as any);
const agg = new Map<string, number>();
for (const [k, v] of [...p.storage, ...p.other]) { const n = k.split('.')[0]; agg.set(n, (agg.get(n) ?? 0) + v); }
let tot = 0; for (const v of agg.values()) tot += v;
console.log(c, (tot / 2 ** 20).toFixed(1));
console.log([...agg].sort((a, b) => b[1] - a[1]).map(([k, v]) => `${k} ${(v / 2 ** 20).toFixed(1)}`).join('\n'));
