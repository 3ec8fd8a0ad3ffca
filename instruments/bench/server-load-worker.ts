// A child process of `atoll bench server`: holds N simulated islands (plain socket.io clients on
// loopback) that say hello, then (on the parent's 'go') send tiny deltas in a loop until the
// deadline, recording every ack. Arguments: <server url> <islands> <duration ms> <worker index>.
// IPC: → {type:'ready'} once all are connected; ← {type:'go', at}; → {type:'report'}.

import { io, type Socket } from 'socket.io-client';
import { encodeDelta } from '../../core/codec/index.ts';
import { numParams } from '../../core/model/config.ts';
import { type AckMsg, type Assignment, PROTOCOL_VERSION } from '../../core/protocol.ts';
import { LOAD_MODEL } from './load-run.ts';

type Wire<T> = { ok: true; value: T } | { ok: false; error: { code: string; message: string } };

const [url, countArg, durationArg, indexArg] = process.argv.slice(2);
const count = Number(countArg);
const durationMs = Number(durationArg);
const index = Number(indexArg);
const n = numParams(LOAD_MODEL);
const delta = new Float32Array(n);
for (let i = 0; i < n; i++) delta[i] = 1e-4 * Math.sin(i * 0.37 + index);
const frame = encodeDelta(delta, { encoding: 'int8', blockSize: 64 });

const acks: Array<[string, number, number]> = [];
const latencies: number[] = [];
const errors: string[] = [];
let rejected = 0;

const say = (line: string) => process.send?.({ type: 'log', line: `[load ${index}] ${line}` });

function ask<T>(s: Socket, event: string, payload: unknown, timeoutMs = 60_000): Promise<Wire<T>> {
  return new Promise((resolve) => {
    const t = setTimeout(
      () => resolve({ ok: false, error: { code: 'E_TIMEOUT', message: `${event} timed out` } }),
      timeoutMs,
    );
    s.emit(event, payload, (r: Wire<T>) => {
      clearTimeout(t);
      resolve(r);
    });
  });
}

let startAt = Infinity;
let deadline = Infinity;
let go: () => void = () => {};
const started = new Promise<void>((r) => {
  go = r;
});

async function island(k: number): Promise<Socket | null> {
  const s = io(`${url}/island`, { transports: ['websocket'], reconnection: false, forceNew: true, timeout: 30_000 });
  const up = await new Promise<boolean>((resolve) => {
    s.once('connect', () => resolve(true));
    s.once('connect_error', (e) => {
      errors.push(`connect: ${e.message}`);
      resolve(false);
    });
  });
  if (!up) return null;
  const h = await ask<{ islandId: string; assignment: Assignment | null }>(s, 'hello', {
    protocolVersion: PROTOCOL_VERSION,
    caps: { engine: 'cpu', name: `load-${index}-${k}`, batchSize: 1 },
    push: false,
  });
  if (!h.ok) {
    errors.push(`hello: ${h.error.code} ${h.error.message}`);
    s.disconnect();
    return null;
  }
  const id = h.value.islandId;
  let a = h.value.assignment;
  let seq = 0;
  void (async () => {
    // Wait until every island of every worker is connected, so the load measures a full house.
    await started;
    await new Promise((r) => setTimeout(r, Math.max(0, startAt - Date.now())));
    while (Date.now() < deadline && s.connected) {
      if (!a) {
        const na = await ask<Assignment>(s, 'nextAssignment', {});
        if (!na.ok) {
          errors.push(`next: ${na.error.code}`);
          break;
        }
        a = na.value;
      }
      const meta = {
        islandId: id,
        roundId: a.roundId,
        baseVersion: a.baseVersion,
        seq: ++seq,
        steps: 1,
        tokens: 16,
        lossFirst: 3,
        lossLast: 3,
        lossMean: 3,
        elapsedMs: 10,
      };
      const t0 = performance.now();
      const r = await ask<AckMsg>(s, 'delta', { meta, frame });
      const dt = performance.now() - t0;
      a = null;
      if (!r.ok) {
        errors.push(`delta: ${r.error.code} ${r.error.message}`);
        continue;
      }
      if (r.value.status === 'applied') {
        acks.push([id, meta.seq, r.value.version]);
        latencies.push(dt);
      } else rejected++;
    }
  })();
  return s;
}

async function main(): Promise<void> {
  const t0 = Date.now();
  const sockets: Array<Socket | null> = [];
  const batch = 50;
  for (let k = 0; k < count; k += batch) {
    const part = await Promise.all(Array.from({ length: Math.min(batch, count - k) }, (_, j) => island(k + j)));
    sockets.push(...part);
  }
  const up = sockets.filter((s) => s?.connected).length;
  say(`${up}/${count} islands connected in ${Date.now() - t0} ms`);
  process.on('message', (m: { type: string; at: number }) => {
    if (m.type !== 'go') return;
    startAt = m.at;
    deadline = m.at + durationMs;
    go();
  });
  process.send?.({ type: 'ready', connected: up });
  await started;
  await new Promise((r) => setTimeout(r, Math.max(0, deadline - Date.now())));
  const connected = sockets.filter((s) => s?.connected).length;
  // let in-flight deltas get their acks
  await new Promise((r) => setTimeout(r, 1500));
  for (const s of sockets) s?.disconnect();
  process.send?.(
    { type: 'report', report: { connected, acks, latencies, rejected, errors: [...new Set(errors)].slice(0, 20) } },
    () => process.exit(0),
  );
}

void main();
