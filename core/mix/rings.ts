// The downlink's groups ("rings"): which islands all-gather one update's pieces together. The server
// sends each ring k byte pieces of an update frame (one frame's bytes for k islands), and its members
// run the butterfly exchange on them over their data channels (butterfly.ts).
//
// Rings are not the groups islands last mixed in. Groups of the uplink form from whoever is ready
// within the merge window, so a fast island regroups every few seconds while a slow one trains on;
// a downlink that followed the last group lost it at the first regroup, and the slow island got
// every later update whole. A ring needs only data channels between its butterfly partners, and
// those outlive the groups that made them (links.ts), so each update partitions the islands anew
// over the links the server knows: as many rings of k as the links allow; the islands left over
// in rings of k that signal their missing links once (`linked` on the piece, as on a plan), which
// later updates then reuse; smaller rings over the links there are; whole updates for the rest.

import { butterflyPartners } from './butterfly.ts';
import type { PairLinks } from './links.ts';

/**
 * One ring of an update: its members in butterfly order; `linked` per member when some of its pairs must be signalled
 * (null: all linked).
 */
export interface RingPlan {
  ids: string[];
  linked: number[][] | null;
}

/**
 * The rings of one update (the policy above). `canSignal(a, b)`: the pair may be connected afresh
 * (the server keeps a pair that was lost lately out, so a link that cannot open is not tried per update).
 */
export function planRings(
  ids: readonly string[],
  links: Pick<PairLinks, 'has' | 'order' | 'partnersLinked'>,
  k: number,
  canSignal: (a: string, b: string) => boolean,
): RingPlan[] {
  const has = (a: string, b: string) => links.has(a, b);
  const full = formRings(ids, has, k, k);
  const ringed = new Set(full.flat());
  const plans: RingPlan[] = full.map((r) => ({ ids: r, linked: null }));
  let left = ids.filter((id) => !ringed.has(id));
  const rest: string[] = [];
  while (left.length >= k) {
    const ring = links.order(left.slice(0, k));
    const pairs = ring.flatMap((id, i) =>
      butterflyPartners(i, k)
        .filter((j) => j > i)
        .map((j) => [id, ring[j]] as const),
    );
    if (pairs.every(([a, b]) => has(a, b) || canSignal(a, b))) {
      plans.push({ ids: ring, linked: links.partnersLinked(ring) });
      left = left.slice(k);
    } else {
      rest.push(left[0]);
      left = left.slice(1);
    }
  }
  for (const r of formRings([...rest, ...left], has, k / 2)) plans.push({ ids: r, linked: null });
  return plans;
}

/**
 * Search steps per ring size before settling for smaller rings (a ring of 8 over 16 links each is about 16^7 orders at
 * worst).
 */
const SEARCH_BUDGET = 20_000;

/**
 * A partition of `ids` (in this order of preference) into rings: each of a power-of-two size in
 * [minSize, k], each in butterfly order (member i is linked to every partner i XOR 2^s). Islands no ring
 * can hold are left out (they get the update whole). Deterministic for the same input.
 */
export function formRings(
  ids: readonly string[],
  linked: (a: string, b: string) => boolean,
  k: number,
  minSize = 2,
): string[][] {
  const free = new Set(ids);
  const rings: string[][] = [];
  for (let size = k; size >= Math.max(2, minSize); size /= 2) {
    let budget = SEARCH_BUDGET;
    for (const first of ids) {
      if (!free.has(first) || free.size < size) continue;
      const ring = [first];
      const step = () => budget-- > 0;
      if (!place(ring, size, free, linked, step)) continue;
      for (const id of ring) free.delete(id);
      rings.push(ring);
    }
  }
  return rings;
}

/** Fills `ring` to `size` from `free` by depth-first search; true when it did (ring then holds the order). */
function place(
  ring: string[],
  size: number,
  free: Set<string>,
  linked: (a: string, b: string) => boolean,
  step: () => boolean,
): boolean {
  const i = ring.length;
  if (i === size) return true;
  const earlier = butterflyPartners(i, size)
    .filter((j) => j < i)
    .map((j) => ring[j]);
  for (const id of free) {
    if (ring.includes(id) || !earlier.every((p) => linked(p, id))) continue;
    if (!step()) return false;
    ring.push(id);
    if (place(ring, size, free, linked, step)) return true;
    ring.pop();
  }
  return false;
}
