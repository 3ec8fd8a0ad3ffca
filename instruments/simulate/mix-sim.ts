// Butterfly mixing in the simulator: the server's mixing side (MixBroker) in process, the peers'
// data channels as in-process links in virtual time (sender's latency and uplink, receiver's
// downlink), and the downlink's update pieces. Every message a member sends the server or receives
// from it goes through that island's Link at its socket.io size (wire-bytes.ts), which row.ts
// counts as server ingress and egress.

import type { Clock } from '../../client/island/transport.ts';
import type { Link, LocalHub, LocalTransport } from './local.ts';
import type { MemberHandlers, MemberPlan, MixPort, PeerNet, UpdatePiece } from '../../client/island/mix-member.ts';
import { ackBytes, emitBytes, okBytes } from '../../core/wire-bytes.ts';
import type { CodecOptions } from '../../core/codec/index.ts';
import { l2 } from '../../core/coord/aggregate.ts';
import { checkWork } from '../../core/coord/validate.ts';
import { type FragmentUpload, type GroupPlan, type MixConfig, MixBroker, memberNorms } from '../../core/mix/broker.ts';
import { type PieceChannel, packPieces, pieceRange, unpackPieces } from '../../core/mix/butterfly.ts';
import { PairLinks } from '../../core/mix/links.ts';
import { planRings } from '../../core/mix/rings.ts';
import { sha256Hex } from '../../core/mix/commit.ts';
import {
  type AckMsg,
  type DeltaMeta,
  ErrorCode,
  type MixPieceMsg,
  type MixPlanMsg,
  type UpdateMsg,
  mixReadyMeta,
} from '../../core/protocol.ts';
import { mulberry32 } from '../../core/random.ts';
import { ok } from '../../core/result.ts';
import type { MixTotals, NetworkSpec } from './types.ts';

interface Member {
  islandId: string;
  link: Link;
  net: NetworkSpec;
  handlers: MemberHandlers | null;
  pieceListeners: Array<(p: UpdatePiece) => void>;
  dead: boolean;
  transport: LocalTransport;
}

interface Waiter<T> {
  resolve(v: T): void;
}

export class SimMixHub {
  readonly broker: MixBroker;
  readonly totals: MixTotals = {
    groups: 0,
    mixedGroups: 0,
    fallbacks: 0,
    checks: 0,
    audits: 0,
    implicated: 0,
    peerBytes: 0,
    expired: 0,
    mixedMembers: 0,
    fragmentBytes: 0,
    piecesOk: 0,
    piecesRefetched: 0,
  };
  private readonly members = new Map<string, Member>();
  private readonly groupWaiters = new Map<string, Waiter<MemberPlan | null>>();
  private readonly fragWaiters = new Map<string, Waiter<FragmentUpload | null>>();
  private readonly ackWaiters = new Map<string, Waiter<AckMsg | 'direct' | 'regroup'>>();
  /** In-flight peer messages and receivers, by `${channel}|${from}|${to}|${stage}`. */
  private readonly mail = new Map<string, unknown>();
  private readonly mailWaiters = new Map<string, Waiter<unknown>>();
  /** Pairs linked by the groups so far (forgotten when an island crashes); the rings of the latest version. */
  private readonly links = new PairLinks();
  private ringsOf: { version: number; ringed: Set<string> } | null = null;
  private readonly aborted = new Set<string>();
  /** Outcomes settled before the member asked (its fragment came after its group fell back). */
  private readonly early = new Map<string, AckMsg | 'direct' | 'regroup'>();
  /** Deltas (island#seq) whose group was called off once already: the next fallback is direct. */
  private readonly regrouped = new Set<string>();

  constructor(
    private readonly hub: LocalHub,
    private readonly clock: Clock,
    cfg: MixConfig,
    n: number,
    private readonly codec: CodecOptions,
    seed: number,
  ) {
    this.broker = new MixBroker(
      cfg,
      n,
      codec.encoding === 'sparse' || codec.encoding === 'int8' || codec.encoding === 'int4'
        ? (codec.blockSize ?? 64)
        : 64,
      mulberry32(seed),
    );
  }

