// docs/architecture.md is the design as built, kept true: every file or folder it cites in backticks
// exists, and every name it cites (a class, function, field or `Class.method`) is declared or used
// in the sources, so a rename or a removal that leaves the doc behind fails here.

import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './helpers/server.ts';

const DOC = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8');
const SOURCE_DIRS = ['core', 'client', 'server', 'shaders', 'instruments', 'bin'];
const SOURCE = /\.(ts|wgsl|js|html)$/;

/** Every source file of the tree, by its path from the root. */
function sourceFiles(): string[] {
  return SOURCE_DIRS.flatMap((d) =>
    (readdirSync(join(ROOT, d), { recursive: true }) as string[])
      .map((f) => `${d}/${f.split('\\').join('/')}`)
      .filter((f) => SOURCE.test(f) && !f.includes('node_modules')),
  );
}

/** The doc's backticked spans. */
const spans = [...DOC.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]);
const PATH = /^[\w.-]+(\/[\w.-]+)*\/?$/;
const isPath = (s: string) =>
  PATH.test(s) && !s.startsWith('.') && (s.includes('/') || /\.(ts|wgsl|md|json|js|html|svg)$/.test(s));
/** A name: `windowStep`, `Run`, `OuterOffload.step`, `run.views` (not flags, calls or code). */
const NAME = /^[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*(\(\))?$/;

describe('docs/architecture.md', () => {
  const files = sourceFiles();
  const text = files.map((f) => readFileSync(join(ROOT, f), 'utf8')).join('\n');
  const words = new Set(text.match(/[A-Za-z_$][\w$]*/g));

  it('cites files and folders that exist', () => {
    const paths = spans.filter(isPath);
    expect(paths.length).toBeGreaterThan(40);
    const dirs = new Set(
      files.flatMap((f) =>
        f
          .split('/')
          .slice(0, -1)
          .map((_, i, a) => a.slice(0, i + 1).join('/')),
      ),
    );
    const missing = paths.filter((p) => {
      const clean = p.replace(/\/$/, '');
      if (existsSync(join(ROOT, clean))) return false;
      // a path below a folder the text is in (`mix/`, `wasm/as/kernels.ts`): the end of a tree path
      const tail = (x: string) => x === clean || x.endsWith(`/${clean}`);
      if (files.some(tail) || [...dirs].some(tail)) return false;
      // a file of the run folder (`islands.json`, `deltas/`): a name the code writes
      return !text.includes(`'${clean}'`) && !text.includes(`'${clean}/`);
    });
    expect(missing).toEqual([]);
  });

  it('cites names that the sources declare or use', () => {
    const names = spans.filter((s) => !isPath(s) && NAME.test(s));
    expect(names.length).toBeGreaterThan(40);
    // `Class.member`: the file declaring the class (or interface) has the member; else every part is a word
    const declaring = (name: string) =>
      files.find((f) => new RegExp(`\\b(class|interface) ${name}\\b`).test(readFileSync(join(ROOT, f), 'utf8')));
    const cited = (n: string): boolean => {
      const parts = n.replace(/\(\)$/, '').split('.');
      if (parts.some((p) => !words.has(p))) return false;
      const file = parts.length === 2 && /^[A-Z]/.test(parts[0]) ? declaring(parts[0]) : undefined;
      if (!file) return true;
      const member = new RegExp(
        `^\\s*(static |async |get |set |readonly |private |protected |override )*${parts[1]}\\b\\s*[(<:=?!]`,
        'm',
      );
      return member.test(readFileSync(join(ROOT, file), 'utf8'));
    };
    expect(names.filter((n) => !cited(n))).toEqual([]);
    // the check itself: a member the class does not have is caught
    expect(cited('Coordinator.submit')).toBe(true);
    expect(cited('Coordinator.submitDelta')).toBe(false);
  });
});
