// A served run's data: a byte corpus (corpus.ts), or a folder of token shards in the run's tokenizer
// (`serve --data DIR`, `atoll data prepare --tokenizer byte|gpt2`), every shard checked before the server
// listens (shard-dir.ts). A shard run publishes its index and serves shard bytes by HTTP Range
// (plugins/data.ts); its islands fetch only the ranges the coordinator's range ledger assigns them
// (core/coord/data-ranges.ts), and eval reads the held-out shard.

import { existsSync, readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import type { DataIndex } from '../../core/api.ts';
import type { TextDataset } from '../../core/data/dataset.ts';
import { INDEX_FILE, parseIndex } from '../../core/data/shard-index.ts';
import { HEADER_BYTES, ShardError } from '../../core/data/shards.ts';
import { VOCAB_SIZE } from '../../core/data/tokenizer.ts';
import type { RunConfig } from '../../core/run-config.ts';
import { loadCorpus } from './corpus.ts';
import { isShardDir, loadShardDir } from './shard-dir.ts';

export interface ServedShards {
  dir: string;
  /** What GET /api/data/index answers. */
  index: DataIndex;
  /** The train shards, in index order (the range ledger's shards). */
  train: { name: string; tokens: number }[];
  /** Bytes of shard data served (ranges and whole files), for the operator and tests. */
  bytesServed: number;
}

/** The run's data: the corpus, or the shards (dataset: the held-out shard, no train text to download). */
export function openData(config: RunConfig): { dataset: TextDataset; shards: ServedShards | null } {
  const dir = config.data;
  const { tokenizer } = config;
  if (!isShardDir(dir)) {
    // the islands would download the text whole and read it as bytes: BPE ids come as shards
    if (tokenizer !== 'byte')
      throw new ShardError(
        'E_DATA_NEEDS_SHARDS',
        `a ${tokenizer}-tokenizer run trains on token shards: run atoll data prepare --tokenizer ${tokenizer} ` +
          `--out DIR ${dir}, then serve --data DIR`,
      );
    if (config.dataUrl !== undefined)
      throw new ShardError('E_BAD_CONFIG', `--data-url names where shards are fetched: ${dir} is a text, not shards`);
    return { dataset: loadCorpus(dir), shards: null };
  }
  const ds = loadShardDir(dir, tokenizer);
  const unit = config.coordinator.batchSize * (config.coordinator.seqLen + 1);
  const train = ds.shards.filter((s) => !s.heldOut).map((s) => ({ name: s.name, tokens: s.tokens }));
  if (!train.some((s) => s.tokens >= unit))
    throw new ShardError(
      'E_DATA_TOO_SMALL',
      `${dir}: no train shard holds one step's ${unit} tokens (batch × (seqLen + 1)): a range could not be drawn`,
    );
  const sums = existsSync(join(dir, INDEX_FILE))
    ? new Map(parseIndex(readFileSync(join(dir, INDEX_FILE), 'utf8')).shards.map((e) => [e.name, e.sha256]))
    : new Map<string, string>();
  const heldOut = ds.shards.find((s) => s.heldOut)!.name;
  const index: DataIndex = {
    format: 'atoll-shards',
    version: 1,
    tokenizer,
    vocabSize: VOCAB_SIZE[tokenizer],
    heldOut,
    ...(config.dataUrl ? { url: config.dataUrl } : {}),
    shards: ds.shards.map((s) => {
      const headerBytes = s.format === 'llmc' ? HEADER_BYTES : 0;
      const sha = sums.get(s.name);
      return {
        name: s.name,
        tokens: s.tokens,
        bytes: headerBytes + 2 * s.tokens,
        headerBytes,
        ...(sha ? { sha256: sha } : {}),
      };
    }),
  };
  const dataset: TextDataset = { name: ds.name, tokenizer, train: new Uint8Array(0), heldOut: ds.heldOut };
  return { dataset, shards: { dir, index, train, bytesServed: 0 } };
}

/** Bytes [start, end] (inclusive) of shard `name` (a name of the index: the caller checked it). */
export async function readShardBytes(s: ServedShards, name: string, start: number, end: number): Promise<Buffer> {
  const f = await open(join(s.dir, name), 'r');
  try {
    const buf = Buffer.alloc(end - start + 1);
    const { bytesRead } = await f.read(buf, 0, buf.length, start);
    if (bytesRead !== buf.length) throw new ShardError('E_BAD_SHARD', `shard '${name}' shrank since the start`);
    s.bytesServed += buf.length;
    return buf;
  } finally {
    await f.close();
  }
}
