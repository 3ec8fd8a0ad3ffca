import { describe, expect, it } from 'vitest';
import { butterflyPartners } from '../core/mix/butterfly.ts';
import { PairLinks } from '../core/mix/links.ts';
import { formRings, planRings } from '../core/mix/rings.ts';

/** Links as groups made them: every butterfly pair of each group, in member order. */
function linksOf(groups: string[][]): PairLinks {
  const links = new PairLinks();
  groups.forEach((g, gid) => links.useAll(g, gid));
  return links;
}

/** Every ring is a power of two in [2, k], disjoint from the others, its butterfly partners linked. */
function expectValid(rings: string[][], links: PairLinks, k: number): void {
  const seen = new Set<string>();
  for (const r of rings) {
    expect(r.length >= 2 && r.length <= k && (r.length & (r.length - 1)) === 0).toBe(true);
    r.forEach((id, i) => {
      expect(seen.has(id)).toBe(false);
      seen.add(id);
      for (const j of butterflyPartners(i, r.length)) expect(links.has(id, r[j])).toBe(true);
    });
  }
}

describe('downlink rings (core/mix/rings.ts)', () => {
  it('islands regrouped across groups still form rings of k over the links earlier groups made', () => {
    // round 1: {a,b,c,d} {e,f,g,h}; round 2 shuffled: {a,e,b,f} {c,g,d,h}: the last groups of a's
    // and c's are gone, but their links still hold two rings of 4
    const ids = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
    const links = linksOf([
      ['a', 'b', 'c', 'd'],
      ['e', 'f', 'g', 'h'],
      ['a', 'e', 'b', 'f'],
      ['c', 'g', 'd', 'h'],
    ]);
    const rings = formRings(ids, (x, y) => links.has(x, y), 4);
    expectValid(rings, links, 4);
    expect(rings.map((r) => r.length)).toEqual([4, 4]);
    expect(formRings(ids, (x, y) => links.has(x, y), 4)).toEqual(rings); // deterministic
  });

  it('falls back to pairs, and leaves out islands with no link (they get the update whole)', () => {
    const links = linksOf([
      ['a', 'b'],
      ['c', 'd'],
      ['b', 'c'],
    ]);
    const rings = formRings(['a', 'b', 'c', 'd', 'x'], (p, q) => links.has(p, q), 4);
    expectValid(rings, links, 4);
    // a-b-c-d is a path, not a butterfly square: two pairs, x alone
    expect(rings).toEqual([
      ['a', 'b'],
      ['c', 'd'],
    ]);
    expect(formRings(['x', 'y'], () => false, 4)).toEqual([]);
  });

  it('a lost link takes its pair out of the rings that needed it', () => {
    const links = linksOf([['a', 'b', 'c', 'd']]);
    expect(formRings(['a', 'b', 'c', 'd'], (p, q) => links.has(p, q), 4)).toHaveLength(1);
    links.lost('a', 'b', 0);
    const rings = formRings(['a', 'b', 'c', 'd'], (p, q) => links.has(p, q), 4);
    expectValid(rings, links, 4);
    expect(rings.map((r) => r.length)).toEqual([2, 2]);
  });

  it('rings of 8 over a dense link graph, within the search budget', () => {
    const ids = Array.from({ length: 64 }, (_, i) => `i${i}`);
    const all = new Set(ids);
    const rings = formRings(ids, (p, q) => all.has(p) && all.has(q) && p !== q, 8);
    expect(rings.map((r) => r.length)).toEqual(Array(8).fill(8));
  });

  it('islands the links cannot ring go in fresh rings of k that signal only their missing pairs; a pair lost lately keeps its islands out', () => {
    // a-b-c-d linked as a square; e, f, g, h met a, b, c, d only in pairs
    const links = linksOf([
      ['a', 'b', 'c', 'd'],
      ['e', 'a'],
      ['f', 'b'],
      ['g', 'h'],
    ]);
    const ids = ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'];
    const plans = planRings(ids, links, 4, () => true);
    expect(plans[0]).toEqual({ ids: ['a', 'b', 'c', 'd'], linked: null });
    // e, f, g, h: one ring; g-h is linked, and links.order puts them as partners: they signal nothing for it
    expect(plans).toHaveLength(2);
    const fresh = plans[1];
    expect(new Set(fresh.ids)).toEqual(new Set(['e', 'f', 'g', 'h']));
    fresh.ids.forEach((id, i) => {
      for (const j of butterflyPartners(i, 4)) expect(fresh.linked![i].includes(j)).toBe(links.has(id, fresh.ids[j]));
    });
    expect(fresh.linked!.flat().length).toBe(2); // g→h and h→g
    // e's links lost lately: no fresh ring; g-h still a ring of 2 over its link, e and f whole
    const cautious = planRings(ids, links, 4, (p, q) => p !== 'e' && q !== 'e');
    expect(cautious.slice(1)).toEqual([{ ids: ['g', 'h'], linked: null }]);
  });
});