  /** One island's mixing port and peer net, over its server link. */
  attach(
    transport: LocalTransport,
    link: Link,
    net: NetworkSpec,
    onGrouped?: (seq: number) => void,
  ): { port: MixPort; peers: PeerNet } {
    const self: { m: Member | null } = { m: null };
    const member = (islandId: string): Member => {
      if (self.m && self.m.islandId === islandId) return self.m;
      const prev = this.members.get(islandId);
      self.m = {
        islandId,
        link,
        net,
        handlers: pending.handlers,
        pieceListeners: pending.pieces,
        dead: false,
        transport,
      };
      if (prev) prev.dead = true;
      this.members.set(islandId, self.m);
      return self.m;
    };
    const pending: { handlers: MemberHandlers | null; pieces: Array<(p: UpdatePiece) => void> } = {
      handlers: null,
      pieces: [],
    };
    const port: MixPort = {
      active: true,
      ready: async (meta, frameHash) => {
        const m = member(meta.islandId);
        await link.up(emitBytes('up', 'mix:ready', { meta: mixReadyMeta(meta), frameHash }), 'mix:ready');
        if (m.dead) return null;
        const plan = await this.ready(m, meta, frameHash);
        await link.down(okBytes('down', plan && this.planMsg(plan)), 'mix:ready');
        if (plan) onGrouped?.(meta.seq);
        return m.dead ? null : plan;
      },
      fragment: async (groupId, up) => {
        const m = self.m!;
        await link.up(emitBytes('up', 'mix:fragment', { groupId, frame: up?.frame ?? null }), 'mix:fragment');
        const key = `${groupId}|${m.islandId}`;
        const early = this.early.get(key);
        this.early.delete(key);
        const waiting =
          early !== undefined
            ? Promise.resolve(early)
            : new Promise<AckMsg | 'direct' | 'regroup'>((resolve) => this.ackWaiters.set(key, { resolve }));
        this.resolve(this.fragWaiters, key, m.dead ? null : up);
        const r = await waiting;
        await link.down(okBytes('down', r), 'mix:fragment');
        return r;
      },
      serve: (h) => {
        pending.handlers = h;
        if (self.m) self.m.handlers = h;
      },
      onPiece: (l) => {
        pending.pieces.push(l);
      },
    };
    const peers: PeerNet = { channel: (key, index, members) => this.pieceChannel(key, index, members) };
    return { port, peers };
  }

  /** The island crashed: its peers' receives fail, its waits end. */
  kill(islandId: string): void {
    const m = this.members.get(islandId);
    if (!m) return;
    m.dead = true;
    this.broker.drop(islandId);
    this.links.forget(islandId);
    this.resolve(this.groupWaiters, islandId, null);
    for (const [key, w] of this.mailWaiters) {
      if (key.split('|')[1] === islandId) {
        this.mailWaiters.delete(key);
        w.resolve(null);
      }
    }
    for (const [key, w] of this.fragWaiters)
      if (key.endsWith(`|${islandId}`)) {
        this.fragWaiters.delete(key);
        w.resolve(null);
      }
  }

  // ── grouping and settling ────────────────────────────

  private async ready(m: Member, meta: DeltaMeta, frameHash: string): Promise<MemberPlan | null> {
    const coord = this.hub.coord;
    const rec = coord.island(meta.islandId);
    // the frame's encoding is checked at its upload
    const work = rec ? checkWork(meta, null, rec, coord.config(), this.clock.now()) : null;
    if (!work?.ok) return null; // the direct upload gets the coordinator's clear rejection
    const waiting = new Promise<MemberPlan | null>((resolve) => this.groupWaiters.set(m.islandId, { resolve }));
    const plan = this.broker.offer({
      islandId: m.islandId,
      meta,
      frameHash,
      tokens: work.meta.tokens,
      readyAt: this.clock.now(),
    });
    if (plan) this.start(plan);
    // at 2×: one left alone
    else for (const after of [1, 2]) void this.clock.sleep(after * this.broker.formWait()).then(() => this.expire());
    return waiting;
  }

  /** The broker's due groups start; islands left alone upload directly. */
  private expire(): void {
    const due = this.broker.expire(this.clock.now(), this.hub.coord.roundsInProgress());
    for (const e of due.direct) {
      this.totals.expired++;
      this.resolve(this.groupWaiters, e.islandId, null);
    }
    for (const g of due.groups) this.start(g);
  }

  private start(plan: GroupPlan): void {
    this.totals.groups++;
    // the group's butterfly partners are linked from now on (live: once signalled, links.ts)
    this.links.useAll(
      plan.members.map((x) => x.islandId),
      plan.groupId,
    );
    plan.members.forEach((x, index) => this.resolve(this.groupWaiters, x.islandId, { ...plan, index }));
    void this.settle(plan);
  }

