// The fleet's accounting at the end of a run: the updates the run folder's events.jsonl holds, each island's
// accepted and rejected deltas as the server served them, and the work lost or counted twice.

import type { DataStatus, IslandView } from '../../core/api.ts';
import type { FleetData, LiveIsland } from './types.ts';

/**
 * Updates as the run folder's events.jsonl holds them: a 'resume' at version v (an aggregator takeover) drops what
 * the log said past v (never made durable, never acknowledged).
 */
export function loggedUpdates(events: string): Array<{
  version: number;
  tokens: number;
  totalTokens?: number;
  contributors: Array<{ island: string; seq: number }>;
}> {
  let updates: ReturnType<typeof loggedUpdates> = [];
  for (const line of events.split('\n')) {
    if (line.includes('"type":"resume"')) {
      const v = (JSON.parse(line) as { version: number }).version;
      updates = updates.filter((u) => u.version <= v);
    } else if (line.includes('"type":"update"')) updates.push(JSON.parse(line));
  }
  return updates;
}

/** Tokens in θ at each version, from the logged updates. */
export async function historyTokens(updates: ReturnType<typeof loggedUpdates>): Promise<Map<number, number>> {
  const m = new Map<number, number>([[0, 0]]);
  let total = 0;
  for (const u of updates) {
    total += u.tokens;
    m.set(u.version, u.totalTokens ?? total);
  }
  return m;
}

/**
 * Fills each island's accepted, rejected and speed from the server's island rows; an ack an island saw whose delta
 * the log does not hold is lost, a delta the log holds twice is duplicated.
 */
export function tally(
  islands: LiveIsland[],
  served: IslandView[],
  updates: ReturnType<typeof loggedUpdates>,
): { lost: number; duplicated: number } {
  const logged = new Map<string, number>();
  const byIsland = new Map<string, number>();
  for (const u of updates)
    for (const c of u.contributors) {
      logged.set(`${c.island}#${c.seq}`, (logged.get(`${c.island}#${c.seq}`) ?? 0) + 1);
      byIsland.set(c.island, (byIsland.get(c.island) ?? 0) + 1);
    }
  let lost = 0;
  for (const isl of islands) {
    const rows = served.filter((v) => isl.ids.includes(v.id));
    isl.accepted = rows.reduce((a, v) => a + v.accepted, 0);
    isl.rejected = rows.reduce((a, v) => a + v.rejected, 0);
    for (const v of rows)
      for (const [k, c] of Object.entries(v.rejectedByCode)) isl.rejectedByCode[k] = (isl.rejectedByCode[k] ?? 0) + c;
    if (isl.kind === 'page' && rows[0]) isl.batchSize = rows[0].batchSize;
    // an ack the island saw whose delta the run folder does not hold is lost
    if (isl.kind === 'node') lost += isl.acks.filter(([id, seq]) => !logged.has(`${id}#${seq}`)).length;
    else lost += Math.max(0, (isl.pageAccepted ?? 0) - isl.ids.reduce((a, id) => a + (byIsland.get(id) ?? 0), 0));
    // between consecutive steps of a round; an island whose rounds were all of one step: its runtime's own figure
    if (isl.kind === 'node')
      isl.tokensPerSec = isl.computeMs > 0 ? (1000 * isl.computeTokens) / isl.computeMs : isl.stepSpeed;
  }
  const duplicated = [...logged.values()].filter((c) => c > 1).length;
  return { lost, duplicated };
}

/** A shard run's ledger as the report keeps it: its epoch, and whether any recent range was trained twice in one. */
export function dataLedger(d: DataStatus, indexBytes: number): FleetData {
  const overlap = (a: DataStatus['recent'][number], b: typeof a) =>
    a.epoch === b.epoch && a.shard === b.shard && a.offset < b.offset + b.length && b.offset < a.offset + a.length;
  const overlapsInEpoch = d.recent.filter((a, i) => d.recent.some((b, j) => i !== j && overlap(a, b))).length;
  return {
    epochsDone: d.epochsDone,
    epochProgress: d.epochProgress,
    trainTokens: d.trainTokens,
    tokensTrained: d.shards.reduce((n, s) => n + s.trained, 0),
    overlapsInEpoch,
    rangesChecked: d.recent.length,
    bytesServed: d.bytesServed,
    indexBytes,
  };
}
