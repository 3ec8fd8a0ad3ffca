// The package installs cleanly on the README's minimum Node (≥ 20.19): every locked package's
// `engines.node` accepts 20.19.0 (no EBADENGINE), and every install script is approved or denied
// in package.json's allowScripts (npm ≥ 11 lists unreviewed ones). The entries are by name: the
// lock records no resolved URLs, and npm matches a pinned name@version only against one.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..');
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string; engines?: { node?: string }; hasInstallScript?: boolean }>;
};
const semver = createRequire(import.meta.url)('semver') as { satisfies(v: string, range: string): boolean };

describe('package', () => {
  it('every locked package runs on Node 20.19 (the README\u2019s minimum)', () => {
    expect(pkg.engines.node).toBe('>=20.19');
    const refusing = Object.entries(lock.packages)
      .filter(([, p]) => typeof p.engines?.node === 'string' && !semver.satisfies('20.19.0', p.engines.node))
      .map(([k, p]) => `${k}@${p.version} wants node ${p.engines!.node}`);
    expect(refusing).toEqual([]);
  });

  it('every install script is reviewed in allowScripts', () => {
    const allow = (pkg.allowScripts ?? {}) as Record<string, boolean>;
    const unreviewed = Object.entries(lock.packages)
      .filter(([k, p]) => k && p.hasInstallScript)
      .map(([k, p]) => `${k.slice(k.lastIndexOf('node_modules/') + 'node_modules/'.length)}@${p.version}`)
      .filter((nv) => allow[nv] === undefined && allow[nv.slice(0, nv.lastIndexOf('@'))] === undefined);
    expect(unreviewed).toEqual([]);
  });
});
