// Butterfly mixing's counters on the live server (what mix.ts and mix-rings.ts count), and the
// status the API and the dashboard show from them (core/api.ts MixStatus).

import type { MixStatus } from '../../core/api.ts';
import type { RingCounters } from './mix-rings.ts';

/** What mixing did, cumulative (the dashboard and the live test read it). */
export interface MixCounters extends RingCounters {
  groups: number;
  mixedGroups: number;
  fallbacks: number;
  mixedMembers: number;
  checks: number;
  audits: number;
  implicated: number;
  /** Bytes of fragments received. */
  fragmentBytes: number;
  /** Bytes of spot checks (their hashes) and replays received. */
  checkBytes: number;
  /** Signalling relayed and plans sent, in and out (JSON text); the plans' share. */
  controlBytes: number;
  planBytes: number;
  /** Islands that waited formWaitMs for a group and uploaded directly. */
  expired: number;
  /** Butterfly pairs of the groups formed: signalled afresh, and linked already (no signalling). */
  linksSignalled: number;
  linksReused: number;
  /** `mix:lost` reports that made the server forget a pair. */
  linksLost: number;
  /** Groups formed, by the durable version current when they formed (the last 64 versions). */
  groupsByVersion: Record<number, number>;
}

export function newMixCounters(): MixCounters {
  return {
    groups: 0,
    mixedGroups: 0,
    fallbacks: 0,
    mixedMembers: 0,
    checks: 0,
    audits: 0,
    implicated: 0,
    fragmentBytes: 0,
    checkBytes: 0,
    pieceBytes: 0,
    rings: 0,
    ringsFailed: 0,
    grossSaved: 0,
    controlBytes: 0,
    planBytes: 0,
    expired: 0,
    linksSignalled: 0,
    linksReused: 0,
    ringLinksSignalled: 0,
    linksLost: 0,
    groupsByVersion: {},
  };
}

/** The figures the status and the dashboard show. */
export function mixStatus(c: MixCounters, k: number, formWaitMs: number): MixStatus {
  return {
    k,
    groups: c.groups,
    mixedGroups: c.mixedGroups,
    mixedMembers: c.mixedMembers,
    formWaitMs,
    fallbacks: c.fallbacks,
    savedBytes: c.grossSaved - c.checkBytes - c.controlBytes,
    signallingBytes: c.controlBytes,
    pairsSignalled: c.linksSignalled,
    pairsReused: c.linksReused,
    expired: c.expired,
    rings: c.rings,
    ringsFailed: c.ringsFailed,
    ringPairsSignalled: c.ringLinksSignalled,
    groupsByVersion: Object.entries(c.groupsByVersion)
      .map(([v, n]) => ({ version: Number(v), groups: n }))
      .sort((a, b) => a.version - b.version),
  };
}
