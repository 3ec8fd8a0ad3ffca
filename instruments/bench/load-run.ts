// The load test's run (`atoll bench server`, part 3): its model and run file, and what a load
// target is. Shared by the embedded target (server.ts), the cluster target (cluster-load.ts) and
// the island processes (server-load-worker.ts).

import type { GPTConfig } from '../../core/model/config.ts';

/** The load test's model: small enough that a thousand islands' deltas are cheap to make and apply. */
export const LOAD_MODEL: GPTConfig = { vocabSize: 256, blockSize: 16, nLayer: 1, nHead: 1, nEmbd: 8 };

/** The load test's run: async, no norm bound, limits out of the way. */
export function loadRunFile() {
  return {
    name: 'bench',
    model: LOAD_MODEL,
    coordinator: {
      mode: 'async' as const,
      seqLen: 16,
      batchSize: 1,
      innerSteps: 1,
      minInnerSteps: 1,
      maxStaleness: 1_000_000,
      normBound: { factor: 0, window: 32, minHistory: 3 },
      islandTimeoutMs: 600_000,
      keepUpdates: 4,
      historyLimit: 16,
      // the simulated islands send int8 frames (server-load-worker.ts), and a frame must be of its assignment's codec
      uplink: { encoding: 'int8' as const, blockSize: 64 },
      downlink: { encoding: 'int8' as const, blockSize: 64 },
    },
    limits: {
      helloPerMinute: 1_000_000,
      restPerMinute: 1_000_000,
      maxIslands: 1_000_000,
      powBits: 0,
      newIslandsPerHour: 1_000_000,
    },
    checkpoints: { keep: 2 },
  };
}

/** Where the load goes: gateway URLs, and how to stop it once the islands are done. */
export interface LoadTarget {
  urls: string[];
  stop(): Promise<{ connected: number; versions: number; commits?: number }>;
}
