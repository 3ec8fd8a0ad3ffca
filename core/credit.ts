// Credit per contributor: a volunteer's stable anonymous id (or, for islands that send none, the
// display name) adds up the islands of one person across tabs, reloads and devices. Ranked by the
// tokens of their Δs merged into θ; the tokens they computed (merged or not) are counted beside.
// The leaderboard (dashboard) and a volunteer's own totals (GET /api/contributors/:id) share it.

import type { ContributorCredit, IslandView } from './api.ts';

export interface Contributor {
  /** The contributor id, or `name:<display name>` for islands without one. */
  key: string;
  /** The display name of the contributor's most recently seen island. */
  name: string;
  /** Tokens in merged Δs, and tokens computed (every Δ submitted). */
  tokens: number;
  tokensComputed: number;
  accepted: number;
  rejected: number;
  islands: number;
  online: number;
  engines: string[];
  lastSeen: number | null;
}

export function contributorKey(i: Pick<IslandView, 'id' | 'name' | 'contributorId'>): string {
  return i.contributorId && i.contributorId !== i.id ? i.contributorId : `name:${i.name.trim() || i.id}`;
}

/** Contributors, best first (merged tokens, then accepted Δs, then name). */
export function contributors(islands: Iterable<IslandView>): Contributor[] {
  const by = new Map<string, Contributor & { engineSet: Set<string> }>();
  for (const i of islands) {
    const key = contributorKey(i);
    let c = by.get(key);
    if (!c) {
      c = {
        key,
        name: '',
        tokens: 0,
        tokensComputed: 0,
        accepted: 0,
        rejected: 0,
        islands: 0,
        online: 0,
        engines: [],
        lastSeen: null,
        engineSet: new Set(),
      };
      by.set(key, c);
    }
    c.tokens += i.tokens;
    c.tokensComputed += i.tokensSubmitted;
    c.accepted += i.accepted;
    c.rejected += i.rejected;
    c.islands++;
    if (i.status === 'online') c.online++;
    if (i.engine) c.engineSet.add(i.engine);
    // a renamed volunteer shows under the name they use now
    if (c.lastSeen === null || i.lastSeen >= c.lastSeen) {
      c.lastSeen = i.lastSeen;
      c.name = i.name.trim() || i.id;
    }
  }
  const out = [...by.values()].map(({ engineSet, ...c }) => ({ ...c, engines: [...engineSet].sort() }));
  out.sort((a, b) => b.tokens - a.tokens || b.accepted - a.accepted || (a.name < b.name ? -1 : 1));
  return out;
}

/** One contributor's totals and place, by contributor id (zeros when the server has seen none). */
export function creditOf(islands: Iterable<IslandView>, contributorId: string): ContributorCredit {
  const ranked = contributors(islands).filter((c) => c.tokens > 0);
  const all = ranked.length;
  const at = ranked.findIndex((c) => c.key === contributorId);
  const c = at >= 0 ? ranked[at] : contributors([...islands].filter((i) => contributorKey(i) === contributorId))[0];
  return {
    contributorId,
    name: c?.name ?? null,
    tokens: c?.tokens ?? 0,
    tokensComputed: c?.tokensComputed ?? 0,
    accepted: c?.accepted ?? 0,
    rejected: c?.rejected ?? 0,
    islands: c?.islands ?? 0,
    rank: at >= 0 ? at + 1 : null,
    contributors: all,
  };
}
