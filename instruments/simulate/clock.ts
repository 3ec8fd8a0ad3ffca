// A virtual clock for discrete-event simulation: time moves only when every task is waiting.
//
// Tasks call `clock.sleep(ms)`; `clock.run(main)` repeatedly lets all runnable work finish (one
// macrotask turn drains every promise chain), then jumps to the earliest sleeper and wakes it.
// Sleepers due at the same time wake in the order they slept, so a run is deterministic.

import type { Clock } from '../../client/island/transport.ts';

interface Sleeper {
  at: number;
  seq: number;
  wake: () => void;
}

const macrotask: () => Promise<void> =
  typeof (globalThis as { setImmediate?: unknown }).setImmediate === 'function'
    ? () => new Promise((r) => (globalThis as unknown as { setImmediate: (f: () => void) => void }).setImmediate(r))
    : () => new Promise((r) => setTimeout(r, 0));

export class VirtualClock implements Clock {
  private t: number;
  private seq = 0;
  private heap: Sleeper[] = [];
  /** Real asynchronous work in flight (hold): time does not move until it settles. */
  private held = new Set<Promise<unknown>>();

  constructor(start = 0) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  sleep(ms: number): Promise<void> {
    return new Promise((wake) => this.push({ at: this.t + Math.max(0, ms || 0), seq: this.seq++, wake }));
  }

  /**
   * Marks real asynchronous work (a GPU readback in the simulator): `run` lets no virtual time pass
   * while it is in flight. Returns `p`.
   */
  hold<T>(p: Promise<T>): Promise<T> {
    this.held.add(p);
    const done = () => {
      this.held.delete(p);
    };
    p.then(done, done);
    return p;
  }

  /** Sleepers not yet woken. */
  get pending(): number {
    return this.heap.length;
  }

  /**
   * Drives virtual time until `main` settles and returns its result. Throws if nothing is
   * runnable and nothing sleeps while `main` is still pending (a deadlock in the simulated system),
   * or when virtual time passes `maxTime`.
   */
  async run<T>(main: Promise<T>, maxTime = Infinity): Promise<T> {
    let settled = false;
    main.then(
      () => {
        settled = true;
      },
      () => {
        settled = true;
      },
    );
    for (;;) {
      await macrotask();
      while (this.held.size > 0) {
        await Promise.allSettled([...this.held]);
        await macrotask();
      }
      if (settled) return main;
      const next = this.pop();
      if (!next) throw new Error(`virtual clock: deadlock at t=${this.t} ms (nothing runnable, nothing sleeping)`);
      if (next.at > maxTime) throw new Error(`virtual clock: passed maxTime ${maxTime} ms`);
      this.t = Math.max(this.t, next.at);
      next.wake();
    }
  }

  private less(a: Sleeper, b: Sleeper): boolean {
    return a.at < b.at || (a.at === b.at && a.seq < b.seq);
  }

  private push(s: Sleeper): void {
    const h = this.heap;
    h.push(s);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(h[i], h[p])) break;
      [h[i], h[p]] = [h[p], h[i]];
      i = p;
    }
  }

  private pop(): Sleeper | undefined {
    const h = this.heap;
    if (h.length === 0) return undefined;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1,
          r = l + 1;
        let m = i;
        if (l < h.length && this.less(h[l], h[m])) m = l;
        if (r < h.length && this.less(h[r], h[m])) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m], h[i]];
        i = m;
      }
    }
    return top;
  }
}
