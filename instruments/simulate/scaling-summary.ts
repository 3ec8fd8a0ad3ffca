// The scaling study's report from its runs: a table per rung (each arm's chosen run, mean ± sd over
// seeds), the searches' grids, each arm's gap to the tuned DDP against N with a verdict judged
// against the seed sd, loss ≈ a · FLOPs^−b per arm, and the done-when checks.

import { fitPowerLaw } from './scaling-report.ts';
import type { JournalRun } from './scaling-journal.ts';
import { type RungChoice, planRung } from './scaling-plan.ts';
import {
  ARMS,
  type Arm,
  PROTOCOL_H,
  type Protocol,
  type RowSpec,
  type RungPlan,
  SEQ_LEN,
  islandsOf,
  lrOf,
  rowKey,
  rowName,
} from './scaling-protocol.ts';

export interface StudyRow {
  arm: Arm;
  name: string;
  lr: number;
  outerLr: number;
  batch: number;
  islands: number;
  evalLoss: number;
  evalLossSd: number;
  seedLosses: number[];
  /** Eval loss / the tuned DDP's (means over seeds); gap = vsDdp − 1. */
  vsDdp: number;
  gap: number;
  /** The gap's sd: over paired seeds where the arm has them, else pooled from the rows that do. */
  gapSd: number;
  gapSdFrom: 'seeds' | 'pooled' | 'none';
  tokens: number;
  flops: number;
  /** Outer steps taken (θ's versions; DDP: its optimizer steps). */
  outerSteps: number;
  innerSteps?: number;
  bytesUpPerIsland: number;
  bytesDownPerIsland: number;
  /** The tuned DDP's bytes per worker over this row's. */
  lessUpThanDdp: number;
  lessDownThanDdp: number;
  goodput: number;
  realTimeMs: number;
}

export interface StudyRung {
  name: string;
  params: number;
  tokens: number;
  tokensPerParam: number;
  batch: number;
  innerSteps: number;
  /** Outer rounds of the M = 8 rows, D / (batch · T · H). */
  rounds: number;
  complete: boolean;
  choice: Omit<RungChoice, 'arms'>;
  /** Every run of the rung: its name, seed and eval loss (the searches' grids). */
  runs: Array<{ name: string; seed: number; evalLoss: number }>;
  rows: StudyRow[];
}

export interface Verdict {
  arm: Arm;
  points: Array<{ rung: string; params: number; gap: number; gapSd: number }>;
  /** Last gap − first gap, its sd, and the word: beyond ±2 sd (HOLD_TOLERANCE where no sd) narrows or widens. */
  delta: number;
  sd: number;
  word: 'narrows' | 'holds' | 'widens';
}

export interface StudyReport {
  config: Protocol & {
    preset: 'scaling';
    H: number;
    seqLen: number;
    data: string;
    seed: number;
    workers: number;
    engine: string;
    quick: boolean;
    warmStartTokens: number;
    realTimeMs: number;
    cpuTimeMs: number;
    resumedRuns: number;
    ranRuns: number;
  };
  complete: boolean;
  rungs: StudyRung[];
  verdicts: Verdict[];
  fits: Array<{ arm: Arm; a: number; b: number }>;
  checks: Array<{ what: string; pass: boolean | null; detail: string }>;
}

/** Where no sd is known, a gap change within this holds. */
export const HOLD_TOLERANCE = 0.005;

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const sdOf = (xs: number[]) =>
  xs.length > 1 ? Math.sqrt(xs.reduce((a, x) => a + (x - mean(xs)) ** 2, 0) / (xs.length - 1)) : NaN;

type Extra = Omit<StudyReport['config'], keyof Protocol | 'preset' | 'H' | 'seqLen'> & { flopsPerToken: number[] };