  private async settle(plan: GroupPlan): Promise<void> {
    const ids = plan.members.map((x) => x.islandId);
    const at = (j: number) => this.members.get(ids[j])!;
    const timeout = <T>(p: Promise<T>, ms: number, key?: string) =>
      Promise.race([
        p,
        this.clock.sleep(ms).then(() => {
          if (key) this.resolve(this.fragWaiters, key, null);
          return null;
        }),
      ]);
    const out = await this.broker.settle(
      plan,
      {
        fragment: (j) =>
          timeout(
            new Promise<FragmentUpload | null>((resolve) => {
              if (at(j).dead) return resolve(null);
              this.fragWaiters.set(`${plan.groupId}|${ids[j]}`, { resolve });
            }),
            this.broker.cfg.exchangeTimeoutMs,
            `${plan.groupId}|${ids[j]}`,
          ),
        check: async (c, j) => {
          const m = at(c);
          if (m.dead || !m.handlers) return null;
          await m.link.down(emitBytes('down', 'mix:check', { groupId: plan.groupId, j }), 'mix:check');
          const hash = await m.handlers.check(plan.groupId, j);
          await m.link.up(ackBytes('up', { groupId: plan.groupId, hash }), 'mix:check');
          return hash;
        },
        replay: async (j) => {
          const m = at(j);
          if (m.dead || !m.handlers) return null;
          await m.link.down(emitBytes('down', 'mix:replay', { groupId: plan.groupId }), 'mix:replay');
          const f = await m.handlers.replay(plan.groupId);
          await m.link.up(ackBytes('up', { groupId: plan.groupId, frame: f }), 'mix:replay');
          return f;
        },
      },
      this.codec,
    );
    const answer = (islandId: string, a: AckMsg | 'direct' | 'regroup') => {
      const key = `${plan.groupId}|${islandId}`;
      if (this.ackWaiters.has(key)) this.resolve(this.ackWaiters, key, a);
      else this.early.set(key, a);
    };
    const direct = (islandId: string) => answer(islandId, 'direct');
    if (out.kind === 'direct') {
      this.totals.fallbacks++;
      this.abort(`g${plan.groupId}`);
      for (const id of ids) {
        const m = this.members.get(id);
        if (m && !m.dead)
          void m.link.down(emitBytes('down', 'mix:abort', { groupId: plan.groupId }, false), 'mix:abort');
      }
      // the members still there try once more to mix (with each other or others now ready)
      for (const x of plan.members) {
        const once = `${x.islandId}#${x.meta.seq}`;
        const alive = this.members.get(x.islandId)?.dead === false;
        if (alive && !this.regrouped.has(once)) {
          this.regrouped.add(once);
          answer(x.islandId, 'regroup');
        } else direct(x.islandId);
      }
      return;
    }
    this.totals.mixedGroups++;
    this.totals.mixedMembers += plan.members.length;
    this.totals.fragmentBytes += out.frames.reduce((a, f) => a + f.length, 0);
    this.totals.checks += out.checks;
    if (out.audited) this.totals.audits++;
    const coord = this.hub.coord;
    for (const bad of out.implicated) {
      this.totals.implicated++;
      coord.recordAudit(bad.islandId, false);
      coord.ban(bad.islandId, this.clock.now(), `butterfly mixing: ${bad.reason}`);
      this.links.forget(bad.islandId); // live, the ban closes its socket: no ring holds it
      await this.hub.dispatch();
      const m = plan.members.find((x) => x.islandId === bad.islandId)!;
      answer(bad.islandId, {
        islandId: bad.islandId,
        seq: m.meta.seq,
        roundId: m.meta.roundId,
        status: 'rejected',
        version: coord.version,
        error: { code: ErrorCode.MIX_MISMATCH, message: bad.reason },
      });
    }
    const norms = memberNorms(l2(out.delta), out.accepted);
    // one contribution per member, its tokens and credit the server's; the same group mean for each
    await Promise.all(
      out.accepted.map(async (x, i) => {
        const ack = await this.hub.submit({
          meta: x.meta,
          frame: out.frames[plan.members.indexOf(x)],
          decoded: ok({ delta: out.delta.slice(), norm: norms[i] }),
        });
        answer(x.islandId, ack);
      }),
    );
    for (const x of plan.members)
      if (!out.accepted.includes(x) && !out.implicated.some((b) => b.islandId === x.islandId)) direct(x.islandId);
  }

  // ── the downlink: pieces to rings of linked islands (core/mix/rings.ts, as the live server) ─────

  /** LocalHub's route: true when the update goes to this transport's island as a piece. */
  route(update: UpdateMsg, t: LocalTransport): boolean {
    if (this.ringsOf?.version !== update.version)
      this.ringsOf = { version: update.version, ringed: this.sendRings(update) };
    const m = t.id ? this.members.get(t.id) : undefined;
    return !!m && !m.dead && m.transport === t && this.ringsOf.ringed.has(m.islandId);
  }

