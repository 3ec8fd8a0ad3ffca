// The run's history (one point per outer update, for the dashboard and /api/history) and the
// event log's lines: `eventLine` writes a coordinator event as a line of events.jsonl, `replay`
// reads the lines back on startup (history, eval losses, traffic, the last applied ack per island).
// Live points, evals and config changes also go to the run's scalar log (scalars.ts) when it has one.

import type { ConfigChange, HistoryPoint } from '../../core/api.ts';
import type { CoordinatorConfig, CoordinatorEvent } from '../../core/coord/index.ts';
import type { AckMsg } from '../../core/protocol.ts';
import { IslandQuality } from './island-quality.ts';
import type { LogEvent } from './store.ts';
import { type ScalarLog, pointScalars } from './scalars.ts';
import { learningRate } from '../../core/model/schedule.ts';

type UpdateEvent = Extract<CoordinatorEvent, { type: 'update' }>;
/** A line of events.jsonl before the store stamps its time. */
export type LogLine = Omit<LogEvent, 't'> & { t?: number };

const TOKENS_PER_SEC_WINDOW_MS = 60_000;
/** History points a carry line holds at most (older ones thinned evenly, the newest kept whole). */
const CARRY_POINTS = 4000;

export const finiteOrNull = (x: number): number | null => (Number.isFinite(x) ? x : null);

/** Traffic totals and island counts the history records beside the coordinator's stats. */
export interface PointContext {
  islandsOnline: number;
  bytesInTotal: number;
  bytesOutTotal: number;
  tokensByEngine: Record<string, number>;
  /** The outer lr of the step and the inner lr at its token position (lrAt). */
  outerLr: number | null;
  innerLr: number | null;
}

/** The outer lr, and the inner lr the schedule gives at `tokensApplied` (what the next assignment starts at). */
export function lrAt(c: CoordinatorConfig, tokensApplied: number): Pick<PointContext, 'outerLr' | 'innerLr'> {
  const s = { maxLr: c.innerLr.maxLr, minLr: c.innerLr.minLr, warmup: c.innerLr.warmupTokens, total: c.totalTokens };
  return { outerLr: c.outer.lr, innerLr: learningRate(s, tokensApplied) };
}

export class RunHistory {
  readonly points: HistoryPoint[] = [];
  /** Every change of the run's knobs (Admin PATCH), at the version it took effect from. */
  readonly configChanges: ConfigChange[] = [];
  lastEval: { version: number; loss: number } | null = null;
  /** Each island's accepted Δs and their quality. */
  readonly islands = new IslandQuality();
  /** Where live points, evals and changes are written for trackers (null: nowhere). */
  scalars: ScalarLog | null = null;
  /** Changed points not yet streamed to dashboards (versions). */
  private dirty = new Set<number>();

  get last(): HistoryPoint | undefined {
    return this.points[this.points.length - 1];
  }

  /** Points after `since` (a version), at most `limit` (the newest). */
  since(since = -1, limit = 100_000): HistoryPoint[] {
    let i = this.points.length;
    while (i > 0 && this.points[i - 1].version > since) i--;
    const out = this.points.slice(i);
    return out.length > limit ? out.slice(out.length - limit) : out;
  }

  /** Points changed since the last call (new versions, late eval losses). */
  takeDirty(): HistoryPoint[] {
    if (this.dirty.size === 0) return [];
    const versions = this.dirty;
    this.dirty = new Set();
    return this.points.filter((p) => versions.has(p.version));
  }

  /** The newest point's rate while updates keep coming; 0 after a minute without one. */
  tokensPerSec(now: number): number {
    const last = this.last;
    return last && now - last.time <= TOKENS_PER_SEC_WINDOW_MS ? last.tokensPerSec : 0;
  }

  /**
   * The mean frame size of the last `n` updates up to `version` (null: none yet): what a volunteer
   * downloads per version. From the history, not the coordinator's catch-up (which refuses a span
   * whose frames outweigh θ: 8 int8 frames do).
   */
  meanUpdateBytes(version: number, n = 8): number | null {
    const sizes: number[] = [];
    for (let i = this.points.length - 1; i >= 0 && sizes.length < n; i--) {
      const p = this.points[i];
      if (p.version <= version && p.version > 0 && p.bytesOut > 0) sizes.push(p.bytesOut);
    }
    return sizes.length ? sizes.reduce((a, b) => a + b, 0) / sizes.length : null;
  }