export function studyReport(
  plans: RungPlan[],
  p: Protocol,
  seed: number,
  runs: ReadonlyMap<string, JournalRun>,
  extra: Extra,
): StudyReport {
  const res = new Map([...runs].map(([k, r]) => [k, r.result]));
  // every seed's run of a spec
  const seedsOf = (s: RowSpec) =>
    [...runs.values()].filter((r) => rowKey({ ...r.spec, seed: 0 }) === rowKey({ ...s, seed: 0 }));
  const rungs: StudyRung[] = plans.map((plan, k) => {
    const st = planRung(k, plans, p, seed, res);
    const { arms, ...choice } = st.choice;
    const ddp = arms.ddp && seedsOf(arms.ddp);
    const ddpLoss = ddp ? mean(ddp.map((r) => r.result.evalLoss)) : NaN;
    const rows: StudyRow[] = ARMS.flatMap((arm) => {
      const s = arms[arm];
      const got = s ? seedsOf(s).filter((r) => r.result) : [];
      if (!s || !got.length) return [];
      const r0 = got.find((r) => r.spec.seed === seed)?.result ?? got[0].result;
      const losses = got.map((r) => r.result.evalLoss);
      const paired = got.flatMap((r) => {
        const d = ddp?.find((x) => x.spec.seed === r.spec.seed);
        return d ? [r.result.evalLoss / d.result.evalLoss - 1] : [];
      });
      const ddp0 = ddp?.[0]?.result;
      return [
        {
          arm,
          name: rowName(s),
          lr: lrOf(s.lrK),
          outerLr: s.outerLr,
          batch: s.batch,
          islands: islandsOf(arm),
          evalLoss: mean(losses),
          evalLossSd: sdOf(losses),
          seedLosses: losses,
          vsDdp: mean(losses) / ddpLoss,
          gap: mean(losses) / ddpLoss - 1,
          gapSd: arm === 'ddp' ? sdOf(losses) / ddpLoss : sdOf(paired),
          gapSdFrom: 'none',
          tokens: r0.tokens,
          flops: extra.flopsPerToken[k] * r0.tokensComputed,
          outerSteps: r0.versions,
          ...(arm === 'ddp' ? {} : { innerSteps: PROTOCOL_H }),
          bytesUpPerIsland: r0.bytesUpPerIsland,
          bytesDownPerIsland: r0.bytesDownPerIsland,
          lessUpThanDdp: ddp0 ? ddp0.bytesUpPerIsland / Math.max(1, r0.bytesUpPerIsland) : NaN,
          lessDownThanDdp: ddp0 ? ddp0.bytesDownPerIsland / Math.max(1, r0.bytesDownPerIsland) : NaN,
          goodput: r0.goodput,
          realTimeMs: got.reduce((a, r) => a + r.result.realTimeMs, 0),
        } satisfies StudyRow,
      ];
    });
    return {
      name: plan.spec.name,
      params: plan.params,
      tokens: plan.tokens,
      tokensPerParam: plan.tokens / plan.params,
      batch: plan.batch,
      innerSteps: PROTOCOL_H,
      rounds: plan.rounds,
      complete: st.done,
      choice,
      runs: [...runs.values()]
        .filter((r) => r.spec.rung === plan.spec.name)
        .map((r) => ({ name: rowName(r.spec), seed: r.spec.seed, evalLoss: r.result.evalLoss })),
      rows,
    };
  });
  // rows without seeds borrow the pooled paired sd of those with them
  const known = rungs.flatMap((g) => g.rows.filter((r) => r.arm !== 'ddp' && Number.isFinite(r.gapSd)));
  const pooled = known.length ? Math.sqrt(mean(known.map((r) => r.gapSd ** 2))) : NaN;
  for (const r of rungs.flatMap((g) => g.rows))
    if (!Number.isFinite(r.gapSd) && r.arm !== 'ddp' && Number.isFinite(pooled)) {
      r.gapSd = pooled;
      r.gapSdFrom = 'pooled';
    } else if (Number.isFinite(r.gapSd)) r.gapSdFrom = 'seeds';
  const verdicts = ARMS.filter((a) => a !== 'ddp').flatMap((arm) => verdictOf(arm, rungs));
  const fits = ARMS.map((arm) => ({
    arm,
    ...fitPowerLaw(rungs.flatMap((g) => g.rows.filter((r) => r.arm === arm).map((r) => [r.flops, r.evalLoss]))),
  })).filter((f) => Number.isFinite(f.a));
  const { flopsPerToken: _f, ...cfg } = extra;
  return {
    config: { ...p, ...cfg, preset: 'scaling', H: PROTOCOL_H, seqLen: SEQ_LEN },
    complete: rungs.every((g) => g.complete),
    rungs,
    verdicts,
    fits,
    checks: checksOf(rungs),
  };
}

