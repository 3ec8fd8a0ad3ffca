// The dashboard's overlay of another run (client/dashboard/overlay.ts) read from files the real writers wrote:
// `atoll train`'s <out>.metrics/scalars.jsonl (checked against the curve its --json reports) and a served run's
// (server/run/scalars.ts ScalarLog: an update's row, its eval landing later, a config change, a resume that
// rewrites a version). Also the config-change markers' places and words (markers.ts) and the log axis in the URL.

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { changeText, markersOf } from '../client/dashboard/markers.ts';
import { overlayColumns, parseScalarsJsonl } from '../client/dashboard/overlay.ts';
import { parseView, serializeView } from '../client/dashboard/url.ts';
import type { HistoryPoint } from '../core/api.ts';
import { ScalarLog } from '../server/run/scalars.ts';

const dir = mkdtempSync(join(tmpdir(), 'atoll-overlay-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('dashboard overlay: a run’s metrics JSONL', () => {
  it('reads `atoll train`’s scalars.jsonl: every step’s train loss, lr and tokens, and the evals, as --json says', () => {
    const out = join(dir, 'tiny.safetensors');
    const r = spawnSync(
      'node',
      ['bin/atoll.js', 'train', '--preset', 'tiny', '--steps', '12', '--eval-every', '6', '--json', '--out', out],
      { encoding: 'utf8', timeout: 120_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout.trim()) as {
      curve: Array<{
        step: number;
        tokens: number;
        lr: number | null;
        trainLoss: number | null;
        evalLoss: number | null;
      }>;
    };
    const run = parseScalarsJsonl(readFileSync(join(dir, 'tiny.metrics', 'scalars.jsonl'), 'utf8'), 'tiny');
    expect(run.rows.map((row) => row.step)).toEqual(report.curve.map((p) => p.step));
    for (const [i, p] of report.curve.entries()) {
      const s = run.rows[i].scalars;
      expect(s['tokens/total']).toBe(p.tokens);
      expect(s['train/loss'] ?? null).toBe(p.trainLoss);
      expect(s['eval/loss'] ?? null).toBe(p.evalLoss);
      expect(s['lr/inner'] ?? null).toBe(p.lr);
    }
    // on the tokens axis: x is tokens/total, the eval column holds the three evals (steps 0, 6, 12)
    const [xs, evalCol, trainCol] = overlayColumns(run, 'tokens', ['eval/loss', 'train/loss'], null);
    expect(xs).toEqual(report.curve.map((p) => p.tokens));
    expect(evalCol.filter((v) => v !== null)).toHaveLength(3);
    expect(trainCol[0]).toBeNull();
  });

  it('reads a served run’s file: an eval lands on its version, a resume’s rewrite wins, config lines count', () => {
    const metrics = join(dir, 'served');
    const log = new ScalarLog(metrics, { fresh: true });
    const t = 1_764_754_000_000;
    log.write(1, t + 1000, { 'train/loss': 5, 'tokens/total': 100, 'lr/outer': 0.7, 'update/norm': 0.3 });
    log.write(2, t + 2000, { 'train/loss': 4.5, 'tokens/total': 200, 'lr/outer': 0.7, 'update/norm': 0.2 });
    log.write(1, t + 2100, { 'eval/loss': 4.9 }); // the eval of version 1, after version 2
    log.change(2, t + 2200, { outer: { lr: 0.5 } });
    log.write(2, t + 9000, { 'train/loss': 4.4, 'tokens/total': 200, 'lr/outer': 0.5, 'update/norm': 0.25 }); // resumed
    const run = parseScalarsJsonl(readFileSync(join(metrics, 'scalars.jsonl'), 'utf8'), 'served');
    expect(run.changes).toBe(1);
    expect(run.rows.map((row) => [row.step, row.scalars['eval/loss'] ?? null, row.scalars['train/loss']])).toEqual([
      [1, 4.9, 5],
      [2, null, 4.4],
    ]);
    // on the time axis it starts where this run started (x in seconds)
    const [xs, outer] = overlayColumns(run, 'time', ['lr/outer'], 5_000_000);
    expect(xs).toEqual([5000, 5001]);
    expect(outer).toEqual([0.7, 0.5]);
  });

  it('refuses a file that is not a metrics JSONL, naming the line', () => {
    expect(() => parseScalarsJsonl('{"step":0,"time":1,"eval/loss":5}\nnot json\n', 'x')).toThrow(
      /x line 2 is not JSON/,
    );
    expect(() => parseScalarsJsonl('{"version":3}\n', 'x')).toThrow(/line 1 has no numeric "step"/);
    expect(() => parseScalarsJsonl('{"step":0,"time":1,"bytes/in_total":5}\n', 'x')).toThrow(/nothing to draw/);
  });
});

describe('dashboard config-change markers', () => {
  const point = (version: number, totalTokens: number): HistoryPoint => ({
    version,
    time: 1000 * version,
    tokens: 0,
    totalTokens,
    tokensPerSec: 0,
    trainLoss: null,
    evalLoss: null,
    islandsOnline: 0,
    contributors: 0,
    bytesIn: 0,
    bytesOut: 0,
    bytesInTotal: 0,
    bytesOutTotal: 0,
    stalenessHist: [],
    accepted: 0,
    rejected: {},
    compressionRatio: 0,
    goodput: 1,
    updateNorm: 0,
    outerLr: null,
    innerLr: null,
    tokensByEngine: {},
    tokensPerSecByEngine: {},
  });
  const points = [point(3, 300), point(4, 400), point(6, 600)];
  const changes = [
    { version: 1, time: 1500, changes: { batch: 4 } },
    { version: 5, time: 5500, changes: { outerLr: 0.5, codec: 'int4' } },
  ];

  it('sit at the change’s time, or at the tokens of its version (the newest point at or before it)', () => {
    expect(markersOf(changes, points, 'time').map((m) => m.x)).toEqual([1.5, 5.5]);
    // version 1 is older than every point held: no place on the tokens axis
    expect(markersOf(changes, points, 'tokens')).toEqual([
      { x: 400, version: 5, label: 'v5: outerLr 0.5, codec int4' },
    ]);
    expect(changeText({ version: 7, time: 0, changes: { innerLr: { maxLr: 0.001 } } })).toBe(
      'v7: innerLr {"maxLr":0.001}',
    );
  });

  it('the loss chart’s log axis lives in the URL', () => {
    const v = parseView('#tab=overview&log=1');
    expect(v.log).toBe(true);
    expect(serializeView(v)).toContain('log=1');
    expect(serializeView(parseView('#tab=overview'))).not.toContain('log');
  });
});
