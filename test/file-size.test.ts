// Small files with short lines (issue 34): every source file the repository tracks outside test/ (TypeScript,
// JavaScript, AssemblyScript, WGSL, CSS, shell) is at most 500 lines and no line is over 120 characters;
// the run (server/run/run.ts) and the coordinator's facade (core/coord/coordinator.ts) at most 300.
// Not held to it: the generated kernels.gen.ts (base64 lines) and the two HTML pages, whose prose the browser
// reflows (their text is read in the page, not in an editor).

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from './helpers/server.ts';

const SOURCE = /\.(ts|js|mjs|wgsl|css|sh)$/;
const files = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' })
  .split('\n')
  .filter((f) => SOURCE.test(f) && !f.startsWith('test/') && !f.endsWith('.gen.ts'));

describe('file and line sizes outside test/', () => {
  it('reads the tree', () => {
    expect(files.length).toBeGreaterThan(200);
    expect(files).toContain('shaders/matmul.wgsl');
    expect(files).toContain('client/volunteer/style.css');
  });

  it('every file is at most 500 lines', () => {
    const long = files
      .map((f) => [f, readFileSync(join(ROOT, f), 'utf8').split('\n').length] as const)
      .filter(([, n]) => n > 501); // a final newline ends the last line
    expect(long).toEqual([]);
  });

  it('Run and Coordinator are each at most 300 lines', () => {
    const sizes = ['server/run/run.ts', 'core/coord/coordinator.ts'].map(
      (f) => [f, readFileSync(join(ROOT, f), 'utf8').split('\n').length - 1] as const,
    );
    expect(sizes.filter(([, n]) => n > 300)).toEqual([]);
  });

  it('no line is over 120 characters', () => {
    const wide: string[] = [];
    for (const f of files)
      readFileSync(join(ROOT, f), 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if ([...line].length > 120) wide.push(`${f}:${i + 1} (${[...line].length})`);
        });
    expect(wide).toEqual([]);
  });
});