  /** Partitions the members still there into rings and sends each its pieces; the islands ringed. */
  private sendRings(update: UpdateMsg): Set<string> {
    const eligible = [...this.members.values()]
      .filter((m) => !m.dead && m.pieceListeners.length > 0)
      .map((m) => m.islandId);
    // a ring's new links open at once here (the simulator's peers need no signalling)
    const rings = planRings(eligible, this.links, this.broker.cfg.k, () => true);
    for (const { ids } of rings) {
      const id = this.broker.nextId();
      this.links.useAll(ids, id);
      void this.sendPieces(
        update,
        { id, members: ids },
        ids.map((x) => this.members.get(x)!),
      );
    }
    return new Set(rings.flatMap((r) => r.ids));
  }

  private async sendPieces(update: UpdateMsg, g: { id: number; members: string[] }, all: Member[]): Promise<void> {
    const { frame, ...head } = update;
    const frameHash = sha256Hex(frame);
    const k = all.length;
    all.forEach((m, index) => {
      const [a, b] = pieceRange(frame.length, k, index);
      const msg: MixPieceMsg = {
        update: head,
        frameHash,
        groupId: g.id,
        index,
        members: g.members,
        piece: frame.slice(a, b),
      };
      void m.link.down(emitBytes('down', 'mix:piece', msg, false), 'mix:piece').then(() => {
        if (!m.dead) for (const l of m.pieceListeners) l(msg);
      });
    });
  }

  /** The plan as the live server sends it (server/gateway/mix.ts): what a member's `mix:ready` answer carries. */
  private planMsg(plan: MemberPlan): MixPlanMsg {
    return {
      groupId: plan.groupId,
      index: plan.index,
      members: plan.members.map((x) => ({ islandId: x.islandId, tokens: x.tokens, frameHash: x.frameHash })),
      ranges: plan.ranges,
      exchangeTimeoutMs: this.broker.cfg.exchangeTimeoutMs,
      iceServers: [],
    };
  }

  // ── in-process data channels ───────────────────────────

  /** The server called a group off: its members stop waiting on each other (their exchange fails at once). */
  private abort(ch: string): void {
    this.aborted.add(ch);
    for (const [key, w] of this.mailWaiters)
      if (key.startsWith(`${ch}|`)) {
        this.mailWaiters.delete(key);
        w.resolve(null);
      }
  }

  /** A member's data channels: each stage's pieces cross as one packed message (packPieces). */
  private pieceChannel(ch: string, index: number, ids: string[]): PieceChannel {
    return {
      send: (to, stage, pieces) => {
        const msg = packPieces(pieces);
        return this.post(ch, ids[index], ids[to], stage, msg, msg.length);
      },
      recv: async (from, stage) => {
        const m = await this.take<Uint8Array>(ch, ids[from], ids[index], stage);
        return m && unpackPieces(m);
      },
    };
  }

  private async post(ch: string, from: string, to: string, stage: number, msg: unknown, bytes: number): Promise<void> {
    const a = this.members.get(from),
      b = this.members.get(to);
    if (!a || !b || a.dead) return;
    this.totals.peerBytes += bytes;
    await this.clock.sleep(
      a.net.latencyMs + (1000 * bytes) / a.net.upBytesPerSec + (1000 * bytes) / b.net.downBytesPerSec,
    );
    if (a.dead || b.dead) return;
    const key = `${ch}|${from}|${to}|${stage}`;
    const w = this.mailWaiters.get(key);
    if (w) {
      this.mailWaiters.delete(key);
      w.resolve(msg);
    } else this.mail.set(key, msg);
  }

  private take<T>(ch: string, from: string, to: string, stage: number): Promise<T | null> {
    const key = `${ch}|${from}|${to}|${stage}`;
    if (this.mail.has(key)) {
      const m = this.mail.get(key) as T;
      this.mail.delete(key);
      return Promise.resolve(m);
    }
    if (this.members.get(from)?.dead !== false || this.aborted.has(ch)) return Promise.resolve(null);
    return new Promise<T | null>((resolve) => {
      this.mailWaiters.set(key, { resolve: resolve as (v: unknown) => void });
      void this.clock.sleep(this.broker.cfg.exchangeTimeoutMs).then(() => this.resolve(this.mailWaiters, key, null));
    });
  }

  private resolve<T>(map: Map<string, Waiter<T>>, key: string, v: T): void {
    const w = map.get(key);
    if (w) {
      map.delete(key);
      w.resolve(v);
    }
  }
}
