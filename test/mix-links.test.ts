// The server's record of the islands' data channels (core/mix/links.ts): a later group of other
// members is ordered so that the pairs it shares with earlier groups are butterfly partners (no
// signalling for them); a lost report forgets only the reporter's own pair, and only the link it
// names; each island's record is bounded (least recently used forgotten first).

import { describe, expect, it } from 'vitest';
import { PairLinks } from '../core/mix/links.ts';

describe('PairLinks', () => {
  it('orders a group of other members so that its already-linked pairs are partners', () => {
    const links = new PairLinks();
    expect(links.useAll(['A', 'B', 'C', 'D'], 1)).toEqual({ signalled: 4, reused: 0 }); // partners A-B, A-C, B-D, C-D
    // E replaces D: as given, A and B are not partners (E-C, E-A, C-B, A-B would be); ordered, A-B and A-C both are
    const order = links.order(['E', 'C', 'B', 'A']);
    expect(links.useAll(order, 2)).toEqual({ signalled: 2, reused: 2 });
    expect(links.order(['A', 'B', 'C', 'D'])).toEqual(['A', 'B', 'C', 'D']); // all four linked already: kept
    expect(links.useAll(['A', 'B', 'C', 'D'], 3)).toEqual({ signalled: 0, reused: 4 });
  });

  it("forgets a pair on its own member's report of that link, and bounds each island's record", () => {
    const links = new PairLinks(3);
    links.useAll(['A', 'B'], 1);
    expect(links.lost('C', 'B', 1)).toBe(false); // not C's pair
    links.useAll(['B', 'A'], 5); // reused: still the link group 1 made
    expect(links.lost('A', 'B', 0)).toBe(false); // a link older than the pair's
    expect(links.lost('A', 'B', 1)).toBe(true);
    expect(links.has('B', 'A')).toBe(false);
    for (const [g, p] of ['P', 'Q', 'R', 'S'].entries()) links.useAll(['A', p], 10 + g);
    expect(['P', 'Q', 'R', 'S'].map((p) => links.has('A', p))).toEqual([false, true, true, true]);
    expect(links.has('P', 'A')).toBe(false);
    links.forget('S');
    expect(links.has('A', 'S')).toBe(false);
    expect(links.size).toBe(2);
  });
});
