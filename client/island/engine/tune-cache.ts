// The autotuner's cache in Node: one JSON file of key → choice, by default
// ~/.cache/atoll/autotune.json (ATOLL_AUTOTUNE_CACHE overrides). Unreadable or corrupt:
// start empty (the tuner just times again). Written whole after each new choice.

import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import type { TuneCache } from './webgpu-tune.ts';

export const defaultTuneCachePath = () =>
  process.env.ATOLL_AUTOTUNE_CACHE ?? join(homedir(), '.cache', 'atoll', 'autotune.json');

export function fileTuneCache(path = defaultTuneCachePath()): TuneCache {
  let entries: Record<string, string> = {};
  try {
    const parsed: unknown = JSON.parse(readFileSync(path, 'utf8'));
    if (parsed && typeof parsed === 'object') entries = parsed as Record<string, string>;
  } catch {
    // no cache yet, or not ours: start empty
  }
  return {
    get: (k) => (typeof entries[k] === 'string' ? entries[k] : null),
    set(k, v) {
      entries[k] = v;
      try {
        mkdirSync(dirname(path), { recursive: true });
        writeFileSync(`${path}.tmp`, JSON.stringify(entries, null, 1));
        renameSync(`${path}.tmp`, path);
      } catch {
        // a read-only home: the choice still holds for this engine
      }
    },
  };
}
