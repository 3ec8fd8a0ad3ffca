// The scaling study's search, as a pure function of the runs done so far: which runs a rung still
// needs, and what it has settled (DDP's lr and batch, the outer lrs, M = 8's inner lr). The runner
// (scaling.ts) runs what it asks for, in parallel, and asks again; a ladder resumed from rows.jsonl
// asks the same questions and gets the same answers, so it skips what is done.
//
// Per rung, each stage once the one before it is settled:
//   DDP's inner lr on the √2 grid at the rule's batch, widened until the best is interior (or the
//   widening limit), then its batch over powers of 2 at that lr, widened the same way;
//   the outer lr {0.4, 0.7, 1.0} for M = 1 and M = 8 at the first rung (at DDP's lr), held at every rung;
//   M = 1 at DDP's lr; M = 8's own inner lr (from DDP's down, widened until interior);
//   at M = 8's lr: + sparse codec, + async, + heterogeneous (production), SparseLoCo's codec, and the
//   32-island rows where the batch gives each island a sequence;
//   seeds 2 and 3 of DDP, M = 1 and M = 8 at the first seedRungs rungs.

import { type Arm, type Protocol, type RowSpec, type RungPlan, armRuns, rowKey } from './scaling-protocol.ts';

/** What the study needs of a finished run. */
export type Results = ReadonlyMap<string, { evalLoss: number }>;

type Found = { missing: number[] } | { best: number; edge: boolean };

/**
 * Grid search over integers (√2 steps of the lr, or log2 of the batch): the best point of those run,
 * widened one point at a time toward an edge that holds it, within [lo, hi]. A diverged run (NaN) is
 * the worst. `edge`: the best is still at the edge of the points run (the limit was reached).
 */
export function gridSearch(start: number[], lo: number, hi: number, loss: (x: number) => number | undefined): Found {
  const xs = new Set(start);
  for (;;) {
    const sorted = [...xs].sort((a, b) => a - b);
    const missing = sorted.filter((x) => loss(x) === undefined);
    if (missing.length) return { missing };
    const l = (x: number) => (Number.isFinite(loss(x)) ? (loss(x) as number) : Infinity);
    const best = sorted.reduce((a, b) => (l(b) < l(a) ? b : a));
    if (best === sorted[0] && best > lo) xs.add(best - 1);
    else if (best === sorted[sorted.length - 1] && best < hi) xs.add(best + 1);
    else return { best, edge: best === sorted[0] || best === sorted[sorted.length - 1] };
  }
}

/** What a rung has settled so far. */
export interface RungChoice {
  ddpLrK?: number;
  ddpBatch?: number;
  m1OuterLr?: number;
  m8OuterLr?: number;
  m8LrK?: number;
  /** Searches whose best sat at the widening limit. */
  edges: string[];
  /** The run of each arm the report takes (seed 1 of its spec), once chosen. */
  arms: Partial<Record<Arm, RowSpec>>;
}

export interface RungStatus {
  /** Runs the rung needs now (not done), each runnable. */
  want: RowSpec[];
  done: boolean;
  choice: RungChoice;
}

