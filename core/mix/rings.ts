// The downlink's groups ("rings"): which islands all-gather one update's pieces together. The server
// sends each ring k byte pieces of an update frame (one frame's bytes for k islands), and its members
// run the butterfly exchange on them over their data channels (butterfly.ts).
//
// Rings are not the groups islands last mixed in. Groups of the uplink form from whoever is ready
// within the merge window, so a fast island regroups every few seconds while a slow one trains on;
// a downlink that followed the last group lost it at the first regroup, and the slow island got
// every later update whole. A ring needs only data channels between its butterfly partners, and
// those outlive the groups that made them (links.ts), so each update partitions the islands anew
// over the links the server knows: as many rings of k as the links allow, then smaller powers of
// two, and whole updates for the rest.

import { butterflyPartners } from './butterfly.ts';

/** Search steps per ring size before settling for smaller rings (a ring of 8 over 16 links each is about 16^7 orders at worst). */
const SEARCH_BUDGET = 20_000;

/**
 * A partition of `ids` (in this order of preference) into rings: each of a power-of-two size in
 * [2, k], each in butterfly order (member i is linked to every partner i XOR 2^s). Islands no ring
 * can hold are left out (they get the update whole). Deterministic for the same input.
 */
export function formRings(ids: readonly string[], linked: (a: string, b: string) => boolean, k: number): string[][] {
  const free = new Set(ids);
  const rings: string[][] = [];
  for (let size = k; size >= 2; size /= 2) {
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
function place(ring: string[], size: number, free: Set<string>, linked: (a: string, b: string) => boolean, step: () => boolean): boolean {
  const i = ring.length;
  if (i === size) return true;
  const earlier = butterflyPartners(i, size).filter((j) => j < i).map((j) => ring[j]);
  for (const id of free) {
    if (ring.includes(id) || !earlier.every((p) => linked(p, id))) continue;
    if (!step()) return false;
    ring.push(id);
    if (place(ring, size, free, linked, step)) return true;
    ring.pop();
  }
  return false;
}
