// A loopback TCP proxy for fault injection: every byte is forwarded to `target` after `latencyMs`
// (order kept per direction), `dropAll()` cuts every open connection at once, and `refuse` makes
// it reset new ones (a gateway that is unreachable but not dead).

import { type Server, type Socket, createServer, connect } from 'node:net';

export interface ProxyStats {
  connections: number;
  drops: number;
  bytesUp: number;
  bytesDown: number;
}

export class FaultProxy {
  latencyMs: number;
  refuse = false;
  readonly stats: ProxyStats = { connections: 0, drops: 0, bytesUp: 0, bytesDown: 0 };
  private readonly server: Server;
  private readonly pairs = new Set<[Socket, Socket]>();
  port = 0;

  constructor(
    private readonly target: { host: string; port: number },
    o: { latencyMs?: number } = {},
  ) {
    this.latencyMs = o.latencyMs ?? 0;
    this.server = createServer((down) => this.accept(down));
  }

  async listen(port = 0, host = '127.0.0.1'): Promise<string> {
    await new Promise<void>((res, rej) => {
      this.server.once('error', rej);
      this.server.listen(port, host, () => res());
    });
    const a = this.server.address();
    this.port = typeof a === 'object' && a ? a.port : port;
    return `http://${host}:${this.port}`;
  }

  private accept(down: Socket): void {
    if (this.refuse) {
      down.resetAndDestroy();
      return;
    }
    this.stats.connections++;
    const up = connect(this.target.port, this.target.host);
    const pair: [Socket, Socket] = [down, up];
    this.pairs.add(pair);
    const close = () => {
      this.pairs.delete(pair);
      down.destroy();
      up.destroy();
    };
    for (const s of pair) {
      s.on('error', close);
      s.on('close', close);
      s.setNoDelay(true);
    }
    this.pipe(down, up, 'bytesUp');
    this.pipe(up, down, 'bytesDown');
  }

  /** Forwards `from` → `to`, each chunk `latencyMs` later; chunks never overtake each other. */
  private pipe(from: Socket, to: Socket, counter: 'bytesUp' | 'bytesDown'): void {
    let tail = 0;
    from.on('data', (b: Buffer) => {
      this.stats[counter] += b.length;
      if (this.latencyMs <= 0) {
        to.write(b);
        return;
      }
      const at = Math.max(performance.now() + this.latencyMs, tail);
      tail = at;
      setTimeout(() => {
        if (!to.destroyed) to.write(b);
      }, at - performance.now());
    });
  }

  /** Cuts every open connection (both ends see a reset). */
  dropAll(): number {
    const n = this.pairs.size;
    for (const [a, b] of this.pairs) {
      a.resetAndDestroy();
      b.resetAndDestroy();
    }
    this.pairs.clear();
    this.stats.drops += n;
    return n;
  }

  get open(): number {
    return this.pairs.size;
  }

  async close(): Promise<void> {
    this.dropAll();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
