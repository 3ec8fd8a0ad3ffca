// A swarm of simulated islands for the dashboard scale test: N socket.io clients on the
// /island namespace that say hello (and nothing else heavy), so the server lists N islands
// and streams their changes to dashboards. Run it as a child process:
//
//   node --import ./bin/register.js test/helpers/dashboard-swarm.ts <url> <n> [pingMs]
//
// It connects in batches of 50 (bounded concurrency), prints one JSON line per milestone on
// stdout ({"event":"ready","ok":n,...}), and with pingMs > 0 has each client send
// `nextAssignment` about every pingMs (random phase), which refreshes its last-seen time, so
// the dashboard stream carries a steady flow of changed islands. SIGTERM: disconnect, exit 0.
// Loopback only: the URL must point at 127.0.0.1 / localhost.

import { io, type Socket } from 'socket.io-client';
import { PROTOCOL_VERSION } from '../../core/protocol.ts';

const [url, nArg, pingArg] = process.argv.slice(2);
const n = Math.min(5000, Math.max(1, Number(nArg) || 1000));
const pingMs = Math.max(0, Number(pingArg) || 0);
const host = new URL(url).hostname;
if (host !== '127.0.0.1' && host !== 'localhost') {
  process.stderr.write(`dashboard-swarm: refusing non-loopback server ${url}\n`);
  process.exit(2);
}

const say = (o: Record<string, unknown>) => process.stdout.write(JSON.stringify(o) + '\n');
const sockets: Socket[] = [];
const timers: Array<ReturnType<typeof setInterval>> = [];
let ok = 0;
const errors: Record<string, number> = {};

function hello(i: number): Promise<void> {
  return new Promise((resolve) => {
    const s = io(`${url}/island`, { transports: ['websocket'], forceNew: true, reconnection: false, timeout: 20_000 });
    sockets.push(s);
    const done = (code?: string) => {
      if (code) errors[code] = (errors[code] ?? 0) + 1;
      resolve();
    };
    s.once('connect_error', (e) => done(`connect: ${e.message}`));
    s.once('connect', () => {
      s.timeout(20_000).emit(
        'hello',
        {
          protocolVersion: PROTOCOL_VERSION,
          caps: {
            name: `sim-${String(i % 400).padStart(3, '0')}`,
            engine: i % 4 === 0 ? 'cpu' : 'webgpu',
            adapter: i % 4 === 0 ? 'cpu' : ['NVIDIA RTX 4090', 'Apple M2', 'google / swiftshader'][i % 3],
            tokensPerSec: 200 + ((i * 7919) % 5000),
          },
        },
        (e: Error | null, r: { ok: boolean; error?: { code: string } }) => {
          if (e) return done('hello timeout');
          if (!r?.ok) return done(r?.error?.code ?? 'hello failed');
          ok++;
          if (pingMs > 0) {
            const start = setTimeout(() => {
              timers.push(
                setInterval(() => {
                  if (s.connected) s.timeout(10_000).emit('nextAssignment', {}, () => {});
                }, pingMs),
              );
            }, Math.random() * pingMs);
            timers.push(start as unknown as ReturnType<typeof setInterval>);
          }
          done();
        },
      );
    });
  });
}

const t0 = Date.now();
for (let i = 0; i < n; i += 50) {
  await Promise.all(Array.from({ length: Math.min(50, n - i) }, (_, k) => hello(i + k)));
}
say({ event: 'ready', ok, errors, ms: Date.now() - t0 });

const stop = () => {
  for (const t of timers) clearInterval(t);
  for (const s of sockets) s.disconnect();
  setTimeout(() => process.exit(0), 200);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