  /** Version 0 of a new run. */
  start(time: number, islandsOnline: number): void {
    if (this.points.length === 0) this.points.push(emptyPoint(time, islandsOnline));
  }

  addUpdate(ev: UpdateEvent, c: PointContext): void {
    const s = ev.stats;
    this.islands.record(s.version, s.time, ev.contributors);
    this.push({
      version: s.version,
      time: s.time,
      tokens: s.tokens,
      totalTokens: s.totalTokens,
      tokensPerSec: this.rateAt(s.time, s.totalTokens),
      trainLoss: finiteOrNull(s.trainLoss),
      evalLoss: null,
      islandsOnline: c.islandsOnline,
      contributors: s.contributors,
      bytesIn: s.bytesIn,
      bytesOut: s.bytesOut,
      bytesInTotal: c.bytesInTotal,
      bytesOutTotal: c.bytesOutTotal,
      stalenessHist: s.stalenessHist,
      accepted: s.accepted,
      rejected: s.rejected,
      compressionRatio: s.compressionRatio,
      goodput: s.goodput,
      updateNorm: s.updateNorm,
      ...(s.shortClose ? { shortClose: s.shortClose } : {}),
      ...(s.trustGain !== undefined ? { trustGain: s.trustGain } : {}),
      outerLr: c.outerLr,
      innerLr: c.innerLr,
      ...this.engineRates(s.time, c.tokensByEngine),
    });
    const p = this.last;
    if (p?.version === s.version) this.scalars?.write(p.version, p.time, pointScalars(p));
  }

  /**
   * A knob changed at `version` (the Admin PATCH): `changes` as the operator named the knobs (the
   * history's list), `patch` the coordinator's (its config paths: the scalar log's config/<path> tags).
   */
  configChanged(version: number, time: number, changes: Record<string, unknown>, patch: unknown): void {
    this.configChanges.push({ version, time, changes });
    this.scalars?.change(version, time, patch);
  }

  /** An eval loss for `version` (it may arrive after later updates). */
  setEval(version: number, loss: number): void {
    this.lastEval = { version, loss };
    const p = this.find(version);
    this.scalars?.write(version, p?.time ?? Date.now(), { 'eval/loss': loss });
    if (p) {
      p.evalLoss = loss;
      this.dirty.add(p.version);
    }
  }

  /**
   * Rebuilds the history from the event log. `acks` receives the last applied ack per island;
   * returns the traffic totals. Lines past `maxVersion` (the checkpoint's) never became durable.
   */
  replay(
    events: Iterable<LogEvent>,
    maxVersion: number,
    acks: Map<string, AckMsg>,
  ): { bytesIn: number; bytesOut: number } {
    const traffic = { bytesIn: 0, bytesOut: 0 };
    for (const e of events) this.replayLine(e, maxVersion, acks, traffic);
    this.dirty.clear();
    return traffic;
  }

  /** The first line of a rotated log: everything `replay` learnt from the lines before it. */
  carryLine(acks: Map<string, AckMsg>, traffic: { bytesIn: number; bytesOut: number }): LogLine {
    const p = this.points;
    const keep = CARRY_POINTS / 2;
    const older =
      p.length > CARRY_POINTS
        ? p.slice(0, p.length - keep).filter((_, i, a) => i % Math.ceil(a.length / keep) === 0)
        : [];
    return {
      type: 'carry',
      points: [...older, ...p.slice(older.length ? p.length - keep : 0)],
      acks: [...acks.values()],
      lastEval: this.lastEval,
      configChanges: this.configChanges,
      ...traffic,
    };
  }

