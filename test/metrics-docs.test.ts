// docs/metrics.md is kept true: every flag it names is an option of `atoll serve` or `atoll train`, every scalar
// tag in its tables is one a run writes (pointScalars, and train's), the /api/history fields it lists are the
// schema's, the keep-policy table's flags, config keys and defaults are the run config's, the files and routes it
// cites exist, and README.md and docs/operations.md point to it. docs/research.md's first three sections (a first
// run, a run of your own with its own data, reading the dashboard) name only flags of `atoll serve`, `island`,
// `train` or `data prepare` (and tensorboard's --logdir).

import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { HistoryPointSchema } from '../core/api.ts';
import { KNOBS } from '../core/run-config.ts';
import { buildProgram } from '../instruments/cli.ts';
import { DEFAULT_KEEP } from '../server/run/keep-policy.ts';
import { pointScalars } from '../server/run/scalars.ts';
import { ROOT } from './helpers/server.ts';

const DOC = readFileSync(join(ROOT, 'docs/metrics.md'), 'utf8');
const section = (title: string) => {
  const at = DOC.indexOf(`## ${title}`);
  expect(at, title).toBeGreaterThanOrEqual(0);
  const end = DOC.indexOf('\n## ', at + 3);
  return DOC.slice(at, end < 0 ? undefined : end);
};
const spans = (text: string) => [...text.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]);
const options = (name: string) => {
  const cmd = buildProgram().commands.find((c: Command) => c.name() === name)!;
  return new Set(cmd.options.map((o) => o.long));
};
/** The tags `atoll train` writes (instruments/commands/train.ts, its `scalars.write` calls). */
const TRAIN_TAGS = [
  ...readFileSync(join(ROOT, 'instruments/commands/train.ts'), 'utf8').matchAll(/'([a-z]+\/[a-z_]+)'/g),
].map((m) => m[1]);

describe('docs/metrics.md', () => {
  it('names only flags `atoll serve` or `atoll train` take (tensorboard’s --logdir aside)', () => {
    const serve = options('serve');
    const train = options('train');
    const flags = [...new Set([...DOC.matchAll(/(?<![\w-])--[a-z][a-z-]*/g)].map((m) => m[0]))];
    expect(flags.length).toBeGreaterThan(10);
    for (const f of flags) if (f !== '--logdir') expect(serve.has(f) || train.has(f), f).toBe(true);
    for (const f of ['--metrics', '--eval-every', '--out']) expect(train.has(f), f).toBe(true);
  });

  it('lists every scalar a served run writes, and no tag that is not written', () => {
    const table = section('The scalars');
    const docTags = new Set(spans(table).filter((s) => /^[a-z]+\/[a-z_]+$/.test(s)));
    const served = Object.keys(
      pointScalars({
        ...Object.fromEntries(Object.keys(HistoryPointSchema.properties).map((k) => [k, 0])),
        stalenessHist: [1],
        rejected: {},
        tokensByEngine: {},
        tokensPerSecByEngine: {},
      } as never),
    );
    expect(TRAIN_TAGS.length).toBeGreaterThan(2);
    for (const t of [...served, ...TRAIN_TAGS]) expect(docTags.has(t), t).toBe(true);
    for (const t of docTags) expect([...served, ...TRAIN_TAGS], t).toContain(t);
  });

  it('lists /api/history’s point fields as the schema declares them', () => {
    const api = section('From a live server');
    const fields = Object.keys(HistoryPointSchema.properties);
    for (const f of fields) expect(spans(api), f).toContain(f);
  });

  it('states the keep policy’s flags, config keys and defaults as the run config has them', () => {
    const rows = section('Checkpoints kept')
      .split('\n')
      .filter((l) => l.startsWith('| `--'));
    const defaults: Record<string, string> = {
      'checkpoints.keep': String(DEFAULT_KEEP.keep),
      'checkpoints.every': String(DEFAULT_KEEP.every),
      'checkpoints.best': DEFAULT_KEEP.best ? 'on' : 'off',
    };
    expect(rows).toHaveLength(3);
    for (const row of rows) {
      const [flag, key] = spans(row);
      const [, , , , def] = row.split(/(?<!\\)\|/).map((c) => c.trim());
      const knob = Object.entries(KNOBS).find(([, k]) => k.path === key);
      expect(knob, key).toBeTruthy();
      const kebab = knob![0].replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
      expect(flag.split(' ')[0]).toBe(`--${kebab}`);
      expect(def, key).toBe(defaults[key]);
    }
  });

  it('cites files that exist and a CSV route the API serves; README and operations.md point to it', () => {
    for (const p of spans(DOC).filter((s) => /^(server|core|test|instruments)\/[\w/.-]+\.ts$/.test(s)))
      expect(existsSync(join(ROOT, p)), p).toBe(true);
    expect(readFileSync(join(ROOT, 'server/plugins/api.ts'), 'utf8')).toContain("'/api/scalars.csv'");
    expect(readFileSync(join(ROOT, 'README.md'), 'utf8')).toContain('docs/metrics.md');
    expect(readFileSync(join(ROOT, 'docs/operations.md'), 'utf8')).toContain('docs/metrics.md');
  });
});

describe('docs/research.md: a first run, a run of your own, reading the dashboard', () => {
  it('names only flags `atoll serve`, `island`, `train` or `data prepare` take', () => {
    const md = readFileSync(join(ROOT, 'docs/research.md'), 'utf8');
    const part = md.slice(md.indexOf('## 1.'), md.indexOf('## 4.'));
    const data = buildProgram().commands.find((c: Command) => c.name() === 'data')!;
    const prepare = data.commands.find((c: Command) => c.name() === 'prepare')!;
    const known = [options('serve'), options('island'), options('train'), new Set(prepare.options.map((o) => o.long))];
    const flags = [...new Set([...part.matchAll(/(?<![\w-])--[a-z][a-z-]*/g)].map((m) => m[0]))];
    for (const f of ['--total-tokens', '--title', '--inner-lr', '--weight-decay', '--eval-batches', '--tokenizer'])
      expect(flags, f).toContain(f);
    for (const f of flags)
      if (f !== '--logdir')
        expect(
          known.some((k) => k.has(f)),
          f,
        ).toBe(true);
  });
});
