// The gateway's island sockets by island id (usually one; a newer connection replaces an older one),
// each change told to the run (its connected count).

import type { Socket } from 'socket.io';
import type { RunPort } from './run-port.ts';

export class IslandSockets {
  private readonly byIsland = new Map<string, Set<Socket>>();

  constructor(private readonly run: Pick<RunPort, 'setConnected'>) {}

  /** Islands with a socket now. */
  get size(): number {
    return this.byIsland.size;
  }

  has(id: string): boolean {
    return this.byIsland.has(id);
  }

  /** The island's sockets (empty when none). */
  of(id: string): Iterable<Socket> {
    return this.byIsland.get(id) ?? [];
  }

  ids(): string[] {
    return [...this.byIsland.keys()];
  }

  bind(id: string, socket: Socket): void {
    let set = this.byIsland.get(id);
    if (!set) {
      set = new Set();
      this.byIsland.set(id, set);
    }
    set.add(socket);
    this.run.setConnected(id, set.size);
  }

  unbind(id: string, socket: Socket): void {
    const set = this.byIsland.get(id);
    if (!set) return;
    set.delete(socket);
    if (set.size === 0) this.byIsland.delete(id);
    this.run.setConnected(id, set.size);
  }
}