  private replayLine(
    e: LogEvent,
    maxVersion: number,
    acks: Map<string, AckMsg>,
    traffic: { bytesIn: number; bytesOut: number },
  ): void {
    const num = (x: unknown, d = 0) => (typeof x === 'number' && Number.isFinite(x) ? x : d);
    if (e.type === 'carry') {
      // written by the server itself at a rotation: trusted like every other line of the log
      this.points.splice(
        0,
        this.points.length,
        ...((e.points ?? []) as HistoryPoint[]).filter((p) => p.version <= maxVersion),
      );
      for (const a of (e.acks ?? []) as AckMsg[]) acks.set(a.islandId, a);
      this.lastEval = (e.lastEval ?? null) as RunHistory['lastEval'];
      this.configChanges.splice(0, this.configChanges.length, ...((e.configChanges ?? []) as ConfigChange[]));
      traffic.bytesIn = num(e.bytesIn);
      traffic.bytesOut = num(e.bytesOut);
    } else if (e.type === 'resume') {
      // A restart at version V: anything logged past V before the crash never became durable.
      const v = num(e.version);
      while (this.points.length && this.last!.version > v) this.points.pop();
      for (const [id, a] of acks) if (a.version > v) acks.delete(id);
      if (this.lastEval && this.lastEval.version > v) this.lastEval = null;
      while (this.configChanges.at(-1) && this.configChanges.at(-1)!.version > v) this.configChanges.pop();
      this.islands.truncate(v);
    } else if (e.type === 'start') {
      this.start(e.t, 0);
    } else if (e.type === 'update') {
      const version = num(e.version);
      if (version > maxVersion) return; // logged past the checkpoint: cannot happen, but never trust it
      this.islands.replayLine(e);
      const s = (e.stats ?? {}) as Partial<HistoryPoint> & { stalenessHist?: number[] };
      const lr = (e.lr ?? {}) as { outer?: unknown; inner?: unknown };
      this.push({
        version,
        time: e.t,
        tokens: num(e.tokens),
        totalTokens: num(e.totalTokens),
        tokensPerSec: this.rateAt(e.t, num(e.totalTokens)),
        trainLoss: typeof e.trainLoss === 'number' ? e.trainLoss : null,
        evalLoss: null,
        islandsOnline: num(e.islandsOnline),
        contributors: num(s.contributors),
        bytesIn: num(s.bytesIn),
        bytesOut: num(s.bytesOut),
        bytesInTotal: num(e.bytesInTotal),
        bytesOutTotal: num(e.bytesOutTotal),
        stalenessHist: Array.isArray(s.stalenessHist) ? s.stalenessHist : [],
        accepted: num(s.accepted),
        rejected: (s.rejected ?? {}) as Record<string, number>,
        compressionRatio: num(s.compressionRatio),
        goodput: num(s.goodput, 1),
        updateNorm: num(s.updateNorm),
        ...(typeof s.shortClose === 'string' ? { shortClose: s.shortClose } : {}),
        ...(typeof s.trustGain === 'number' ? { trustGain: s.trustGain } : {}),
        outerLr: typeof lr.outer === 'number' ? lr.outer : null,
        innerLr: typeof lr.inner === 'number' ? lr.inner : null,
        ...this.engineRates(e.t, (e.tokensByEngine ?? {}) as Record<string, number>),
      });
      traffic.bytesIn = num(e.bytesInTotal, traffic.bytesIn);
      traffic.bytesOut = num(e.bytesOutTotal, traffic.bytesOut);
      for (const c of (Array.isArray(e.contributors) ? e.contributors : []) as Array<{
        island: string;
        seq: number;
        round: number;
      }>) {
        acks.set(c.island, { islandId: c.island, seq: c.seq, roundId: c.round, status: 'applied', version });
      }
    } else if (e.type === 'admin' && e.action === 'config') {
      // lines logged before changes carried their version took effect after the newest point
      const version = num(e.version, this.last?.version ?? 0);
      const changes = (e.changes ?? e.patch ?? {}) as Record<string, unknown>;
      if (version <= maxVersion) this.configChanges.push({ version, time: e.t, changes });
    } else if (e.type === 'eval') {
      const p = this.find(num(e.version, -1));
      if (p) p.evalLoss = num(e.loss);
      this.lastEval = { version: num(e.version), loss: num(e.loss) };
    }
  }

