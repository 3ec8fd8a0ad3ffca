// The tree's import graph (bin/structure.ts, drawn in docs/structure.svg by `npm run structure`):
// no import circle between files or rooms, core/ imports nothing above it, the serving process
// (server/) imports neither the island nor the pages, nothing imports the instruments, and the
// single-process server never reaches into server/cluster/ (the Redis roles), whose only
// importers are the CLI's commands.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { circles, drawRooms, importGraph, roomGraph, singleProcessServer } from '../bin/structure.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const g = importGraph(root);
const arrows = [...g.edges].flatMap(([from, tos]) => [...tos].map((to) => [from, to] as const));

describe('the import graph', () => {
  it('reads the tree (an import the reader misses would hide a circle)', () => {
    expect(g.files.length).toBeGreaterThan(100);
    expect(g.edges.get('server/run/run.ts')).toContain('server/outer/offload.ts');
    expect(g.edges.get('server/outer/pool.ts')).toContain('server/outer/worker.ts'); // new URL('./worker.ts', import.meta.url)
    expect(g.edges.get('instruments/commands/serve.ts')).toContain('server/cluster/roles.ts'); // import('../cluster/roles.ts')
  });

  it('has no import circle', () => {
    expect(circles(g)).toEqual([]);
    expect(
      circles({
        files: ['a', 'b', 'c'],
        edges: new Map([
          ['a', new Set(['b'])],
          ['b', new Set(['c'])],
          ['c', new Set(['a'])],
        ]),
      }),
    ).toEqual([['a', 'b', 'c']]);
  });

  it('core/ imports only core/, and core/model/ nothing of core/ outside the spec', () => {
    expect(arrows.filter(([f, t]) => f.startsWith('core/') && !t.startsWith('core/'))).toEqual([]);
    expect(
      arrows.filter(([f, t]) => f.startsWith('core/model/') && !t.startsWith('core/model/') && t !== 'core/random.ts'),
    ).toEqual([]);
  });

  it('server/ is the serving process alone: it imports neither the island, the pages nor the instruments', () => {
    expect(arrows.filter(([f, t]) => f.startsWith('server/') && !/^(core|server|shaders)\//.test(t))).toEqual([]);
  });

  it('nothing imports the instruments but the instruments (bin/atoll.js starts them)', () => {
    expect(g.edges.get('instruments/cli.ts')?.size).toBeGreaterThan(5);
    expect(arrows.filter(([f, t]) => t.startsWith('instruments/') && !f.startsWith('instruments/'))).toEqual([]);
  });

  it("the island runs in a page's worker and in Node: it imports no page", () => {
    expect(
      arrows.filter(([f, t]) => f.startsWith('client/island/') && !/^(core|shaders|client\/island)\//.test(t)),
    ).toEqual([]);
  });

  it('no file of the single-process server (what server/app.ts reaches) imports server/cluster/', () => {
    const server = singleProcessServer(g);
    expect(server).toContain('server/run/run.ts');
    expect(server).toContain('server/outer/pool.ts');
    expect([...server].filter((f) => f.startsWith('server/cluster/'))).toEqual([]);
    expect(arrows.filter(([f, t]) => server.has(f) && t.startsWith('server/cluster/'))).toEqual([]);
  });

  it("its rooms have no circle either: the drawing's arrows all point down", () => {
    expect(drawRooms(g)).not.toContain('stroke="#d00"');
  });

  it("docs/structure.svg is the drawing of this graph's rooms", () => {
    expect(roomGraph(g).get('server/run')).toContain('server/outer');
    const drawn = readFileSync(new URL('../docs/structure.svg', import.meta.url), 'utf8');
    expect(drawn === drawRooms(g), 'docs/structure.svg is stale: run `npm run structure`').toBe(true);
  });
});
