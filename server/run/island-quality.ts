// Per-island quality: every accepted Δ as it went into an outer update (staleness, weight, and in
// sync rounds its cosine with the round's merged Δ and its norm against the round's median), from
// the coordinator's update events and, after a restart, from the event log's update lines.

import type { IslandContribution } from '../../core/api.ts';
import type { Contribution } from '../../core/coord/index.ts';
import type { LogEvent } from './store.ts';

/** Contributions kept per island (the newest). */
const KEEP = 500;
/** Contributions the table's summary averages. */
const RECENT = 10;

const round4 = (x: number | undefined) =>
  typeof x === 'number' && Number.isFinite(x) ? Math.round(x * 1e4) / 1e4 : null;

export class IslandQuality {
  private byIsland = new Map<string, IslandContribution[]>();

  record(version: number, time: number, contributors: readonly Contribution[]): void {
    for (const c of contributors) {
      this.add(c.islandId, {
        version,
        time,
        staleness: c.staleness,
        tokens: c.tokens,
        weight: c.weight,
        cosine: round4(c.cosine),
        normRatio: round4(c.normRatio),
      });
    }
  }

  /** An 'update' line of events.jsonl (history.ts eventLine writes cos and norm per contributor). */
  replayLine(e: LogEvent): void {
    const num = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) ? x : 0);
    for (const c of (Array.isArray(e.contributors) ? e.contributors : []) as Array<Record<string, unknown>>) {
      if (typeof c.island !== 'string') continue;
      this.add(c.island, {
        version: num(e.version),
        time: e.t,
        staleness: num(c.staleness),
        tokens: num(c.tokens),
        weight: num(c.weight),
        cosine: round4(c.cos as number | undefined),
        normRatio: round4(c.norm as number | undefined),
      });
    }
  }

  /** Drops what a restart at `version` voids. */
  truncate(version: number): void {
    for (const list of this.byIsland.values())
      while (list.length && list[list.length - 1].version > version) list.pop();
  }

  contributions(islandId: string): IslandContribution[] {
    return this.byIsland.get(islandId) ?? [];
  }

  /** Means over the island's last few contributions (null: none with a figure). */
  summary(islandId: string): { cosine: number | null; normRatio: number | null } {
    const recent = this.contributions(islandId).slice(-RECENT);
    const mean = (xs: Array<number | null>) => {
      const v = xs.filter((x): x is number => x !== null);
      return v.length ? round4(v.reduce((a, b) => a + b, 0) / v.length) : null;
    };
    return { cosine: mean(recent.map((c) => c.cosine)), normRatio: mean(recent.map((c) => c.normRatio)) };
  }

  private add(id: string, c: IslandContribution): void {
    let list = this.byIsland.get(id);
    if (!list) this.byIsland.set(id, (list = []));
    if (list.length && list[list.length - 1].version >= c.version) return; // replayed
    list.push(c);
    if (list.length > KEEP) list.splice(0, list.length - KEEP);
  }
}
