// The aggregator role's loop on the Redis layer: lease → restore → pending → new deltas.
//
//   1. Wait as a standby until the lease is ours (a fencing token).
//   2. Restore θ and the optimizer state from the durable checkpoint Redis names
//      (checkpoints/ckpt-v<version>-t<token>.bin in the shared folder), or start from θ₀.
//   3. Apply the predecessor's unsettled deltas (the pending list), then new ones, in batches: each
//      batch is one outer step on the OuterPool (the token-weighted mean of its deltas), written
//      as a checkpoint (fsynced, renamed into place), then settled in one fenced step that makes the
//      version durable and tells the gateways, then broadcast.
//   4. Any E_FENCED answer means a newer aggregator holds the lease: stop at once.
// Checkpoint names carry the token, so a deposed aggregator can never overwrite a file a newer one
// wrote, and Redis never names a file whose writer was not the latest lease holder.
//
// Run as a script (`node --import bin/register.js server/cluster/aggregator.ts <redis> <run> <dir> <n> <ttlMs>`)
// it is one aggregator process with θ₀ = 0 and DiLoCo's outer step (tests, chaos), printing one
// JSON line per state change.

import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Redis } from 'ioredis';
import type { OuterConfig } from '../../core/coord/outer.ts';
import { connectRedis, runKeys, scriptErrorCode } from './keys.ts';
import { AggregatorLease } from './lease.ts';
import { OuterPool } from './outer-pool.ts';
import type { DownlinkSpec } from './outer-worker.ts';
import { type Settled, type StreamDelta, DeltaConsumer, readDurable } from './stream.ts';

export interface AggregatorOptions {
  redis: Redis;
  run: string;
  /** Shared folder for checkpoints (every aggregator of the run sees the same one). */
  dir: string;
  theta0: Float32Array;
  outer: OuterConfig;
  downlink: DownlinkSpec;
  ttlMs: number;
  owner: string;
  workers?: number;
  /** Most deltas merged into one outer step (default 64). */
  batchMax?: number;
  log?: (event: Record<string, unknown>) => void;
}

export function checkpointPath(dir: string, version: number, token: number): string {
  return join(dir, 'checkpoints', `ckpt-v${version}-t${token}.bin`);
}

