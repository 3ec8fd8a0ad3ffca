// All data the dashboard shows, in the server's own types (core/api.ts), with revision counters
// so renderers only redo work for what changed.

import type {
  CheckpointInfo,
  ConfigChange,
  DashboardTick,
  DataStatus,
  HistoryPoint,
  IslandView,
  RunInfo,
  RunStatus,
} from '../../core/api.ts';
import type { OverlayRun } from './overlay.ts';

const MAX_POINTS = 20_000;

export class Store {
  status: RunStatus | null = null;
  statusAt = 0; // client time (ms) of the last status
  islands = new Map<string, IslandView>();
  history: HistoryPoint[] = [];
  run: RunInfo | null = null;
  checkpoints: CheckpointInfo[] | null = null;
  /** The run's knob changes (GET /api/history), drawn as markers on the charts. */
  configChanges: ConfigChange[] = [];
  /** Another run's curves, loaded from its metrics JSONL (overlay.ts); null: none. */
  overlay: OverlayRun | null = null;

  /** A shard run's range ledger (GET /api/data); null: a text, or not read yet. */
  data: DataStatus | null = null;
  rev = { status: 0, islands: 0, history: 0, run: 0, checkpoints: 0, config: 0, overlay: 0, data: 0 };
  private listeners: Array<(part: keyof Store['rev']) => void> = [];

  onChange(fn: (part: keyof Store['rev']) => void): void {
    this.listeners.push(fn);
  }

  private bump(part: keyof Store['rev']): void {
    this.rev[part]++;
    for (const fn of this.listeners) fn(part);
  }

  setStatus(s: RunStatus): void {
    this.status = s;
    this.statusAt = Date.now();
    this.bump('status');
  }

  /**
   * A full list (GET /api/islands). It may be older than a live update that overtook it: keep
   * the record seen most recently, and keep islands the list does not have yet.
   */
  setIslands(list: IslandView[]): void {
    for (const i of list) {
      const cur = this.islands.get(i.id);
      if (!cur || cur.lastSeen <= i.lastSeen) this.islands.set(i.id, i);
    }
    this.bump('islands');
  }

  /** The islands a dashboard tick says changed or left. */
  mergeIslands(changed: IslandView[], removed: string[]): void {
    for (const i of changed) this.islands.set(i.id, i);
    for (const id of removed) this.islands.delete(id);
    this.bump('islands');
  }

  /** Adds history points; a point of a version already held replaces it (late eval losses). */
  addHistory(points: HistoryPoint[]): void {
    let sorted = true;
    const h = this.history;
    for (const p of points) {
      const last = h[h.length - 1];
      if (!last || p.version > last.version) h.push(p);
      else {
        const at = h.findIndex((q) => q.version >= p.version);
        if (h[at].version === p.version) h[at] = p;
        else {
          h.push(p);
          sorted = false;
        }
      }
    }
    if (!sorted) h.sort((a, b) => a.version - b.version);
    if (h.length > MAX_POINTS) h.splice(0, h.length - MAX_POINTS);
    if (points.length) this.bump('history');
  }

  /** The whole list, as /api/history gives it; a list equal to the one held changes nothing. */
  setConfigChanges(list: ConfigChange[]): void {
    if (JSON.stringify(list) === JSON.stringify(this.configChanges)) return;
    this.configChanges = list;
    this.bump('config');
  }

  setOverlay(run: OverlayRun | null): void {
    this.overlay = run;
    this.bump('overlay');
  }

  setRun(r: RunInfo): void {
    this.run = r;
    this.bump('run');
  }

  setData(d: DataStatus): void {
    this.data = d;
    this.bump('data');
  }

  setCheckpoints(list: CheckpointInfo[]): void {
    this.checkpoints = [...list].sort((a, b) => b.version - a.version);
    this.bump('checkpoints');
  }

  /** One message of the /dashboard stream. */
  ingest(tick: DashboardTick): void {
    this.setStatus(tick.status);
    if (tick.islands) this.mergeIslands(tick.islands.changed, tick.islands.removed);
    if (tick.history) this.addHistory(tick.history);
  }
}

export function isOnline(i: IslandView): boolean {
  return i.status === 'online';
}
