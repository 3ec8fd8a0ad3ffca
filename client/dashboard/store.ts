// All data the dashboard shows, with revision counters so renderers only redo work
// for what changed. Ingest functions accept raw server payloads (REST or socket.io).

import {
  type Checkpoint, type Dict, type HistoryPoint, type Island, type RunInfo, type Status,
  historyList, isDict, islandList, normCheckpoints, normIsland, normPoint, normRun, normStatus,
} from './model.ts';

export interface EngineSample {
  t: number; // ms
  tokens: number | null;
  total: number | null;
  byEngine: Record<string, number>;
  /** Islands online in the list at that moment. */
  online: number;
}

const MAX_POINTS = 20_000;
const MAX_SAMPLES = 3_600;

export class Store {
  status: Status | null = null;
  statusAt = 0; // client time (ms) of the last status
  islands = new Map<string, Island>();
  history: HistoryPoint[] = [];
  run: RunInfo | null = null;
  checkpoints: Checkpoint[] | null = null;
  samples: EngineSample[] = [];

  rev = { status: 0, islands: 0, history: 0, run: 0, checkpoints: 0, samples: 0 };
  private listeners: Array<(part: keyof Store['rev']) => void> = [];

  onChange(fn: (part: keyof Store['rev']) => void): void {
    this.listeners.push(fn);
  }

  private bump(part: keyof Store['rev']): void {
    this.rev[part]++;
    for (const fn of this.listeners) fn(part);
  }

  setStatus(raw: unknown): boolean {
    const s = normStatus(raw);
    if (!s) return false;
    this.status = s;
    this.statusAt = Date.now();
    this.bump('status');
    return true;
  }

  /** A full list replaces the islands; `{ changed|updated: [...], removed: [ids] }` merges. */
  setIslands(raw: unknown): boolean {
    if (isDict(raw) && !Array.isArray(raw.islands) && (Array.isArray(raw.changed) || Array.isArray(raw.updated) || Array.isArray(raw.removed))) {
      for (const r of (raw.changed ?? raw.updated ?? []) as unknown[]) {
        const i = normIsland(r);
        if (i) this.islands.set(i.id, i);
      }
      for (const id of (Array.isArray(raw.removed) ? raw.removed : []) as unknown[]) this.islands.delete(String(id));
      this.bump('islands');
      this.sample();
      return true;
    }
    const list = islandList(raw);
    if (!list) return false;
    // A full list (REST) may be older than a live update that overtook it: keep the record seen
    // most recently, and keep islands the list does not have yet (the server never drops islands).
    const next = new Map<string, Island>(this.islands);
    for (const r of list) {
      const i = normIsland(r);
      if (!i) continue;
      const cur = next.get(i.id);
      if (cur && cur.lastSeen !== null && i.lastSeen !== null && cur.lastSeen > i.lastSeen) continue;
      next.set(i.id, i);
    }
    this.islands = next;
    this.bump('islands');
    this.sample();
    return true;
  }

  /** Adds history points (one, an array, or any of the list shapes); replaces same-version points. */
  addHistory(raw: unknown, replace = false): boolean {
    let list = historyList(raw);
    if (!list && isDict(raw) && (raw.version !== undefined || raw.time !== undefined)) list = [raw];
    if (!list) return false;
    const pts: HistoryPoint[] = [];
    const base = this.history.length ? this.history[this.history.length - 1].version + 1 : 0;
    list.forEach((r, i) => {
      const p = normPoint(r, base + i);
      if (p) pts.push(p);
    });
    if (replace) this.history = [];
    let sorted = true;
    for (const p of pts) {
      const h = this.history;
      const last = h[h.length - 1];
      if (!last || p.version > last.version) h.push(p);
      else if (p.version === last.version) h[h.length - 1] = mergePoint(last, p);
      else {
        const at = h.findIndex((q) => q.version >= p.version);
        if (at >= 0 && h[at].version === p.version) h[at] = mergePoint(h[at], p);
        else { h.push(p); sorted = false; }
      }
    }
    if (!sorted) this.history.sort((a, b) => a.version - b.version);
    if (this.history.length > MAX_POINTS) this.history.splice(0, this.history.length - MAX_POINTS);
    if (pts.length || replace) this.bump('history');
    return true;
  }

  setRun(raw: unknown): void {
    const r = normRun(raw);
    if (r) { this.run = r; this.bump('run'); }
  }

  setCheckpoints(raw: unknown): void {
    this.checkpoints = normCheckpoints(raw);
    this.bump('checkpoints');
  }

  /**
   * A combined payload from the live stream: `{ status, islands, history|points|point }`,
   * or a bare payload routed by its event name.
   */
  ingest(event: string, payload: unknown): void {
    const e = event.toLowerCase();
    if (e.includes('status') && this.setStatus(payload)) return;
    if (e.includes('island') && this.setIslands(payload)) return;
    if ((e.includes('history') || e.includes('point')) && this.addHistory(payload)) return;
    if (e.includes('checkpoint')) { this.setCheckpoints(payload); return; }
    if (!isDict(payload)) return;
    const p = payload as Dict;
    if (p.status !== undefined) this.setStatus(p.status);
    if (p.islands !== undefined) this.setIslands(p.islands);
    for (const k of ['history', 'points', 'point', 'newPoints', 'historyPoints']) {
      if (p[k] !== undefined) this.addHistory(p[k]);
    }
    if (p.run !== undefined && isDict(p.run) && p.run.config !== undefined) this.setRun(p.run);
  }

  /** One client-side tokens/s-by-engine sample per islands update (at most every 1.5 s). */
  private sample(): void {
    const now = Date.now();
    const last = this.samples[this.samples.length - 1];
    if (last && now - last.t < 1500) return;
    const raw: Record<string, number> = {};
    let sum = 0;
    let online = 0;
    for (const i of this.islands.values()) {
      if (isOnline(i)) online++;
      if (!isOnline(i) || i.speed === null || i.speed <= 0) continue;
      const k = i.engine || 'unknown';
      raw[k] = (raw[k] ?? 0) + i.speed;
      sum += i.speed;
    }
    const total = this.status?.tokensPerSec ?? null;
    // Scale the islands' own speeds to the server's measured total, so the stack adds up
    // to the accepted throughput whatever unit `speed` is in.
    const byEngine: Record<string, number> = {};
    for (const [k, v] of Object.entries(raw)) byEngine[k] = total !== null && sum > 0 ? (v / sum) * total : v;
    this.samples.push({ t: now, tokens: this.status?.tokensTotal ?? null, total: total ?? (sum > 0 ? sum : null), byEngine, online });
    if (this.samples.length > MAX_SAMPLES) this.samples.splice(0, this.samples.length - MAX_SAMPLES);
    this.bump('samples');
  }
}

/** A newer copy of a point wins, except that it never erases a value (e.g. a late eval loss). */
function mergePoint(old: HistoryPoint, p: HistoryPoint): HistoryPoint {
  const out = { ...p } as unknown as Record<string, unknown>;
  for (const [k, v] of Object.entries(old)) if (out[k] === null && v !== null) out[k] = v;
  return out as unknown as HistoryPoint;
}

export function isOnline(i: Island): boolean {
  return i.status === '' || /online|active|train|idle|connected|busy|sync|push|pull|wait/.test(i.status) && !/offline|ban|gone|left/.test(i.status);
}
