// Butterfly mixing on the live server (docs/protocol.md, "Butterfly mixing"): the socket.io side of
// the `mix:*` messages around core/mix's MixBroker. The gateway (gateway.ts) routes its islands'
// `mix:*` events here through its own wrapper (ack required, rate limit, no throw escapes).
//
// The server matches islands whose rounds end within formWaitMs into groups, relays WebRTC
// signalling between butterfly partners of one group only, and only for pairs with no live link
// (core/mix/links.ts: a link signalled once serves every later group
// that pairs the two), collects each member's fragment, asks for
// spot checks and replays, and hands the settled group to the run (one contribution per member, its
// tokens derived from its assignment, never claimed). A group that falls apart costs nothing: its
// members are told to regroup once, then to upload directly; nothing is counted before every
// fragment is in. Each later update goes as k pieces (`mix:piece`) to rings of islands linked as
// butterfly partners (core/mix/rings.ts), which all-gather them; the rest get the whole update.

import type { Socket } from 'socket.io';
import { type CodecOptions, encodeDelta } from '../../core/codec/index.ts';
import { l2 } from '../../core/coord/aggregate.ts';
import type { ClaimedMeta } from '../../core/coord/validate.ts';
import { type BusyIsland, type GroupIO, type GroupPlan, MixBroker, memberNorms } from '../../core/mix/broker.ts';
import { butterflyPartners } from '../../core/mix/butterfly.ts';
import { PairLinks } from '../../core/mix/links.ts';
import {
  type AckMsg,
  type DeltaMeta,
  ErrorCode,
  MixFragmentSchema,
  MixLostSchema,
  type MixPlanMsg,
  MixReadySchema,
  MixSignalSchema,
  type UpdateMsg,
} from '../../core/protocol.ts';
import { type Result, err, ok } from '../../core/result.ts';
import type { MixStatus } from '../../core/api.ts';
import type { BytesOutKind } from '../metrics.ts';
import type { MixSettings } from './mix-settings.ts';
import { RingRouter } from './mix-rings.ts';
import { type MixCounters, mixStatus, newMixCounters } from './mix-counters.ts';
import { type GroupLink, MixGroup, inOrderOf } from './mix-group.ts';
import { type Ack, type IslandConn, type SocketEvent, defineEvent } from './socket-events.ts';

export const MIX_EVENTS = ['mix:ready', 'mix:fragment', 'mix:signal', 'mix:lost'] as const;
type MixEvent = (typeof MIX_EVENTS)[number];

/** How long an island that stalled a group (connected, no fragment by the deadline) uploads directly. */
const BENCH_MS = 5 * 60_000;

/** What mixing needs of the run (run-port.ts: localMixHost). */
export interface MixHost {
  readonly paramCount: number;
  maxFrameBytes(): number;
  /** The run's uplink codec: fragments use it too. */
  codec(): CodecOptions;
  /**
   * The Δ's meta with the server's figures (its `tokens`, the weight, derived from the assignment; an
   * absent claim is taken as that), or why the claim fits no assignment.
   */
  work(meta: ClaimedMeta): Result<DeltaMeta>;
  /** The islands with a round in progress (Coordinator.roundsInProgress): a short group may wait for them. */
  busy(): BusyIsland[];
  /** One member's contribution: the group's mean (decoded, and encoded for the archive); the ack as for `delta`. */
  submitMixed(meta: DeltaMeta, frame: Uint8Array, delta: Float32Array, norm: number): Promise<AckMsg>;
  ban(islandId: string, reason: string): Promise<unknown>;
  noteBytesIn(bytes: number): void;
  noteBytesOut(bytes: number, kind: BytesOutKind): void;
}

export class MixGateway {
  private readonly broker: MixBroker;
  private readonly groups = new Map<number, MixGroup>();
  /** The group each island is in now (exchanging, or receiving pieces after it mixed). */
  private readonly groupOf = new Map<string, number>();
  private readonly sockets = new Map<string, Socket>();
  private readonly readyAcks = new Map<string, Ack>();
  /** Deltas (island#seq) whose group was called off once: the next fallback is direct. */
  private readonly regrouped = new Set<string>();
  /** Islands that stalled a group, until when they upload directly. */
  private readonly benched = new Map<string, number>();
  private timer: ReturnType<typeof setTimeout> | null = null;
  /** What a group's requests need (mix-group.ts). */
  private readonly groupLink: GroupLink;

  readonly counters: MixCounters = newMixCounters();
  /** The islands' data channels, as far as the server signalled them and heard of no loss. */
  readonly links = new PairLinks();
  /** The downlink: updates as pieces to rings of islands. */
  private readonly rings: RingRouter;