/** The rung's needs and choices, given the runs done (`res`, by rowKey). */
export function planRung(k: number, plans: RungPlan[], p: Protocol, seed: number, res: Results): RungStatus {
  const plan = plans[k];
  const rung = plan.spec.name;
  const want: RowSpec[] = [];
  const choice: RungChoice = { edges: [], arms: {} };
  const spec = (arm: Arm, lrK: number, batch = plan.batch, outerLr = 0, s = seed): RowSpec => ({
    rung,
    arm,
    lrK,
    batch,
    outerLr: arm === 'ddp' || arm === 'sparseloco' ? 0 : outerLr,
    seed: s,
  });
  const lossOf = (s: RowSpec) => res.get(rowKey(s))?.evalLoss;
  const need = (ss: RowSpec[]) => {
    for (const s of ss) if (lossOf(s) === undefined && !want.some((w) => rowKey(w) === rowKey(s))) want.push(s);
  };
  const found = (what: string, f: Found, ask: (x: number) => RowSpec): number | undefined => {
    if ('missing' in f) {
      need(f.missing.map((x) => ask(x)));
      return undefined;
    }
    if (f.edge) choice.edges.push(what);
    return f.best;
  };
  // DDP's inner lr at the rule's batch, then its batch at that lr
  const lo = Math.min(...p.lrStart) - p.maxWiden,
    hi = Math.max(...p.lrStart) + p.maxWiden;
  const ddpAt = (lrK: number, b = plan.batch) => spec('ddp', lrK, b);
  const ddpK = found(
    'ddp lr',
    gridSearch(p.lrStart, lo, hi, (x) => lossOf(ddpAt(x))),
    ddpAt,
  );
  choice.ddpLrK = ddpK;
  const seeds = k < p.seedRungs ? Array.from({ length: p.seeds - 1 }, (_, i) => seed + 1 + i) : [];
  if (ddpK !== undefined) {
    const l2 = Math.log2(plan.batch);
    const bAt = (x: number) => ddpAt(ddpK, 2 ** x);
    const b = found(
      'ddp batch',
      gridSearch(
        [l2 - 1, l2, l2 + 1].filter((x) => x >= 0),
        Math.max(0, l2 - 1 - p.maxWiden),
        l2 + 1 + p.maxWiden,
        (x) => lossOf(bAt(x)),
      ),
      bAt,
    );
    if (b !== undefined) {
      choice.ddpBatch = 2 ** b;
      choice.arms.ddp = ddpAt(ddpK, 2 ** b);
      need(seeds.map((s) => ({ ...ddpAt(ddpK, 2 ** b), seed: s })));
    }
  }
  // the outer lr: swept at the first rung, held at the others
  const held = k === 0 ? outerSweep(plan, p, seed, res, ddpK, need, spec) : planRung(0, plans, p, seed, res).choice;
  choice.m1OuterLr = held.m1OuterLr;
  choice.m8OuterLr = held.m8OuterLr;
  if (ddpK === undefined) return { want, done: false, choice };
  if (held.m1OuterLr !== undefined) {
    const m1 = spec('m1', ddpK, plan.batch, held.m1OuterLr);
    choice.arms.m1 = m1;
    need([m1, ...seeds.map((s) => ({ ...m1, seed: s }))]);
  }
  const olr = held.m8OuterLr;
  if (olr !== undefined) {
    const start = (p.maxWiden > 1 ? [ddpK - 2, ddpK - 1, ddpK] : [ddpK - 1, ddpK]).filter((x) => x >= lo);
    const m8At = (x: number) => spec('m8', x, plan.batch, olr);
    const m8K = found(
      'm8 lr',
      gridSearch(start, start[0] - p.maxWiden, ddpK + p.maxWiden, (x) => lossOf(m8At(x))),
      m8At,
    );
    choice.m8LrK = m8K;
    if (m8K !== undefined) {
      choice.arms.m8 = m8At(m8K);
      need(seeds.map((s) => ({ ...m8At(m8K), seed: s })));
      for (const arm of ['m8-sparse', 'm8-sparse-async', 'production', 'sparseloco', 'm32', 'm32-production'] as const)
        if (armRuns(arm, plan.batch)) {
          choice.arms[arm] = spec(arm, m8K, plan.batch, olr);
          need([choice.arms[arm]]);
        }
    }
  }
  const settled = choice.ddpBatch !== undefined && choice.m8LrK !== undefined && choice.arms.m1 !== undefined;
  return { want, done: settled && want.length === 0, choice };
}

/** The first rung's outer-lr sweep for M = 1 and M = 8 at DDP's lr: the best of each, once all are in. */
function outerSweep(
  plan: RungPlan,
  p: Protocol,
  seed: number,
  res: Results,
  ddpK: number | undefined,
  need: (s: RowSpec[]) => void,
  spec: (arm: Arm, lrK: number, batch: number, outerLr: number, s?: number) => RowSpec,
): Pick<RungChoice, 'm1OuterLr' | 'm8OuterLr'> {
  if (ddpK === undefined) return {};
  const out: Pick<RungChoice, 'm1OuterLr' | 'm8OuterLr'> = {};
  for (const arm of ['m1', 'm8'] as const) {
    const runs = p.outerLrs.map((o) => spec(arm, ddpK, plan.batch, o, seed));
    need(runs);
    const losses = runs.map((s) => res.get(rowKey(s))?.evalLoss);
    if (losses.some((l) => l === undefined)) continue;
    const l = (i: number) => (Number.isFinite(losses[i]) ? (losses[i] as number) : Infinity);
    const best = p.outerLrs.reduce((a, _, i) => (l(i) < l(a) ? i : a), 0);
    out[arm === 'm1' ? 'm1OuterLr' : 'm8OuterLr'] = p.outerLrs[best];
  }
  return out;
}
