// `atoll fleet` writes its scalars as a served run does (docs/metrics.md), without the browsers of test/fleet.test.ts:
// two Node islands to 8k tokens (about 30 s on 2 cores). metrics/live/ holds what the live server wrote in its
// temporary run folder (a row per version) and the fleet's evals of the live θ (the report's live evalCurve), in a
// second event file; metrics/twin/, ddp/ and single/ are written as `atoll simulate` writes its rows.

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseScalarsJsonl } from '../client/dashboard/overlay.ts';
import type { FleetReport } from '../instruments/fleet/types.ts';
import { readEventFile } from './helpers/tfevents.ts';

const out = mkdtempSync(join(tmpdir(), 'atoll-fleet-metrics-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const lines = (row: string) =>
  readFileSync(join(out, 'metrics', row, 'scalars.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
const evalPoints = (row: string) =>
  lines(row)
    .filter((l) => 'eval/loss' in l)
    .map((l) => ({ tokens: l['tokens/total'], evalLoss: l['eval/loss'] }));

describe('atoll fleet: metrics/<row>/', () => {
  it('writes live (its server’s rows and the fleet’s evals), twin, ddp and single', () => {
    const args = ['--preset', 'tiny', '--islands', '2', '--browsers', '0', '--tokens', '8000', '--evals', '3'];
    const r = spawnSync('node', ['bin/atoll.js', 'fleet', ...args, '--eval-batches', '4', '--out', out, '--json'], {
      encoding: 'utf8',
      timeout: 180_000,
    });
    expect(r.status, r.stderr.slice(-2000)).toBe(0);
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as FleetReport;
    expect(readdirSync(join(out, 'metrics')).sort()).toEqual(['ddp', 'live', 'single', 'twin']);

    const live = lines('live').filter((l) => 'update/norm' in l);
    expect(live.map((l) => l.step)).toEqual(Array.from({ length: report.live.versions }, (_, v) => v + 1));
    expect(live.at(-1)!['tokens/total']).toBe(report.live.tokens);
    expect(evalPoints('live')).toEqual(report.live.evalCurve);
    for (const row of ['twin', 'ddp', 'single'] as const) expect(evalPoints(row), row).toEqual(report[row].evalCurve);

    for (const row of ['live', 'twin', 'ddp', 'single']) {
      const dir = join(out, 'metrics', row);
      parseScalarsJsonl(readFileSync(join(dir, 'scalars.jsonl'), 'utf8'), row); // the overlay reads it
      const files = readdirSync(dir).filter((f) => f.startsWith('events.out.tfevents.'));
      expect(files, row).toHaveLength(row === 'live' ? 2 : 1); // live: the server's, the fleet's evals
      const events = files.flatMap((f) => readEventFile(readFileSync(join(dir, f))));
      const evals = events.filter((e) => 'eval/loss' in e.scalars).map((e) => e.scalars['eval/loss']);
      expect(evals.length, row).toBe(report[row as 'twin'].evalCurve.length);
    }
  });
});
