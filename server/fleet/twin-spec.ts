// Reads a fleet's report.json back into its twin spec: `atoll simulate --from-fleet` (server/simulate/)
// replays it without importing the fleet's runner (server/fleet/twin.ts imports the simulator).

import { readFileSync } from 'node:fs';
import type { TwinSpec } from './types.ts';

/** Reads a fleet's report.json back into its twin spec (Infinity was written as a string). */
export function readTwinSpec(path: string): TwinSpec {
  let report: { twinSpec?: TwinSpec };
  try {
    report = JSON.parse(readFileSync(path, 'utf8'), (_k, v) => (v === 'Infinity' ? Infinity : v)) as { twinSpec?: TwinSpec };
  } catch (e) {
    throw Object.assign(new Error(`--from-fleet '${path}': ${(e as Error).message}`), { code: 'E_BAD_REQUEST' });
  }
  if (!report.twinSpec?.rows?.length) throw Object.assign(new Error(`--from-fleet '${path}' is not an atoll fleet report.json (no twinSpec)`), { code: 'E_BAD_REQUEST' });
  return report.twinSpec;
}
