// The durability pump: after every coordinator call, `kick()` drains the coordinator's events in
// one batch. If the batch holds an update, the coordinator's snapshot (taken synchronously, so it
// is exactly the state after the batch) is written as a checkpoint and the batch's log lines are
// appended and fsync'd; only then is the batch published (acks released, updates broadcast,
// assignments delivered). The snapshot's arrays are made beforehand, a chunk at a time (fresh pages
// of a large model cost seconds), so taking it only copies. Batches are handled one at a time, so
// when updates arrive faster than the disk, one checkpoint covers several (group commit). The pump
// also drives the coordinator's deadlines (sync round grace windows, timeouts) with one timer.

import type { Coordinator, CoordinatorEvent } from '../../core/coord/index.ts';
import { backoff } from '../../core/random.ts';
import type { Metrics } from '../metrics.ts';
import type { RunStore } from './store.ts';

/** What the pump asks of its run: log a batch (before the commit) and publish it (after). */
export interface PumpHost {
  readonly coord: Coordinator;
  readonly store: RunStore;
  readonly metrics: Metrics;
  log(line: string): void;
  /** Queues the batch's log lines and, when it holds an update, its checkpoint. */
  prepare(events: CoordinatorEvent[]): void;
  /** The batch is durable: act on it. */
  publish(events: CoordinatorEvent[]): void;
  /**
   * What to wait for before draining events and taking a snapshot (an outer step in flight, its state's handover), or
   * null.
   */
  beforeSnapshot(): Promise<void> | null;
  /** Runs the coordinator's deadlines (the host kicks the pump after). */
  tick(now: number): void;
}

export class DurabilityPump {
  private pumping: Promise<void> | null = null;
  private again = false;
  private tickTimer: ReturnType<typeof setTimeout> | null = null;
  private tickAt = Infinity;
  private readonly flushTimer: ReturnType<typeof setInterval>;
  private closed = false;

  constructor(private readonly h: PumpHost) {
    // lines queued outside a batch (joins, rejected deltas, evals) reach the disk within 250 ms
    this.flushTimer = setInterval(() => {
      if (h.store.pendingLines > 0) this.kick();
    }, 250);
    this.flushTimer.unref();
  }

  /** Handles whatever the coordinator has queued (call after every coordinator call). */
  kick(): void {
    if (this.closed) return;
    if (this.pumping) {
      this.again = true;
      return;
    }
    this.pumping = this.pump()
      .catch((e: unknown) => {
        // a bug, not input: say so loudly, keep serving (the next kick drains what is left)
        this.h.log(`run: event pump failed: ${(e as Error)?.stack ?? String(e)}`);
      })
      .finally(() => {
        this.pumping = null;
        if (this.again) this.kick();
        this.scheduleTick();
      });
  }

  /** Waits until no batch is in flight and everything queued is durable. */
  async drain(): Promise<void> {
    for (let i = 0; i < 100; i++) {
      if (this.pumping) await this.pumping;
      else if (this.h.store.pendingLines > 0) this.kick();
      else return;
    }
  }

  /** Commits what the store holds; retries until it succeeds (nothing is acknowledged before). */
  async commit(): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.h.store.commit();
        return;
      } catch (e) {
        // a full disk may be freed: keep trying
        this.h.log(`run store commit failed (attempt ${attempt + 1}): ${(e as Error).message}`);
        if (this.closed) throw e;
        await new Promise((r) => setTimeout(r, backoff(attempt, 100, 5000)));
      }
    }
  }

  /** Drains, then stops the timers; later kicks do nothing. */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.drain();
    this.closed = true;
    clearInterval(this.flushTimer);
    if (this.tickTimer) clearTimeout(this.tickTimer);
  }

  private async pump(): Promise<void> {
    do {
      this.again = false;
      for (let wait = this.h.beforeSnapshot(); wait; wait = this.h.beforeSnapshot()) await wait;
      const events = this.h.coord.drainEvents();
      this.h.prepare(events);
      if (this.h.store.pendingLines > 0 || this.h.store.checkpointPending) {
        const t0 = performance.now();
        await this.commit();
        this.h.metrics.commitSeconds.observe((performance.now() - t0) / 1000);
      }
      this.h.publish(events);
    } while (this.again && !this.closed);
  }

  private scheduleTick(): void {
    if (this.closed) return;
    const at = Math.min(this.h.coord.nextDeadline(), Date.now() + 5_000);
    if (at >= this.tickAt && this.tickTimer) return;
    if (this.tickTimer) clearTimeout(this.tickTimer);
    this.tickAt = at;
    this.tickTimer = setTimeout(
      () => {
        this.tickTimer = null;
        this.tickAt = Infinity;
        if (this.closed) return;
        this.h.tick(Date.now());
        if (!this.pumping) this.scheduleTick();
      },
      Math.max(20, at - Date.now()),
    );
    this.tickTimer.unref();
  }
}
