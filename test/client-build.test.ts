// The pages' build on demand (server/client-build.ts): dist/client is current only when it was built
// from the sources as they are; a changed, added or removed source makes it stale, so `serve
// --build-if-needed` rebuilds it. A throwaway tree here: the repo's own build is left alone (the e2e
// tests serve from it while this runs).

import { mkdirSync, mkdtempSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { clientBuildState, sourceStamp, writeBuildStamp } from '../server/client-build.ts';

const root = mkdtempSync(join(tmpdir(), 'atoll-client-build-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('client build state', () => {
  it('missing, then stale without a stamp, current once stamped, stale after any source change', () => {
    mkdirSync(join(root, 'client'), { recursive: true });
    mkdirSync(join(root, 'core'), { recursive: true });
    writeFileSync(join(root, 'client', 'index.html'), '<!doctype html>');
    writeFileSync(join(root, 'core', 'protocol.ts'), 'export const V = 1;');
    expect(clientBuildState(root)).toBe('missing');

    mkdirSync(join(root, 'dist', 'client'), { recursive: true });
    writeFileSync(join(root, 'dist', 'client', 'index.html'), '<!doctype html>');
    expect(clientBuildState(root), 'a build that wrote no stamp').toBe('stale');
    writeBuildStamp(root);
    expect(clientBuildState(root)).toBe('current');

    // an edit (same size, newer mtime): stale until the next build stamps it
    const f = join(root, 'core', 'protocol.ts');
    const was = statSync(f).mtime;
    utimesSync(f, was, new Date(was.getTime() + 5000));
    expect(clientBuildState(root)).toBe('stale');
    writeBuildStamp(root);
    expect(clientBuildState(root)).toBe('current');

    const before = sourceStamp(root);
    writeFileSync(join(root, 'core', 'new-message.ts'), 'export {};');
    expect(sourceStamp(root)).not.toBe(before);
    expect(clientBuildState(root), 'a source added').toBe('stale');
    writeBuildStamp(root);
    rmSync(join(root, 'core', 'new-message.ts'));
    expect(clientBuildState(root), 'a source removed').toBe('stale');

    rmSync(join(root, 'dist', 'client', 'index.html'));
    expect(clientBuildState(root)).toBe('missing');
  });
});
