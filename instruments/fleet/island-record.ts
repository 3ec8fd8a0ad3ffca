// An island's record in the live fleet (LiveIsland): made when it starts, kept up to date from a Node island's JSON
// lines (island-child.ts).

import type { ChildLine, LiveIsland } from './types.ts';

/** A fresh record: not joined yet (joinAtMs -1), nothing counted. */
export function newIsland(
  name: string,
  kind: LiveIsland['kind'],
  engine: string,
  batchSize: number,
  duty: number,
): LiveIsland {
  return {
    name,
    kind,
    engine,
    batchSize,
    duty,
    ids: [],
    joinAtMs: -1,
    leaveAtMs: null,
    lastMs: 0,
    killed: false,
    computeMs: 0,
    computeTokens: 0,
    stepTokens: 0,
    tokensPerSec: 0,
    accepted: 0,
    rejected: 0,
    rejectedByCode: {},
    bytesUp: 0,
    bytesDown: 0,
    reconnects: 0,
    hashChecks: 0,
    hashMismatches: 0,
    roundsMixed: 0,
    dataBytes: 0,
    rangeBytes: 0,
    stepSpeed: 0,
    acks: [],
  };
}

/** Folds one of a Node island's JSON lines into its record. */
export function nodeLine(isl: LiveIsland, m: ChildLine): void {
  if (m.kind === 'assignment') {
    if (isl.joinAtMs < 0) isl.joinAtMs = m.t;
    if (!isl.ids.includes(m.island)) isl.ids.push(m.island);
    isl.lastMs = m.t;
    return;
  }
  Object.assign(isl, m.counters);
  if (m.kind === 'submitted') {
    isl.lastMs = m.t;
    if (m.status === 'applied') isl.acks.push([m.island, m.seq]);
  }
}
