// A Node island's engine in `atoll fleet --engines`: `cpu` or `webgpu`, then `:f16` for f16
// storage (--precision f16) and `xN` for N devices (--devices N, WebGPU only), e.g. `webgpu:f16x2`.

import type { EngineKind } from '../../core/protocol.ts';

export interface FleetEngine {
  kind: EngineKind;
  precision: 'f32' | 'f16';
  devices: number;
}

/** The engine an `--engines` entry names; null when it names none. */
export function parseFleetEngine(s: string): FleetEngine | null {
  const m = /^(cpu|webgpu)(?::(f32|f16))?(?:x(\d+))?$/.exec(s.trim());
  if (!m) return null;
  const devices = m[3] ? Number(m[3]) : 1;
  if (devices < 1 || devices > 64 || (devices > 1 && m[1] !== 'webgpu')) return null;
  return { kind: m[1] as EngineKind, precision: (m[2] ?? 'f32') as 'f32' | 'f16', devices };
}
