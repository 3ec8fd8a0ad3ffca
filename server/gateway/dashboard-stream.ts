// The dashboard's read-only live stream (namespace /dashboard): a first message with the status on
// connect, then one tick per period at most with the status, changed islands and history points.

import type { Namespace, Socket } from 'socket.io';
import type { DashboardTick, IslandView } from '../../core/api.ts';
import type { RunPort } from './run-port.ts';

export class DashboardStream {
  /** Each island's view as last sent (only changed ones go out). */
  private readonly islandJson = new Map<string, string>();
  private readonly timer: ReturnType<typeof setInterval>;
  readonly periodMs: number;

  constructor(
    private readonly dashboard: Namespace,
    private readonly run: RunPort,
    periodMs: number | undefined,
    private readonly stats: { dashboardMessages: number },
    private readonly log: (line: string) => void,
  ) {
    this.periodMs = Math.max(500, periodMs ?? 500);
    this.dashboard.on('connection', (s) => this.onDashboard(s));
    this.timer = setInterval(
      () => void this.tick().catch((e: unknown) => this.log(`gateway: dashboard tick failed: ${(e as Error).message}`)),
      this.periodMs,
    );
    this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
  }

  private onDashboard(socket: Socket): void {
    // Read-only: nothing a dashboard sends is handled. First message: the status, so the page is
    // live before the next tick; it loads islands and history over REST.
    socket.onAny(() => {
      /* ignored: the stream is read-only */
    });
    this.run.status().then(
      (status) => {
        const tick: DashboardTick = { status, periodMs: this.periodMs };
        socket.emit('tick', tick);
      },
      (e: unknown) => this.log(`gateway: dashboard status failed: ${(e as Error).message}`),
    );
  }

  /** One message per period at most: status, changed islands, new or changed history points. */
  private async tick(): Promise<void> {
    const feed = await this.run.dashboardFeed(this.dashboard.sockets.size > 0);
    if (!feed || this.dashboard.sockets.size === 0) {
      this.islandJson.clear();
      return;
    }
    const changed: IslandView[] = [];
    for (const isl of feed.islands) {
      const j = JSON.stringify(isl);
      if (this.islandJson.get(isl.id) === j) continue;
      this.islandJson.set(isl.id, j);
      changed.push(isl);
    }
    const tick: DashboardTick = {
      status: feed.status,
      periodMs: this.periodMs,
      islands: { changed, removed: [] },
      history: feed.history,
    };
    this.dashboard.emit('tick', tick);
    this.stats.dashboardMessages++;
  }
}
