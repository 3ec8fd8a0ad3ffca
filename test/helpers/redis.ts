// Redis for the cluster tests: each test file starts its own redis-server on a free port (see
// server/cluster/redis-proc.ts) and stops it.
//
// Run as a script (`node --import bin/register.js test/helpers/redis.ts writer <url> <run> <ttlMs>`),
// this file is a stand-in aggregator: it takes the lease, then every 50 ms tries one fenced write
// (publish an update, settle a durable version) whether or not it still believes it holds the lease,
// and prints one JSON line per attempt, so a test can pause it past its lease and watch it fail.

import { fileURLToPath } from 'node:url';
import { connectRedis, runKeys, scriptErrorCode } from '../../server/cluster/keys.ts';
import { AggregatorLease } from '../../server/cluster/lease.ts';
import { DeltaConsumer } from '../../server/cluster/stream.ts';

export { type RedisProc, startRedis } from '../../server/cluster/redis-proc.ts';

const SELF = fileURLToPath(import.meta.url);

async function writerChild(url: string, run: string, ttlMs: number): Promise<void> {
  const redis = connectRedis(url);
  const keys = runKeys(run);
  const out = (m: Record<string, unknown>) => process.stdout.write(JSON.stringify(m) + '\n');
  const lease = new AggregatorLease(redis, keys, {
    owner: `writer-${process.pid}`,
    ttlMs,
    onLost: () => out({ kind: 'lost' }),
  });
  const consumer = new DeltaConsumer(redis, keys);
  await consumer.ensureGroup();
  const token = await lease.acquire();
  out({ kind: 'token', token });
  let version = 0;
  for (;;) {
    version++;
    try {
      await consumer.publishUpdate(token, new TextEncoder().encode(`update ${version}`));
      await consumer.settle(token, [], { version, hash: `h${version}` });
      out({ kind: 'wrote', version, held: lease.held() });
    } catch (e) {
      out({ kind: 'fenced', version, code: scriptErrorCode(e), held: lease.held() });
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

if (process.argv[1] === SELF && process.argv[2] === 'writer') {
  void writerChild(process.argv[3], process.argv[4], Number(process.argv[5]));
}
