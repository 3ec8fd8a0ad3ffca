// The server's view of the islands' data channels (docs/protocol.md, "Butterfly mixing"): which
// pairs of islands it signalled a link for, in which group, that neither has reported lost since.
// A later group that pairs them as butterfly partners lists them as `linked` and relays no
// signalling for them. It bounds what it keeps per island as the members do (MIX_LINKS_KEPT, least
// recently used forgotten first): forgetting a live link costs only a re-signal.

import { MIX_LINKS_KEPT } from '../protocol.ts';
import { butterflyPartners } from './butterfly.ts';

export class PairLinks {
  /** Island → its peers, least recently used first → the group whose signalling made the link. */
  private readonly peers = new Map<string, Map<string, number>>();

  constructor(private readonly kept = MIX_LINKS_KEPT) {}

  has(a: string, b: string): boolean {
    return this.peers.get(a)?.has(b) ?? false;
  }

  /** Pairs known (both directions counted once). */
  get size(): number {
    let n = 0;
    for (const m of this.peers.values()) n += m.size;
    return n / 2;
  }

  /** The pair is used by group `groupId`: signalled there (`signalled`), or reused; most recently used now. */
  use(a: string, b: string, groupId: number, signalled: boolean): void {
    const at = signalled ? groupId : (this.peers.get(a)?.get(b) ?? groupId);
    this.put(a, b, at);
    this.put(b, a, at);
  }

  /**
   * Each member's butterfly partners (by index) already linked to it, `ids` in member order (a plan's or a ring piece's
   * `linked`).
   */
  partnersLinked(ids: readonly string[]): number[][] {
    return ids.map((id, i) => butterflyPartners(i, ids.length).filter((j) => this.has(id, ids[j])));
  }

  /**
   * Group or ring `groupId` (`ids` in member order) uses every butterfly pair of its own: how many were signalled
   * afresh, how many linked already.
   */
  useAll(ids: readonly string[], groupId: number): { signalled: number; reused: number } {
    const out = { signalled: 0, reused: 0 };
    ids.forEach((id, i) => {
      for (const j of butterflyPartners(i, ids.length)) {
        if (j < i) continue;
        const had = this.has(id, ids[j]);
        out[had ? 'reused' : 'signalled']++;
        this.use(id, ids[j], groupId, !had);
      }
    });
    return out;
  }

  /**
   * Island `a` reports its link with `b`, made by group `groupId`, lost: forgotten unless a later
   * group signalled the pair since (the report is about a link already replaced).
   */
  lost(a: string, b: string, groupId: number): boolean {
    const at = this.peers.get(a)?.get(b);
    if (at === undefined || at > groupId) return false;
    this.peers.get(a)!.delete(b);
    this.peers.get(b)?.delete(a);
    return true;
  }

  /** The island is gone (its socket closed): none of its links lives on. */
  forget(a: string): void {
    for (const b of this.peers.get(a)?.keys() ?? []) this.peers.get(b)?.delete(a);
    this.peers.delete(a);
  }

  /**
   * A member order for a group of `ids` (k a power of two) that pairs as many linked islands as
   * butterfly partners as it can: greedy, index by index, from each possible first member; ties
   * keep the given order.
   */
  order(ids: string[]): string[] {
    const k = ids.length;
    let best = ids,
      bestScore = this.score(ids);
    for (let first = 0; first < k && bestScore < (k * Math.log2(k)) / 2; first++) {
      const placed = [ids[first]];
      const rest = ids.filter((_, i) => i !== first);
      while (rest.length) {
        const i = placed.length;
        const earlier = butterflyPartners(i, k)
          .filter((j) => j < i)
          .map((j) => placed[j]);
        let pick = 0,
          pickScore = -1;
        rest.forEach((id, r) => {
          const s = earlier.filter((p) => this.has(id, p)).length;
          if (s > pickScore) {
            pick = r;
            pickScore = s;
          }
        });
        placed.push(rest.splice(pick, 1)[0]);
      }
      const s = this.score(placed);
      if (s > bestScore) {
        best = placed;
        bestScore = s;
      }
    }
    return best;
  }

  /** Linked butterfly pairs in this member order. */
  private score(ids: string[]): number {
    let n = 0;
    ids.forEach((id, i) => {
      for (const j of butterflyPartners(i, ids.length)) if (j > i && this.has(id, ids[j])) n++;
    });
    return n;
  }

  private put(a: string, b: string, groupId: number): void {
    let m = this.peers.get(a);
    if (!m) this.peers.set(a, (m = new Map()));
    m.delete(b);
    m.set(b, groupId);
    while (m.size > this.kept) {
      const oldest = m.keys().next().value!;
      m.delete(oldest);
      this.peers.get(oldest)?.delete(a);
    }
  }
}
