// REST calls and the live stream (socket.io namespace /dashboard, with REST polling
// as the fallback whenever the socket is not connected).

import { io } from 'socket.io-client';
import type {
  CheckpointsResponse,
  DashboardTick,
  DataStatus,
  HistoryResponse,
  IslandsResponse,
  RunInfo,
  RunStatus,
} from '../../core/api.ts';
import type { Store } from './store.ts';

export interface ApiAnswer {
  ok: boolean;
  status: number; // HTTP status, 0 = network error
  body: unknown; // parsed JSON, or text
}

export async function api(path: string, init: RequestInit = {}, timeoutMs = 15_000): Promise<ApiAnswer> {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const res = await fetch(path, {
      ...init,
      signal: ctl.signal,
      headers: { accept: 'application/json', ...(init.headers ?? {}) },
    });
    const text = await res.text();
    let body: unknown = text;
    if (text && (res.headers.get('content-type') ?? '').includes('json')) {
      try {
        body = JSON.parse(text);
      } catch {
        /* keep the text */
      }
    }
    return { ok: res.ok, status: res.status, body };
  } catch (e) {
    const msg = (e as Error).name === 'AbortError' ? `no answer within ${timeoutMs / 1000} s` : (e as Error).message;
    return { ok: false, status: 0, body: { error: { code: 'E_NETWORK', message: msg } } };
  } finally {
    clearTimeout(timer);
  }
}

/** GET of a JSON route; the body typed as the route's response (core/api.ts), null on failure. */
async function get<T>(path: string): Promise<T | null> {
  const r = await api(path);
  return r.ok ? (r.body as T) : null;
}

/** Every island, page by page (GET /api/islands answers at most 1,000 a request); null when a page fails. */
async function allIslands(): Promise<IslandsResponse['islands'] | null> {
  const out: IslandsResponse['islands'] = [];
  for (let offset: number | null = 0; offset !== null; ) {
    const page: IslandsResponse | null = await get<IslandsResponse>(`/api/islands?offset=${offset}`);
    if (!page) return null;
    out.push(...page.islands);
    offset = page.next;
  }
  return out;
}

export type Connection = 'connecting' | 'live' | 'polling' | 'offline';

/**
 * Keeps the store fed. On start it loads everything over REST once, then listens to the
 * socket. While the socket is down it polls: status and islands every 2 s, history every 5 s.
 */
export class LiveSource {
  connection: Connection = 'connecting';
  lastMessageAt = 0;
  messages = 0;
  /** The stream's heartbeat (DashboardTick.periodMs). */
  private periodMs = 500;
  private pollTimer: ReturnType<typeof setTimeout> | null = null;
  private pollTick = 0;
  private restOk = false;
  onConnection: (c: Connection) => void = () => {};

  constructor(private store: Store) {}

  async start(): Promise<void> {
    this.connect();
    // A socket can stay open while the server is gone: one missed heartbeat (plus a second of
    // slack for a busy server) and the page says offline and polls until ticks come again.
    setInterval(() => {
      if (this.connection === 'live' && Date.now() - this.lastMessageAt > 2 * this.periodMs + 1000) {
        this.restOk = false;
        this.setConnection('offline');
        this.startPolling();
      }
    }, 250);
    await this.loadAll();
    // A change made elsewhere (another dashboard, curl) reaches the markers within 10 s.
    setInterval(() => {
      if (this.connection === 'live') void this.refreshHistory();
    }, 10_000);
    // A shard run's ledger (the Data card): every 5 s
    setInterval(() => {
      if (this.store.run?.data.shards) void this.refreshData();
    }, 5000);
    // If the socket is not up within 4 s, poll until it is.
    setTimeout(() => {
      if (this.connection !== 'live') this.startPolling();
    }, 4000);
  }

