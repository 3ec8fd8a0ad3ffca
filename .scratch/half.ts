import { benchHalf } from '../bench/half.ts';
import { drain, timeInterleaved } from '../bench/timing.ts';
import { createNodeGpu } from '../server/gpu.ts';
import { ENGINE_FEATURES } from '../client/engine/webgpu.ts';
const g = await createNodeGpu({ optionalFeatures: ENGINE_FEATURES, requiredLimits: { maxStorageBufferBindingSize: 64 << 20, maxBufferSize: 64 << 20 } });
const rows = await benchHalf(g.device, { time: timeInterleaved, drain, repeats: 3, targetMs: 100, log: (s) => console.log(s) });
await g.dispose();
