// The Run's view of an outer step in flight in the offload's worker threads (outer/offload.ts):
// `follow()` after every coordinator call picks up a step the coordinator started, `whenIdle`
// waits for it, and `beforeSnapshot` says what a snapshot must wait for. Without offload the step
// runs on the event loop and none is ever in flight.

import type { Coordinator } from '../../core/coord/index.ts';
import type { OuterOffloadHost } from '../outer/offload.ts';

export class OuterSteps {
  /** The outer step in flight in the workers, and the handover of their state to a snapshot. */
  private stepping: Promise<void> | null = null;
  private syncing: Promise<void> | null = null;

  /** `done`: a step completed (the run kicks its pump again). */
  constructor(
    private readonly coord: Coordinator,
    private readonly offload: OuterOffloadHost | null,
    private readonly log: (line: string) => void,
    private readonly done: () => void,
  ) {}

  /** Follows the coordinator's outer step, if it started one that is not followed yet. */
  follow(): void {
    if (!this.stepping && this.coord.stepping) {
      this.stepping = this.coord.whenIdle().then(
        () => {
          this.stepping = null;
          this.done();
        },
        (e: unknown) => {
          // a worker died mid-step: θ may be half moved. Stop; a restart resumes from the last durable
          // checkpoint, and nothing unacknowledged is lost.
          this.log(`run: the outer step failed, stopping: ${(e as Error)?.stack ?? String(e)}`);
          setImmediate(() => {
            throw e;
          });
        },
      );
    }
  }

  /** An outer step is in flight (calls that change rounds wait: whenIdle). */
  get busy(): boolean {
    return this.stepping !== null;
  }

  /** Resolves when no outer step is in flight (at once without offload). */
  async whenIdle(): Promise<void> {
    while (this.stepping) await this.stepping;
  }

  /**
   * What a snapshot must wait for: the step in flight, or the workers' optimizer and downlink state
   * after the last one (handed over only when a snapshot needs it); null: snapshot now.
   */
  beforeSnapshot(): Promise<void> | null {
    if (this.stepping) return this.stepping;
    if (!this.offload || !this.coord.outerStateStale) return null;
    return (this.syncing ??= this.offload.syncState(this.coord).finally(() => {
      this.syncing = null;
    }));
  }
}
