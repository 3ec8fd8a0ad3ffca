// docs/research.md is a researcher's guide, short enough to read in a quarter of an hour, and each study
// it summarises is a file of its own under docs/studies/ that it links. Every relative link and image in
// the docs (README.md and bench/README.md too) reaches a file that exists, and an anchor a heading of it;
// every `npx atoll ...` command in the guide and the studies names a command (and subcommand) the CLI has,
// with flags that command takes, so a study's commands can be run as written.

import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../instruments/cli.ts';
import { ROOT } from './helpers/server.ts';

const read = (f: string) => readFileSync(join(ROOT, f), 'utf8');
const GUIDE = 'docs/research.md';
const STUDIES = readdirSync(join(ROOT, 'docs/studies'))
  .filter((f) => f.endsWith('.md'))
  .map((f) => `docs/studies/${f}`);
/** Every markdown file of the docs, by its path from the root. */
const DOCS = [
  'README.md',
  'bench/README.md',
  ...(readdirSync(join(ROOT, 'docs'), { recursive: true }) as string[])
    .map((f) => `docs/${f.split('\\').join('/')}`)
    .filter((f) => f.endsWith('.md')),
];

/** A markdown file's text with its fenced code blocks taken out, and the blocks themselves. */
function split(md: string): { prose: string; code: string[] } {
  const code: string[] = [];
  const prose = md.replace(/^```[^\n]*\n([\s\S]*?)^```$/gm, (_, body: string) => {
    code.push(body);
    return '';
  });
  return { prose, code };
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
const anchors = (md: string) =>
  new Set([...split(md).prose.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1].replace(/`/g, ''))));

/** Every `npx atoll ...` invocation of a file, as its words up to the first shell operator or comment. */
function atollCommands(md: string): string[][] {
  const { prose, code } = split(md);
  const texts = [
    ...code.flatMap((c) => c.replace(/\\\n/g, ' ').split('\n')),
    ...[...prose.matchAll(/`([^`]+)`/g)].map((m) => m[1].replace(/\n/g, ' ')),
  ];
  return texts.flatMap((t) =>
    [...t.matchAll(/npx atoll ([^&|;#]*)/g)].map((m) => m[1].trim().split(/\s+/).filter(Boolean)),
  );
}

describe('docs/research.md is a guide, and its studies are files of their own', () => {
  const guide = read(GUIDE);

  it('is under 300 lines, and keeps sections 1 to 4 in order', () => {
    expect(guide.trimEnd().split('\n').length).toBeLessThan(300);
    const at = ['## 1.', '## 2.', '## 3.', '## 4.', '## 5.'].map((h) => guide.indexOf(`\n${h} `));
    expect(
      at.every((a, i) => a > 0 && (i === 0 || a > at[i - 1])),
      at.join(),
    ).toBe(true);
  });

  it('links every study, and every study has its command and a table', () => {
    for (const s of ['compare', 'scaling', 'cold-start', 'mixing', 'fleet', 'numerics'])
      expect(STUDIES).toContain(`docs/studies/${s}.md`);
    for (const f of STUDIES) {
      expect(guide, f).toContain(`](${relative('docs', f)})`);
      const md = read(f);
      expect(md.startsWith('# '), f).toBe(true);
      expect(md, f).toMatch(/npx (atoll|vitest) /);
      expect(md, f).toContain('|---|');
    }
  });

  it('every relative link and image in the docs reaches a file, and an anchor a heading of it', () => {
    const broken: string[] = [];
    let seen = 0;
    for (const f of DOCS) {
      for (const m of split(read(f)).prose.matchAll(/!?\[[^\]]*\]\(([^)\s]+)\)/g)) {
        const target = m[1];
        if (/^[a-z]+:/.test(target)) continue;
        seen++;
        const [path, anchor] = target.split('#');
        const file = path ? join(dirname(f), path) : f;
        if (!existsSync(join(ROOT, file))) broken.push(`${f}: ${target}`);
        else if (anchor && file.endsWith('.md') && !anchors(read(file)).has(anchor)) broken.push(`${f}: ${target}`);
      }
    }
    expect(seen).toBeGreaterThan(20);
    expect(broken).toEqual([]);
  });

  it('the link check itself: a heading gives its anchor, a missing file is not there', () => {
    expect(anchors('## Rings: the downlink outlives the groups (live, int8)\n')).toContain(
      'rings-the-downlink-outlives-the-groups-live-int8',
    );
    expect(slug('Live, pages and Node islands (`atoll fleet --mix-group 4`)'.replace(/`/g, ''))).toBe(
      'live-pages-and-node-islands-atoll-fleet---mix-group-4',
    );
    expect(existsSync(join(ROOT, 'docs/studies/missing.md'))).toBe(false);
  });

  it('every `npx atoll` command in the guide and the studies is a command of the CLI, with its flags', () => {
    const program = buildProgram();
    const bad: string[] = [];
    let seen = 0;
    for (const f of [GUIDE, ...STUDIES]) {
      for (const words of atollCommands(read(f))) {
        seen++;
        const cmd = program.commands.find((c: Command) => c.name() === words[0]);
        const sub = cmd?.commands.length ? cmd.commands.find((c: Command) => c.name() === words[1]) : cmd;
        if (!sub) {
          bad.push(`${f}: npx atoll ${words.join(' ')}`);
          continue;
        }
        const flags = new Set(sub.options.map((o) => o.long));
        for (const w of words)
          if (/^--[a-z]/.test(w) && !flags.has(w.split('=')[0])) bad.push(`${f}: ${words[0]} ${w}`);
      }
    }
    expect(seen).toBeGreaterThan(40);
    expect(bad).toEqual([]);
  });
});
