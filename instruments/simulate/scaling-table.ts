// The scaling study's report as markdown (report.md, and what `simulate --preset scaling` prints):
// the protocol, a table per rung, the searches' grids, the gaps against N with their verdicts, the
// power-law fits and the done-when checks.

import { lrOf } from './scaling-protocol.ts';
import type { StudyReport } from './scaling-summary.ts';

const lr = (k: number | undefined) => (k === undefined ? '-' : String(lrOf(k)));

const f4 = (x: number) => (Number.isFinite(x) ? x.toFixed(4) : x === Infinity ? '∞' : 'diverged');
const pct = (x: number) => (Number.isFinite(x) ? `${x >= 0 ? '+' : ''}${(100 * x).toFixed(2)} %` : '-');
const times = (x: number) => (!Number.isFinite(x) ? '-' : x >= 100 ? `${Math.round(x)}×` : `${x.toFixed(1)}×`);
const md = (head: string[], rows: string[][]) => [
  `| ${head.join(' | ')} |`,
  `|${head.map(() => '---').join('|')}|`,
  ...rows.map((r) => `| ${r.join(' | ')} |`),
];

export function studyTable(r: StudyReport): string {
  const c = r.config;
  const out: string[] = [
    `# atoll simulate --preset scaling${c.quick ? ' --quick (a smoke, not a measurement)' : ''}`,
    '',
    `Protocol: D = max(${+c.tokensPerParam.toFixed(4)} N, ${c.minRounds} rounds of M = 8) tokens (the warm start of ` +
      `${c.warmStartTokens} tokens inside it); H = ${c.H}; global batch 2^round(log2(${c.batchBase} (N/N0)^0.45)); ` +
      'AdamW β (0.9, 0.99), clip 1, warmup D/16, cosine to 5 %; outer Nesterov μ 0.9, outer lr swept ' +
      `{${c.outerLrs.join(', ')}} at the first rung; data ${c.data}; seed ${c.seed} (${c.seeds} seeds of ddp, m1, m8 ` +
      `at the first ${c.seedRungs} rungs).`,
    `${r.complete ? 'Complete' : 'INCOMPLETE (runs missing)'}: ` +
      `${c.ranRuns} runs this time, ${c.resumedRuns} resumed; ` +
      `${(c.realTimeMs / 1000).toFixed(0)} s wall, ${(c.cpuTimeMs / 1000).toFixed(0)} s CPU on ${c.workers} worker(s).`,
    '',
  ];
  for (const g of r.rungs) {
    out.push(
      `## ${g.name}: ${g.params.toLocaleString('en-US')} parameters, ${g.tokens.toLocaleString('en-US')} tokens ` +
        `(${g.tokensPerParam.toFixed(1)} per parameter), batch ${g.batch}, H ${g.innerSteps}, ` +
        `${g.rounds.toFixed(0)} rounds${g.complete ? '' : ' — incomplete'}`,
      '',
    );
    out.push(
      ...md(
        ['row', 'run', 'eval loss', 'vs DDP', 'gap', 'gap sd', 'FLOPs', 'outer steps', 'up vs DDP', 'down vs DDP'],
        g.rows.map((x) => [
          x.arm,
          x.name,
          x.seedLosses.length > 1 ? `${f4(x.evalLoss)} ± ${f4(x.evalLossSd)}` : f4(x.evalLoss),
          `${x.vsDdp.toFixed(4)}×`,
          pct(x.gap),
          `${pct(x.gapSd)}${x.gapSdFrom === 'pooled' ? ' (pooled)' : ''}`,
          x.flops.toExponential(2),
          String(x.outerSteps),
          x.arm === 'ddp' ? '1×' : times(x.lessUpThanDdp),
          x.arm === 'ddp' ? '1×' : times(x.lessDownThanDdp),
        ]),
      ),
      '',
    );
    const ch = g.choice;
    out.push(
      `Chosen: DDP lr ${lr(ch.ddpLrK)}, batch ${ch.ddpBatch ?? '-'}; outer lr M = 1 ${ch.m1OuterLr ?? '-'}, ` +
        `M = 8 ${ch.m8OuterLr ?? '-'}; M = 8 inner lr ${lr(ch.m8LrK)}` +
        (ch.edges.length ? `; at the widening limit: ${ch.edges.join(', ')}` : ''),
      `Runs: ${g.runs.map((x) => `${x.name}${x.seed === c.seed ? '' : ` s${x.seed}`} ${f4(x.evalLoss)}`).join('; ')}`,
      '',
    );
  }
  out.push('## Gap to the tuned DDP against N', '');
  out.push(
    ...md(
      ['row', ...r.rungs.map((g) => g.name), 'change', 'sd', 'verdict'],
      r.verdicts.map((v) => [
        v.arm,
        ...r.rungs.map((g) => {
          const p = v.points.find((x) => x.rung === g.name);
          return p ? pct(p.gap) : '-';
        }),
        pct(v.delta),
        pct(v.sd),
        v.word,
      ]),
    ),
    '',
    'Verdict: narrows or widens when the change exceeds 2 sd of the difference (paired seeds, else pooled).',
    '',
    '## Loss ≈ a · FLOPs^−b',
    '',
    ...md(
      ['row', 'a', 'b'],
      r.fits.map((x) => [x.arm, x.a.toFixed(3), x.b.toFixed(4)]),
    ),
    '',
    '## Done when',
    '',
    ...r.checks.map((x) => `- ${x.pass === null ? 'not measured' : x.pass ? 'yes' : 'no'}: ${x.what} (${x.detail})`),
  );
  return out.join('\n');
}
