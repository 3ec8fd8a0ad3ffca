// Worker-thread entry of the simulator: runs one row and posts its result.
// Started with execArgv ['--import', bin/register.js] so it can load TypeScript.

import { parentPort, workerData } from 'node:worker_threads';
import { runRow } from './row.ts';
import type { SimCommon, SimRow } from './types.ts';

const { row, common } = workerData as { row: SimRow; common: SimCommon };
const port = parentPort!;
runRow(row, {
  common,
  log: (line) => port.postMessage({ type: 'log', line }),
  progress: (frac) => port.postMessage({ type: 'progress', frac }),
}).then(
  (result) => port.postMessage({ type: 'result', result }),
  (e: unknown) => port.postMessage({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
);
