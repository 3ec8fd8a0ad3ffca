// θ as of the last durable version: what islands may download and train on, what the REST views
// show, and what acks and sync assignments wait for (server/run/waiters.ts). The run's batches
// (batch.ts) move it once a version's checkpoint is on disk; a revert moves it after its own.

import type { Coordinator } from '../../core/coord/index.ts';
import type { Waiters } from './waiters.ts';

export interface DurableState {
  version: number;
  hash: string;
  totalTokens: number;
  theta: Float32Array;
}

/** The coordinator's state now, θ copied: durable once its checkpoint is written. */
export function durableOf(coord: Coordinator): DurableState {
  return {
    version: coord.version,
    hash: coord.hash,
    totalTokens: coord.totals().tokensApplied,
    theta: coord.params().slice(),
  };
}

export class DurableTheta {
  private s: DurableState;

  constructor(
    first: DurableState,
    private readonly waiters: Waiters,
  ) {
    this.s = first;
  }

  get version(): number {
    return this.s.version;
  }
  get hash(): string {
    return this.s.hash;
  }
  get totalTokens(): number {
    return this.s.totalTokens;
  }
  /** θ at the durable version (read-only by contract). */
  params(): { version: number; hash: string; params: Float32Array } {
    return { version: this.s.version, hash: this.s.hash, params: this.s.theta };
  }
  get theta(): Float32Array {
    return this.s.theta;
  }

  /** `next` is on disk: islands see it from now on (what waits for it is released by `release`). */
  set(next: DurableState): void {
    this.s = next;
  }
  /** Releases what waited for the durable version. */
  release(): void {
    this.waiters.releaseDurable(this.s.version);
  }
  /** Resolves once `version` (or a later one) is durable. */
  whenDurable(version: number): Promise<void> {
    return this.waiters.whenDurable(version, this.s.version);
  }
}
