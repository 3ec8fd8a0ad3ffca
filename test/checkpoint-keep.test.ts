// The checkpoint keep policy (server/run/keep-policy.ts) through the run store, as a run drives it: a
// checkpoint per version, then its eval. A 100-version run with the default policy keeps the last 5,
// the first of every 50 versions, and the best eval; a version not yet evaluated waits for its eval.
// The serve flags set the policy, on a new run and on resume.

import { rmSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { RunStore } from '../server/run/store.ts';
import { DEFAULT_KEEP, keptVersions } from '../server/run/keep-policy.ts';
import { buildRunConfig, resumeRunConfig } from '../server/run/config.ts';
import { tempDir } from './helpers/server.ts';

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A store with a checkpoint per version 0..n, each evaluated after it is written (loss: `curve`). */
async function run(n: number, curve: (v: number) => number, keep = DEFAULT_KEEP): Promise<RunStore> {
  const dir = tempDir('atoll-keep-');
  dirs.push(dir);
  const store = new RunStore(dir, { keep });
  for (let v = 0; v <= n; v++) {
    store.requestCheckpoint(v, () => [new Uint8Array([v & 0xff])]);
    await store.commit();
    store.noteEval(v, curve(v));
  }
  return store;
}

const versions = (s: RunStore) => s.listCheckpoints().map((c) => c.version);

describe('checkpoints kept by policy', () => {
  it('states its defaults: the last 5, every 50th version, the best eval', () => {
    expect(DEFAULT_KEEP).toEqual({ keep: 5, every: 50, best: true });
    expect(buildRunConfig(null, { preset: 'tiny' }).checkpoints).toEqual(DEFAULT_KEEP);
  });

  it('a 100-version run keeps the best and every 50th, with the last 5', async () => {
    // loss falls to its lowest at v63, then the run overfits
    const store = await run(100, (v) => 3 + Math.abs(v - 63) / 50);
    expect(versions(store)).toEqual([100, 99, 98, 97, 96, 63, 50, 0]);
    const why = store.keptFor();
    expect(why.get(63)).toEqual(['best']);
    expect(why.get(50)).toEqual(['every']);
    expect(why.get(100)).toEqual(['last', 'every']);
    expect(why.get(97)).toEqual(['last']);
  }, 30_000);

  it('a better eval moves the best; the old best goes at the next prune', async () => {
    const store = await run(20, (v) => (v === 7 ? 1 : 2), { keep: 2, every: 0, best: true });
    expect(versions(store)).toEqual([20, 19, 7]);
    store.requestCheckpoint(21, () => [new Uint8Array([21])]);
    await store.commit();
    store.noteEval(21, 0.5);
    store.requestCheckpoint(22, () => [new Uint8Array([22])]);
    await store.commit();
    expect(versions(store)).toEqual([22, 21]);
    expect(store.keptFor().get(21)).toEqual(['last', 'best']);
  }, 30_000);

  it('holds checkpoints newer than the last eval until theirs arrives; a burst keeps the first of a span', () => {
    const kept = keptVersions(
      [10, 11, 12, 13, 14, 15],
      { keep: 2, every: 0, best: true },
      {
        best: { version: 10, loss: 1 },
        evaluated: 12,
      },
    );
    expect([...kept.keys()].sort((a, b) => a - b)).toEqual([10, 13, 14, 15]);
    expect(kept.get(13)).toEqual(['eval']);
    // v50 was never written (a burst): v52 is the first of its span and stays
    const spans = keptVersions([48, 52, 57, 101], { keep: 1, every: 50, best: false }, { best: null, evaluated: -1 });
    expect([...spans.keys()].sort((a, b) => a - b)).toEqual([48, 52, 101]);
  });

  it('the serve flags set the policy, on a new run and on resume; a bad one is refused by name', () => {
    const flags = { preset: 'tiny', keepLast: 3, keepEvery: 10, keepBest: 'off' };
    const fresh = buildRunConfig(null, flags);
    expect(fresh.checkpoints).toEqual({ keep: 3, every: 10, best: false });
    const resumed = resumeRunConfig(fresh, null, { keepEvery: 0, keepBest: 'on' }).config;
    expect(resumed.checkpoints).toEqual({ keep: 3, every: 0, best: true });
    // a config stored before the policy had every and best reads as the defaults
    const old = { ...fresh, checkpoints: { keep: 7 } };
    expect(resumeRunConfig(old, null, {}).config.checkpoints).toEqual({ keep: 7, every: 50, best: true });
    expect(() => buildRunConfig({ checkpoints: { keep: 5, every: -1 } }, { preset: 'tiny' })).toThrow(
      /checkpoints.every/,
    );
  });
});