  async loadAll(): Promise<void> {
    const [st, isl, hist, run, ck] = await Promise.all([
      get<RunStatus>('/api/status'),
      allIslands(),
      get<HistoryResponse>('/api/history'),
      get<RunInfo>('/api/run'),
      get<CheckpointsResponse>('/api/checkpoints'),
    ]);
    this.restOk = st !== null;
    if (st) this.store.setStatus(st);
    if (isl) this.store.setIslands(isl);
    if (hist) this.setHistory(hist);
    if (run) this.store.setRun(run);
    if (ck) this.store.setCheckpoints(ck.checkpoints);
    if (run?.data.shards) await this.refreshData();
    if (this.connection !== 'live') this.setConnection(st ? (this.pollTimer ? 'polling' : 'connecting') : 'offline');
  }

  async refreshCheckpoints(): Promise<void> {
    const ck = await get<CheckpointsResponse>('/api/checkpoints');
    if (ck) this.store.setCheckpoints(ck.checkpoints);
  }

  /** GET /api/data: a shard run's range ledger (a text answers 404: nothing to show). */
  async refreshData(): Promise<void> {
    const d = await get<DataStatus>('/api/data');
    if (d) this.store.setData(d);
  }

  async refreshRun(): Promise<void> {
    const r = await get<RunInfo>('/api/run');
    if (r) this.store.setRun(r);
  }

  async refreshStatus(): Promise<void> {
    const st = await get<RunStatus>('/api/status');
    if (st) this.store.setStatus(st);
  }

  /** The newest points and every config change (the charts' markers: the stream does not carry them). */
  async refreshHistory(): Promise<void> {
    const h = await get<HistoryResponse>(this.historyUrl());
    if (h) this.setHistory(h);
  }

  private setHistory(h: HistoryResponse): void {
    this.store.addHistory(h.points);
    this.store.setConfigChanges(h.configChanges);
  }

  private connect(): void {
    const socket = io('/dashboard', {
      path: '/socket.io',
      reconnectionDelay: 1000,
      reconnectionDelayMax: 5_000,
      timeout: 10_000,
    });
    socket.on('connect', () => {
      this.lastMessageAt = Date.now();
      this.setConnection('live');
      this.stopPolling();
      // Fill whatever was missed while disconnected.
      void this.refreshHistory();
    });
    socket.on('disconnect', () => {
      this.startPolling();
    });
    socket.on('connect_error', () => {
      if (this.connection !== 'polling') this.startPolling();
    });
    socket.on('tick', (tick: DashboardTick) => {
      this.messages++;
      this.lastMessageAt = Date.now();
      this.periodMs = tick.periodMs;
      if (this.connection !== 'live') {
        this.setConnection('live');
        this.stopPolling();
      }
      this.store.ingest(tick);
    });
  }

  /** History since a little before the newest point we hold (late eval losses land on older points). */
  private historyUrl(): string {
    const h = this.store.history;
    return h.length ? `/api/history?since=${Math.max(-1, h[h.length - 1].version - 20)}` : '/api/history';
  }

  private setConnection(c: Connection): void {
    if (this.connection === c) return;
    this.connection = c;
    this.onConnection(c);
  }

  private startPolling(): void {
    if (this.pollTimer || this.connection === 'live') return;
    this.setConnection(this.restOk ? 'polling' : 'offline');
    const tick = async () => {
      this.pollTick++;
      const calls: Array<Promise<unknown>> = [
        get<RunStatus>('/api/status').then((st) => {
          this.restOk = st !== null;
          if (st) this.store.setStatus(st);
          if (this.connection !== 'live') this.setConnection(st ? 'polling' : 'offline');
        }),
        allIslands().then((r) => {
          if (r) this.store.setIslands(r);
        }),
      ];
      if (this.pollTick % 3 === 1) calls.push(this.refreshHistory());
      await Promise.all(calls);
      if (this.pollTimer) this.pollTimer = setTimeout(tick, 2000);
    };
    this.pollTimer = setTimeout(tick, 0);
  }

  private stopPolling(): void {
    if (this.pollTimer) clearTimeout(this.pollTimer);
    this.pollTimer = null;
  }
}