  /** Tokens into θ per second over the window ending at a new point (at least since the previous one). */
  private rateAt(time: number, totalTokens: number): number {
    const h = this.points;
    let i = h.length - 1;
    while (i > 0 && time - h[i - 1].time <= TOKENS_PER_SEC_WINDOW_MS) i--;
    const first = h[i];
    const dt = first ? (time - first.time) / 1000 : 0;
    return dt > 0 ? Math.max(0, totalTokens - first.totalTokens) / dt : 0;
  }

  /** Per-engine tokens and tokens/s since the previous point. */
  private engineRates(
    time: number,
    tokensByEngine: Record<string, number>,
  ): Pick<HistoryPoint, 'tokensByEngine' | 'tokensPerSecByEngine'> {
    const last = this.last;
    const dt = last ? (time - last.time) / 1000 : 0;
    const tokensPerSecByEngine: Record<string, number> = {};
    if (dt > 0) for (const [k, v] of Object.entries(tokensByEngine)) tokensPerSecByEngine[k] = v / dt;
    return { tokensByEngine, tokensPerSecByEngine };
  }

  private push(p: HistoryPoint): void {
    const last = this.last;
    if (last && last.version >= p.version) return; // replayed
    this.points.push(p);
    this.dirty.add(p.version);
  }

  private find(version: number): HistoryPoint | undefined {
    for (let i = this.points.length - 1; i >= 0; i--) {
      if (this.points[i].version === version) return this.points[i];
      if (this.points[i].version < version) return undefined;
    }
    return undefined;
  }
}

function emptyPoint(time: number, islandsOnline: number): HistoryPoint {
  return {
    version: 0,
    time,
    tokens: 0,
    totalTokens: 0,
    tokensPerSec: 0,
    trainLoss: null,
    evalLoss: null,
    islandsOnline,
    contributors: 0,
    bytesIn: 0,
    bytesOut: 0,
    bytesInTotal: 0,
    bytesOutTotal: 0,
    stalenessHist: [],
    accepted: 0,
    rejected: {},
    compressionRatio: 0,
    goodput: 1,
    updateNorm: 0,
    outerLr: null,
    innerLr: null,
    tokensByEngine: {},
    tokensPerSecByEngine: {},
  };
}

/** A coordinator event as a line of events.jsonl (null: not logged). */
export function eventLine(ev: CoordinatorEvent, c: PointContext): LogLine | null {
  const rejected = (list: UpdateEvent['rejected']) =>
    list.map((r) => ({ island: r.islandId, seq: r.seq, round: r.roundId, code: r.error.code }));
  switch (ev.type) {
    case 'update': {
      const u = ev.update;
      return {
        type: 'update',
        t: u.time,
        version: u.version,
        prevVersion: u.prevVersion,
        hash: u.hash,
        prevHash: u.prevHash,
        tokens: u.tokens,
        totalTokens: u.totalTokens,
        trainLoss: finiteOrNull(u.trainLoss),
        contributors: ev.contributors.map((x) => ({
          island: x.islandId,
          seq: x.seq,
          round: x.roundId,
          base: x.baseVersion,
          staleness: x.staleness,
          tokens: x.tokens,
          weight: x.weight,
          cos: x.cosine,
          norm: x.normRatio,
        })),
        rejected: rejected(ev.rejected),
        stats: { ...ev.stats, trainLoss: finiteOrNull(ev.stats.trainLoss) },
        islandsOnline: c.islandsOnline,
        bytesInTotal: c.bytesInTotal,
        bytesOutTotal: c.bytesOutTotal,
        tokensByEngine: c.tokensByEngine,
        lr: { outer: c.outerLr, inner: c.innerLr },
      };
    }
    case 'rejected':
      return { type: 'dropped', rejected: rejected(ev.rejected) };
    case 'island':
      return { type: 'island', island: ev.islandId, status: ev.status, reason: ev.reason };
    case 'round':
      return ev.state === 'closed'
        ? { type: 'round', round: ev.roundId, base: ev.baseVersion, state: ev.state, members: ev.members }
        : null;
    case 'done':
      return { type: 'done', version: ev.version, totalTokens: ev.totalTokens };
    default:
      return null;
  }
}