function verdictOf(arm: Arm, rungs: StudyRung[]): Verdict[] {
  const points = rungs.flatMap((g) =>
    g.rows.filter((r) => r.arm === arm).map((r) => ({ rung: g.name, params: g.params, gap: r.gap, gapSd: r.gapSd })),
  );
  if (points.length < 2) return [];
  const a = points[0],
    b = points[points.length - 1];
  const delta = b.gap - a.gap;
  const sd = Math.sqrt(a.gapSd ** 2 + b.gapSd ** 2);
  const tol = Number.isFinite(sd) && sd > 0 ? 2 * sd : HOLD_TOLERANCE;
  return [{ arm, points, delta, sd, word: delta < -tol ? 'narrows' : delta > tol ? 'widens' : 'holds' }];
}

/** The done-when, as far as this run can say (null: not measured). */
function checksOf(rungs: StudyRung[]): StudyReport['checks'] {
  const row = (g: StudyRung | undefined, arm: Arm) => g?.rows.find((r) => r.arm === arm);
  const first = rungs[0],
    last = rungs[rungs.length - 1];
  const m8a = row(first, 'm8'),
    m8b = row(last, 'm8');
  const prodTop = row(last, 'production');
  const f = (x: number | undefined, d = 4) => (x === undefined || !Number.isFinite(x) ? '-' : x.toFixed(d));
  const small = rungs.slice(0, 2).map((g) => row(g, 'm1'));
  const within = rungs.map((g) => [row(g, 'production'), row(g, 'm8')] as const);
  return [
    {
      what: 'sync dense M = 8: gap at the top rung ≤ half the gap at the bottom rung',
      pass: m8a && m8b ? m8b.gap <= m8a.gap / 2 : null,
      detail: `${f(m8a?.gap)} → ${f(m8b?.gap)}`,
    },
    {
      what: 'M = 1 within one sd of DDP, or better, at the two smallest rungs',
      pass: small.every((r) => r) ? small.every((r) => r!.gap <= (Number.isFinite(r!.gapSd) ? r!.gapSd : 0)) : null,
      detail: small.map((r) => `${f(r?.gap)} (sd ${f(r?.gapSd)})`).join(', '),
    },
    {
      what: 'production within 1 % of sync dense M = 8 at every rung',
      pass: within.every(([a, b]) => a && b) ? within.every(([a, b]) => a!.evalLoss / b!.evalLoss - 1 <= 0.01) : null,
      detail: within.map(([a, b]) => (a && b ? f(a.evalLoss / b.evalLoss - 1) : '-')).join(', '),
    },
    {
      what: 'production at the top rung: ≥ 4,000× less upload and ≥ 300× less download than DDP',
      pass: prodTop ? prodTop.lessUpThanDdp >= 4000 && prodTop.lessDownThanDdp >= 300 : null,
      detail: prodTop ? `${f(prodTop.lessUpThanDdp, 0)}× up, ${f(prodTop.lessDownThanDdp, 0)}× down` : '-',
    },
    {
      what: '≥ 100 outer steps for M = 8 at every rung',
      pass: rungs.every((g) => row(g, 'm8')) ? rungs.every((g) => row(g, 'm8')!.outerSteps >= 100) : null,
      detail: rungs.map((g) => row(g, 'm8')?.outerSteps ?? '-').join(', '),
    },
  ];
}