  constructor(
    readonly settings: MixSettings,
    private readonly host: MixHost,
    private readonly version: () => number,
    private readonly log: (line: string) => void = () => {},
  ) {
    const c = host.codec();
    const align = c.encoding === 'sparse' || c.encoding === 'int8' || c.encoding === 'int4' ? (c.blockSize ?? 64) : 64;
    this.groupLink = {
      exchangeTimeoutMs: this.settings.exchangeTimeoutMs,
      maxFrameBytes: () => this.host.maxFrameBytes(),
      noteCheckBytes: (bytes) => {
        this.counters.checkBytes += bytes;
      },
      noteBytesIn: (bytes) => this.host.noteBytesIn(bytes),
    };
    this.broker = new MixBroker(settings, host.paramCount, align, Math.random);
    this.rings = new RingRouter(
      this.links,
      settings.k,
      () => this.broker.nextId(),
      this.counters,
      (bytes, kind) => host.noteBytesOut(bytes, kind),
    );
  }

  get k(): number {
    return this.settings.k;
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /** The `mix:*` events of the island sockets, declared like the gateway's own (socket-events.ts). */
  readonly events: Record<MixEvent, SocketEvent<IslandConn>> = {
    'mix:ready': defineEvent({
      schema: MixReadySchema,
      needsHello: true,
      handle: (c: IslandConn, { meta: raw, frameHash }, ack, id) => {
        if (raw.islandId !== undefined && raw.islandId !== id)
          return ack(err(ErrorCode.BAD_REQUEST, `mix:ready for island ${raw.islandId} on the connection of ${id}`));
        const gid = this.groupOf.get(id);
        const g = gid !== undefined ? this.groups.get(gid) : undefined;
        if (g && !g.verdicts.has(g.ids.indexOf(id)))
          return ack(err(ErrorCode.BAD_REQUEST, `island ${id} is in group ${gid}'s exchange still`));
        // the weight is the server's (tokens derived from the assignment): a
        // claim that fits no assignment uploads directly and is refused there
        const derived = this.host.work({
          ...raw,
          islandId: id,
          lossFirst: raw.lossFirst ?? NaN,
          lossLast: raw.lossLast ?? NaN,
          lossMean: raw.lossMean ?? NaN,
        });
        if (!derived.ok || (this.benched.get(id) ?? 0) > Date.now()) return ack(ok(null));
        this.readyAcks.get(id)?.(ok(null));
        this.sockets.set(id, c.socket);
        this.readyAcks.set(id, ack);
        const plan = this.broker.offer({
          islandId: id,
          meta: derived.value,
          frameHash,
          tokens: derived.value.tokens,
          readyAt: Date.now(),
        });
        if (plan) this.start(plan);
        this.schedule();
      },
    }),

    'mix:fragment': defineEvent({
      schema: MixFragmentSchema,
      needsHello: true,
      handle: (_c: IslandConn, { groupId, frame }, ack, id) => {
        const g = this.groups.get(groupId);
        const j = g ? g.ids.indexOf(id) : -1;
        if (!g || j < 0) return ack(err(ErrorCode.BAD_REQUEST, `island ${id} is not a member of group ${groupId}`));
        if (g.uploads.has(j) || g.acks.has(j))
          return ack(err(ErrorCode.BAD_REQUEST, `group ${groupId}: this member's fragment came already`));
        if (frame && frame.length > this.host.maxFrameBytes())
          return ack(err('E_OVERSIZE', `fragment of ${frame.length} bytes exceeds the largest legal frame`));
        if (frame) {
          this.counters.fragmentBytes += frame.length;
          this.host.noteBytesIn(frame.length);
        }
        g.upload(j, frame ? { frame } : null, ack);
      },
    }),

    'mix:signal': defineEvent({
      schema: MixSignalSchema,
      needsHello: true,
      handle: (_c: IslandConn, s, ack, id) => {
        // a group this island is in now, or a ring that signals its new links
        const g = this.groups.get(s.groupId);
        const ids = g && this.groupOf.get(id) === s.groupId ? g.ids : this.rings.members(s.groupId);
        const from = ids ? ids.indexOf(id) : -1;
        if (!ids || from < 0)
          return ack(err(ErrorCode.BAD_REQUEST, `island ${id} is not a member of group ${s.groupId}`));
        if (s.to >= ids.length || !butterflyPartners(from, ids.length).includes(s.to))
          return ack(
            err(
              ErrorCode.BAD_REQUEST,
              `member ${s.to} of group ${s.groupId} is not a butterfly partner of member ${from}`,
            ),
          );
        const to = g && ids === g.ids ? g.sockets[s.to] : this.sockets.get(ids[s.to]);
        if (!to?.connected) return ack(err('E_TRANSPORT', `member ${s.to} of group ${s.groupId} is gone`));
        this.counters.controlBytes += 2 * s.data.length;
        // a fresh offer (a member that lost a link the plan called linked): lost reports of the old link
        // no longer count
        if (s.kind === 'offer') this.links.use(id, ids[s.to], s.groupId, true);
        to.emit('mix:signal', { groupId: s.groupId, from, kind: s.kind, data: s.data });
        ack(ok({}));
      },
    }),

    // a lost link: the next group that pairs the two signals it afresh (a bogus report costs just that)
    'mix:lost': defineEvent({
      schema: MixLostSchema,
      needsHello: true,
      handle: (_c: IslandConn, { peer, groupId }, ack, id) => {
        if (this.links.lost(id, peer, groupId)) {
          this.counters.linksLost++;
          this.rings.lostPair(id, peer);
        }
        ack(ok({}));
      },
    }),
  };

  /** The figures the status and the dashboard show (core/api.ts MixStatus). */
  status(): MixStatus {
    return mixStatus(this.counters, this.k, Math.round(this.broker.formWait()));
  }

  /** The island is in a group whose verdict on it is not out yet (its exchange or settle is under way). */
  exchanging(islandId: string): boolean {
    const gid = this.groupOf.get(islandId);
    const g = gid !== undefined ? this.groups.get(gid) : undefined;
    return !!g && !g.verdicts.has(g.ids.indexOf(islandId)) && !g.uploads.has(g.ids.indexOf(islandId));
  }

  /** An island's socket closed: it waits for no group, and its group's wait for it ends. */
  left(islandId: string, socket: Socket): void {
    if (this.sockets.get(islandId) !== socket) return;
    this.sockets.delete(islandId);
    this.rings.left(islandId);
    this.readyAcks.delete(islandId);
    this.links.forget(islandId);
    this.broker.drop(islandId);
    const gid = this.groupOf.get(islandId);
    const g = gid !== undefined ? this.groups.get(gid) : undefined;
    if (!g) return;
    g.gone(g.ids.indexOf(islandId));
  }

  /** A new durable version: pieces to the rings (mix-rings.ts); the socket ids served so (the broadcast skips them). */
  route(u: UpdateMsg): string[] {
    return this.rings.route(u, this.sockets, (id, now) => (this.benched.get(id) ?? 0) > now);
  }

  /** An island asks for updates from `fromVersion` (its ring's exchange may have failed). */
  caughtUp(islandId: string, fromVersion: number): void {
    this.rings.caughtUp(islandId, fromVersion);
  }

  // ── groups ─────────────────────────────────

  /** Wakes at the oldest waiting island's deadline: the waiting islands form what groups they can. */
  private schedule(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const at = this.broker.nextDeadline();
    if (!Number.isFinite(at)) return;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        const due = this.broker.expire(Date.now(), this.broker.waiting < this.settings.k ? this.host.busy() : []);
        for (const m of due.direct) {
          this.counters.expired++;
          this.answerReady(m.islandId, null);
        }
        for (const p of due.groups) this.start(p);
        this.schedule();
      },
      Math.max(0, at - Date.now()),
    );
    this.timer.unref?.();
  }

  private answerReady(islandId: string, plan: MixPlanMsg | null): void {
    const ack = this.readyAcks.get(islandId);
    this.readyAcks.delete(islandId);
    ack?.(ok(plan));
  }

  private start(formed: GroupPlan): void {
    const plan = inOrderOf(formed, this.links.order(formed.members.map((m) => m.islandId)));
    const ids = plan.members.map((m) => m.islandId);
    // each member's partners already linked; the other pairs are signalled in this group
    const linked = this.links.partnersLinked(ids);
    const used = this.links.useAll(ids, plan.groupId);
    this.counters.linksSignalled += used.signalled;
    this.counters.linksReused += used.reused;
    const sockets = ids.map((id) => this.sockets.get(id)!);
    const g = new MixGroup(plan, sockets, this.groupLink);
    this.groups.set(plan.groupId, g);
    this.counters.groups++;
    const v = this.version();
    const byVersion = this.counters.groupsByVersion;
    byVersion[v] = (byVersion[v] ?? 0) + 1;
    for (const old of Object.keys(byVersion)) if (Number(old) <= v - 64) delete byVersion[Number(old)];
    for (const id of ids) {
      const old = this.groupOf.get(id);
      this.groupOf.set(id, plan.groupId);
      if (old !== undefined && old !== plan.groupId) this.endGroup(old);
    }
    const members = plan.members.map((m) => ({ islandId: m.islandId, tokens: m.tokens, frameHash: m.frameHash }));
    ids.forEach((id, index) => {
      const msg: MixPlanMsg = {
        groupId: plan.groupId,
        index,
        members,
        ranges: plan.ranges,
        exchangeTimeoutMs: this.settings.exchangeTimeoutMs,
        iceServers: this.settings.iceServers,
        ...(linked[index].length ? { linked: linked[index] } : {}),
      };
      const bytes = JSON.stringify(msg).length;
      this.counters.controlBytes += bytes;
      this.counters.planBytes += bytes;
      this.answerReady(id, msg);
    });
    void this.settle(plan.groupId).catch((e: unknown) => {
      this.log(`mix: settling group ${plan.groupId} failed: ${(e as Error)?.stack ?? String(e)}`);
      this.callOff(plan.groupId, false);
    });
  }

  private async settle(gid: number): Promise<void> {
    const g = this.groups.get(gid)!;
    const { plan } = g;
    const deadline = Date.now() + this.settings.exchangeTimeoutMs;
    const io: GroupIO = {
      // connected and silent past the deadline: it stalled its group, and uploads directly for a
      // while (a stranger cannot hold groups up round after round)
      fragment: (j) => g.fragment(j, deadline, (id) => this.benched.set(id, Date.now() + BENCH_MS)),
      check: (c, j) => g.spotCheck(c, j),
      replay: (j) => g.replay(j),
    };
    const out = await this.broker.settle(plan, io, this.host.codec());
    if (out.kind === 'direct') return this.callOff(gid, true);
    this.counters.mixedGroups++;
    this.counters.mixedMembers += out.accepted.length;
    this.counters.grossSaved += (plan.members.length - 1) * out.frames.reduce((t, f) => t + f.length, 0);
    this.counters.checks += out.checks;
    if (out.audited) this.counters.audits++;
    for (const bad of out.implicated) {
      this.counters.implicated++;
      const j = g.ids.indexOf(bad.islandId);
      const m = plan.members[j];
      g.verdict(j, {
        islandId: bad.islandId,
        seq: m.meta.seq,
        roundId: m.meta.roundId,
        status: 'rejected',
        version: this.version(),
        error: { code: ErrorCode.MIX_MISMATCH, message: bad.reason },
      });
      await this.host.ban(bad.islandId, `butterfly mixing: ${bad.reason}`);
    }
    const norms = memberNorms(l2(out.delta), out.accepted);
    // the group's mean in the run's codec: what the run archives for each member (reverts replay it)
    const frame = encodeDelta(out.delta, this.host.codec());
    await Promise.all(
      out.accepted.map(async (x, i) => {
        const ack = await this.host.submitMixed(x.meta, frame, out.delta, norms[i]);
        g.verdict(g.ids.indexOf(x.islandId), ack);
      }),
    );
    plan.members.forEach((_x, j) => {
      if (!g.verdicts.has(j)) g.verdict(j, 'direct');
    });
    this.endGroup(gid);
  }

  /** The group is called off: members still connected regroup once per Δ, the rest upload directly. */
  private callOff(gid: number, regroup: boolean): void {
    const g = this.groups.get(gid);
    if (!g) return;
    this.counters.fallbacks++;
    g.plan.members.forEach((m, j) => {
      const once = `${m.islandId}#${m.meta.seq}`;
      const again = regroup && g.sockets[j].connected && !this.regrouped.has(once);
      if (again) this.regrouped.add(once);
      if (g.sockets[j].connected) g.sockets[j].emit('mix:abort', { groupId: gid });
      g.verdict(j, again ? 'regroup' : 'direct');
    });
    if (this.regrouped.size > 4096) this.regrouped.clear();
    if (this.benched.size > 4096)
      for (const [id, until] of this.benched) if (until <= Date.now()) this.benched.delete(id);
    this.endGroup(gid);
  }

  /** Forgets a group once its verdicts are out; a member's late `mix:fragment` then hears 'direct'. */
  private endGroup(gid: number): void {
    const g = this.groups.get(gid);
    if (!g) return;
    for (const [j, ack] of g.acks) ack(ok(g.verdicts.get(j) ?? 'direct'));
    g.acks.clear();
    // a member whose fragment has not come yet gets its verdict when it does, for one exchange timeout
    const pending = g.ids.some((_, j) => !g.uploads.has(j) && g.sockets[j].connected);
    const forget = () => {
      if (this.groups.get(gid) === g) this.groups.delete(gid);
      for (const id of g.ids) if (this.groupOf.get(id) === gid) this.groupOf.delete(id);
    };
    if (pending) setTimeout(forget, this.settings.exchangeTimeoutMs).unref?.();
    else forget();
  }
}
