// What the run owes its islands once state is durable: the ack of each accepted delta (by island
// and seq), the next assignment of islands waiting for a sync round to close, and callers waiting
// for a version to become durable. The run resolves them from the durability pump's published
// batches; nothing here touches the coordinator or the disk.

import type { AckMsg, Assignment } from '../../core/protocol.ts';
import { type Result, err } from '../../core/result.ts';

interface Deferred<T> {
  promise: Promise<T>;
  resolve: (v: T) => void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

const ackKey = (islandId: string, seq: number) => `${islandId}#${seq}`;

export class Waiters {
  private readonly pendingAcks = new Map<string, Deferred<AckMsg>>();
  /** The last applied ack per island: a resend of that delta gets the same answer. */
  readonly lastApplied = new Map<string, AckMsg>();
  private readonly assignments = new Map<string, Array<(r: Result<Assignment>) => void>>();
  private durable: Array<{ version: number; resolve: () => void }> = [];

  /** The answer already owed to a resent delta (pending, or the last applied one), if any. */
  knownAck(islandId: string, seq: number, roundId: number): Promise<AckMsg> | undefined {
    const pending = this.pendingAcks.get(ackKey(islandId, seq));
    if (pending) return pending.promise;
    const last = this.lastApplied.get(islandId);
    return last && last.seq === seq && last.roundId === roundId ? Promise.resolve({ ...last }) : undefined;
  }

  /** An accepted delta's ack, resolved when the update that holds it (or its rejection) is published. */
  expectAck(islandId: string, seq: number): Promise<AckMsg> {
    const d = deferred<AckMsg>();
    this.pendingAcks.set(ackKey(islandId, seq), d);
    return d.promise;
  }

  resolveAck(ack: AckMsg): void {
    if (ack.status === 'applied') this.lastApplied.set(ack.islandId, ack);
    const key = ackKey(ack.islandId, ack.seq);
    const d = this.pendingAcks.get(key);
    if (!d) return;
    this.pendingAcks.delete(key);
    d.resolve(ack);
  }

  /** Resolves with the island's next assignment (or an error) when `deliver` gets one. */
  waitAssignment(islandId: string): Promise<Result<Assignment>> {
    return new Promise((resolve) => {
      const list = this.assignments.get(islandId) ?? [];
      list.push(resolve);
      this.assignments.set(islandId, list);
    });
  }

  deliver(islandId: string, r: Result<Assignment>): void {
    const list = this.assignments.get(islandId);
    this.assignments.delete(islandId);
    for (const f of list ?? []) f(r);
  }

  /** Answers every waiting island with `code` (the run is done). */
  deliverAll(code: string, message: string): void {
    for (const id of [...this.assignments.keys()]) this.deliver(id, err(code, message));
  }

  /** Drops an island's waiting calls without answering them (its socket closed). */
  forget(islandId: string): void {
    this.assignments.delete(islandId);
  }

  /** Resolves once `version` (or a later one) is durable; `current` is the durable version now. */
  whenDurable(version: number, current: number): Promise<void> {
    if (current >= version) return Promise.resolve();
    return new Promise((resolve) => this.durable.push({ version, resolve }));
  }

  /** `version` is durable now. */
  releaseDurable(version: number): void {
    const keep: typeof this.durable = [];
    for (const w of this.durable) w.version <= version ? w.resolve() : keep.push(w);
    this.durable = keep;
  }
}
