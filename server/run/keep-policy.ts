// Which checkpoints a run keeps (the store prunes the rest after each one it writes):
//   last  the newest `keep` (what a restart resumes from, and a revert reaches back to);
//   every the first checkpoint written in each span of `every` versions (v0, v50, v100, … when every version
//         has one; a burst that skipped v50 keeps v51): the run's course, for comparing and going back;
//   best  the one with the lowest eval loss so far; and, while the run evaluates, the ones newer than the last
//         eval (their loss is not known yet, and one of them may be the best).

/** The policy, as in RunConfig.checkpoints. */
export interface KeepPolicy {
  keep: number;
  every?: number;
  best?: boolean;
}

/** The defaults (atoll serve --keep-last 5 --keep-every 50, keep-best on). */
export const DEFAULT_KEEP = { keep: 5, every: 50, best: true } satisfies KeepPolicy;

export type KeepReason = 'last' | 'every' | 'best' | 'eval';

export interface EvalMark {
  /** The best eval so far whose checkpoint was kept (null: none yet). */
  best: { version: number; loss: number } | null;
  /** The newest version with an eval result (-1: none; nothing is held for an eval then). */
  evaluated: number;
}

/** Why each version of `versions` (any order) is kept; a version missing from the map is pruned. */
export function keptVersions(versions: number[], p: KeepPolicy, mark: EvalMark): Map<number, KeepReason[]> {
  const newestFirst = [...versions].sort((a, b) => b - a);
  const kept = new Map<number, KeepReason[]>();
  const add = (v: number, why: KeepReason) => kept.set(v, [...(kept.get(v) ?? []), why]);
  for (const v of newestFirst.slice(0, Math.max(1, p.keep))) add(v, 'last');
  const every = p.every ?? DEFAULT_KEEP.every;
  if (every > 0) {
    const firstOfSpan = new Map<number, number>();
    for (const v of newestFirst) firstOfSpan.set(Math.floor(v / every), v); // oldest last: it wins
    for (const v of firstOfSpan.values()) add(v, 'every');
  }
  if (p.best ?? DEFAULT_KEEP.best) {
    if (mark.best && versions.includes(mark.best.version)) add(mark.best.version, 'best');
    if (mark.evaluated >= 0) for (const v of newestFirst) if (v > mark.evaluated) add(v, 'eval');
  }
  return kept;
}
