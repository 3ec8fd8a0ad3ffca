// Butterfly mixing's downlink on the live server: each durable version goes as k pieces
// (`mix:piece`) to rings of connected mixing islands (core/mix/rings.ts planRings), not to the
// groups they last mixed in. The router keeps what the rings need beyond the links: which rings
// signal new links (the gateway relays `mix:signal` naming them), the pairs reported lost lately
// (not signalled again for a while), and each island's latest ring, so that a ring whose exchange
// failed is noticed (a member asks for the version after all) and its members get whole updates
// for a while.

import type { Socket } from 'socket.io';
import { pieceRange } from '../../core/mix/butterfly.ts';
import { sha256Hex } from '../../core/mix/commit.ts';
import type { PairLinks } from '../../core/mix/links.ts';
import { planRings } from '../../core/mix/rings.ts';
import type { MixPieceMsg, UpdateMsg } from '../../core/protocol.ts';
import type { BytesOutKind } from '../metrics.ts';

/** Rings whose signalling the server relays, at most (the latest; a ring signals within its exchange timeout). */
const RINGS_SIGNALLING = 64;
/**
 * A pair reported lost is not signalled for a ring again for this long (a link that cannot open is not retried every
 * update).
 */
const LOST_COOLDOWN_MS = 5 * 60_000;
/** The members of a ring whose exchange failed get whole updates this long. */
const RING_BENCH_MS = 60_000;
/** Islands remembered per map at most, before the expired are swept. */
const KEPT = 4096;

const pairKey = (a: string, b: string) => (a < b ? `${a} ${b}` : `${b} ${a}`);

/** What the router counts (the gateway's MixCounters share these fields). */
export interface RingCounters {
  /** Bytes of update pieces sent, and the rings they went to (one per ring and version). */
  pieceBytes: number;
  rings: number;
  /** Rings whose exchange failed (a member asked the server for the version after all). */
  ringsFailed: number;
  /** Pairs signalled for rings (the rest of their pairs were linked). */
  ringLinksSignalled: number;
  /** Server bytes mixing saved before its own costs (MixStatus.savedBytes). */
  grossSaved: number;
}

export class RingRouter {
  /** Rings that signal new links, by id: their members. */
  private readonly signalling = new Map<number, string[]>();
  /** Pairs reported lost, and when. */
  private readonly lost = new Map<string, number>();
  /** Each island's latest ring (its version and members); islands kept out of rings until when. */
  private readonly lastRing = new Map<string, { version: number; ids: string[] }>();
  private readonly benched = new Map<string, number>();

  constructor(
    private readonly links: PairLinks,
    private readonly k: number,
    private readonly nextId: () => number,
    private readonly counters: RingCounters,
    private readonly noteBytesOut: (bytes: number, kind: BytesOutKind) => void,
  ) {}

  /**
   * Pieces of a new durable version to rings of `sockets` (islands that sent `mix:ready`) still
   * connected and not `excluded`. Returns the socket ids served so (the broadcast skips them).
   */
  route(
    u: UpdateMsg,
    sockets: ReadonlyMap<string, Socket>,
    excluded: (islandId: string, now: number) => boolean,
  ): string[] {
    const now = Date.now();
    const eligible: string[] = [];
    for (const [id, s] of sockets)
      if (s.connected && !excluded(id, now) && (this.benched.get(id) ?? 0) <= now) eligible.push(id);
    const rings = planRings(
      eligible,
      this.links,
      this.k,
      (a, b) => now - (this.lost.get(pairKey(a, b)) ?? -Infinity) >= LOST_COOLDOWN_MS,
    );
    if (!rings.length) return [];
    const served: string[] = [];
    const { frame, ...head } = u;
    const frameHash = sha256Hex(frame);
    for (const { ids: ring, linked } of rings) {
      const groupId = this.nextId();
      if (linked) this.signal(groupId, ring);
      const last = { version: u.version, ids: ring };
      ring.forEach((id, index) => {
        const s = sockets.get(id)!;
        this.lastRing.set(id, last);
        const [a, b] = pieceRange(frame.length, ring.length, index);
        const piece: MixPieceMsg = {
          update: head,
          frameHash,
          groupId,
          index,
          members: ring,
          piece: frame.subarray(a, b),
          ...(linked ? { linked: linked[index] } : {}),
        };
        s.emit('mix:piece', piece);
        this.counters.pieceBytes += b - a;
        this.counters.grossSaved += ((ring.length - 1) * frame.length) / ring.length; // k − 1 whole frames per ring
        this.noteBytesOut(b - a + 256, 'piece');
        served.push(s.id);
      });
    }
    this.counters.rings += rings.length;
    return served;
  }

  /** The members of ring `groupId` when it signals new links (the gateway relays `mix:signal` among them). */
  members(groupId: number): string[] | undefined {
    return this.signalling.get(groupId);
  }

  /** The pair's link was reported lost: no ring signals it again for LOST_COOLDOWN_MS. */
  lostPair(a: string, b: string): void {
    this.lost.set(pairKey(a, b), Date.now());
    if (this.lost.size > KEPT) this.lost.delete(this.lost.keys().next().value!);
  }

  /**
   * An island asks for updates from before a version it got a piece of: its ring's exchange failed
   * (a member gone, or one that sent a wrong piece). The ring's members get whole updates for
   * RING_BENCH_MS: a member that lies about pieces costs its ring-mates a refetch now and then, not
   * one every version.
   */
  caughtUp(islandId: string, fromVersion: number): void {
    const r = this.lastRing.get(islandId);
    if (!r || fromVersion >= r.version) return;
    this.counters.ringsFailed++;
    const now = Date.now();
    for (const id of r.ids) {
      this.benched.set(id, now + RING_BENCH_MS);
      if (this.lastRing.get(id) === r) this.lastRing.delete(id);
    }
    if (this.benched.size > KEPT) for (const [id, t] of this.benched) if (t <= now) this.benched.delete(id);
  }

  /** The island's socket closed. */
  left(islandId: string): void {
    this.lastRing.delete(islandId);
  }

  /** A ring with new links: its signalling is relayed, and the server knows its pairs from now on. */
  private signal(groupId: number, ids: string[]): void {
    this.signalling.set(groupId, ids);
    if (this.signalling.size > RINGS_SIGNALLING) this.signalling.delete(this.signalling.keys().next().value!);
    this.counters.ringLinksSignalled += this.links.useAll(ids, groupId).signalled;
  }
}