/** [u32 JSON length][JSON header][θ][momentum][buffer][residual], f32 little-endian. */
function writeCheckpoint(path: string, head: Record<string, unknown>, arrays: Float32Array[]): void {
  const json = Buffer.from(JSON.stringify(head));
  const tmp = `${path}.tmp`;
  const fd = openSync(tmp, 'w');
  try {
    const len = Buffer.alloc(4);
    len.writeUInt32LE(json.length);
    writeSync(fd, len);
    writeSync(fd, json);
    for (const a of arrays) writeSync(fd, new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
    fsyncSync(fd);
  } finally { closeSync(fd); }
  renameSync(tmp, path);
}

function readCheckpoint(path: string, n: number): { head: { version: number; hash: string; bufferCount: number; steps: number }; arrays: Float32Array[] } {
  const b = readFileSync(path);
  const len = b.readUInt32LE(0);
  const head = JSON.parse(b.subarray(4, 4 + len).toString());
  const at = 4 + len;
  const arrays = [0, 1, 2, 3].map((k) => new Float32Array(b.buffer.slice(b.byteOffset + at + 4 * n * k, b.byteOffset + at + 4 * n * (k + 1))));
  return { head, arrays };
}

export class ClusterAggregator {
  version = 0;
  hash = '';
  private readonly lease: AggregatorLease;
  private readonly consumer: DeltaConsumer;
  private readonly keys: ReturnType<typeof runKeys>;
  private pool: OuterPool | null = null;
  private stopped = false;

  constructor(private readonly o: AggregatorOptions) {
    this.keys = runKeys(o.run);
    this.lease = new AggregatorLease(o.redis, this.keys, { owner: o.owner, ttlMs: o.ttlMs, onLost: () => this.log({ kind: 'lease-lost' }) });
    this.consumer = new DeltaConsumer(o.redis, this.keys);
    mkdirSync(join(o.dir, 'checkpoints'), { recursive: true });
  }

  private log(e: Record<string, unknown>): void { this.o.log?.(e); }

  /** Runs until stopped or fenced; resolves with why it ended. */
  async run(): Promise<'stopped' | 'fenced'> {
    this.log({ kind: 'standby' });
    const token = await this.lease.acquire();
    if (token === 0) return 'stopped';
    const n = this.o.theta0.length;
    await this.consumer.ensureGroup();
    const durable = await readDurable(this.o.redis, this.keys);
    this.pool = OuterPool.start({ theta: this.o.theta0, workers: this.o.workers ?? 2 });
    if (durable) {
      const c = readCheckpoint(checkpointPath(this.o.dir, durable.version, durable.token), n);
      this.pool.theta.set(c.arrays[0]);
      await this.pool.importState({ outer: { momentum: c.arrays[1], buffer: c.arrays[2], bufferCount: c.head.bufferCount, steps: c.head.steps }, residual: c.arrays[3] });
      this.version = durable.version;
      this.hash = durable.hash;
    }
    this.log({ kind: 'active', token, version: this.version });
    try {
      const pending = await this.consumer.readPending(token);
      for (let i = 0; i < pending.length; i += this.o.batchMax ?? 64) await this.apply(token, pending.slice(i, i + (this.o.batchMax ?? 64)));
      while (!this.stopped) {
        const batch = await this.consumer.readNew(token, this.o.batchMax ?? 64, 500);
        if (batch.length) await this.apply(token, batch);
      }
      return 'stopped';
    } catch (e) {
      if (scriptErrorCode(e) !== 'E_FENCED') throw e;
      this.log({ kind: 'fenced', token });
      return 'fenced';
    } finally {
      await this.pool.close();
      this.consumer.close();
    }
  }

  /** One outer step over `batch`; rejected frames settle as r:CODE. */
  private async apply(token: number, batch: StreamDelta[]): Promise<void> {
    const pool = this.pool!;
    const settled: Settled[] = [];
    const kept: Array<{ d: StreamDelta; slot: number; tokens: number }> = [];
    for (const d of batch) {
      const r = await pool.ingest(d.frame);
      const tokens = Number((JSON.parse(d.meta) as { tokens?: number }).tokens ?? 0);
      if (!r.ok) settled.push({ ...d, state: `r:${r.error.code}` });
      else if (!(tokens > 0)) { pool.release(r.value.slot); settled.push({ ...d, state: 'r:E_BAD_REQUEST' }); } else kept.push({ d, slot: r.value.slot, tokens });
    }
    if (kept.length) {
      const total = kept.reduce((s, k) => s + k.tokens, 0);
      const step = await pool.step({ slots: kept.map((k) => k.slot), weights: kept.map((k) => k.tokens / total), outer: this.o.outer, downlink: this.o.downlink, scale: 1, period: 1 });
      for (const k of kept) pool.release(k.slot);
      if (!step.ok) for (const k of kept) settled.push({ ...k.d, state: `r:${step.error.code}` });
      else {
        const version = this.version + 1;
        const s = await pool.exportState();
        // paused past the lease by our own clock: not even an orphan file (Redis fences the rest)
        if (!this.lease.held()) throw new Error('E_FENCED: the lease lapsed during the step');
        const file = checkpointPath(this.o.dir, version, token);
        writeCheckpoint(file, { version, hash: step.value.hash, bufferCount: s.outer.bufferCount, steps: s.outer.steps }, [pool.theta, s.outer.momentum, s.outer.buffer, s.residual]);
        for (const k of kept) settled.push({ ...k.d, state: `v:${version}` });
        try {
          // paused during the write: the file never becomes durable, so it goes
          if (!this.lease.held()) throw new Error('E_FENCED: the lease lapsed while the checkpoint was written');
          await this.consumer.settle(token, settled, { version, hash: step.value.hash });
        } catch (e) {
          if (scriptErrorCode(e) === 'E_FENCED') rmSync(file, { force: true });
          throw e;
        }
        this.version = version;
        this.hash = step.value.hash;
        await this.consumer.publishUpdate(token, step.value.frame);
        this.log({ kind: 'durable', version, hash: this.hash, deltas: kept.length });
        return;
      }
    }
    await this.consumer.settle(token, settled);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.lease.release();
  }
}

/** DiLoCo's outer step and an int8 downlink: what the script form runs. */
export const SCRIPT_OUTER: OuterConfig = { kind: 'nesterov', lr: 0.7, momentum: 0.9, dnPeriod: 0 };
export const SCRIPT_DOWNLINK: DownlinkSpec = { encoding: 'int8', blockSize: 64 };

async function main(argv: string[]): Promise<void> {
  const [url, run, dir, n, ttl] = argv;
  const out = (m: Record<string, unknown>) => process.stdout.write(JSON.stringify(m) + '\n');
  const agg = new ClusterAggregator({
    redis: connectRedis(url), run, dir, theta0: new Float32Array(Number(n)), outer: SCRIPT_OUTER, downlink: SCRIPT_DOWNLINK,
    ttlMs: Number(ttl), owner: `aggregator-${process.pid}`, workers: 1, log: out,
  });
  process.once('SIGTERM', () => void agg.stop());
  const why = await agg.run();
  out({ kind: 'exit', why });
  process.exit(why === 'fenced' ? 3 : 0);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) void main(process.argv.slice(2));
