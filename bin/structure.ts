// The import graph of the tree, and its drawing (`npm run structure` writes docs/structure.svg).
// Files are the TypeScript sources outside test/; an arrow is an import, export-from,
// dynamic import() or worker `new URL('./x.ts', import.meta.url)` between two of them (type-only
// imports too: a reader follows them as well). Rooms are folders: core/<dir>, client/<dir>,
// server/<dir>, instruments/<dir>, and the loose files of core/, server/, instruments/, shaders/ and bin/.

import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface ImportGraph {
  files: string[];
  /** file → the files it imports */
  edges: Map<string, Set<string>>;
}

/** The source folders (test/ is left out: tests import whatever they test). */
const ROOTS = ['core', 'shaders', 'client', 'server', 'instruments', 'bin'];

/** Top folders whose subfolders are rooms, and those whose loose files are rooms of their own. */
const NESTED = ['core', 'client', 'server', 'instruments'];
const LOOSE = ['core', 'server', 'instruments'];

const SPEC = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+|new URL\(\s*)['"](\.{1,2}\/[^'"?]+\.ts)['"]/g;

/** The import graph of the .ts files under `root`'s source folders and at its top. */
export function importGraph(root: string): ImportGraph {
  const files = ROOTS.flatMap((dir) =>
    (readdirSync(join(root, dir), { recursive: true }) as string[]).map((f) => `${dir}/${f.split(sep).join('/')}`),
  )
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && !f.includes('node_modules/'))
    .concat(readdirSync(root).filter((f) => f.endsWith('.ts')))
    .sort();
  const known = new Set(files);
  const edges = new Map<string, Set<string>>();
  for (const f of files) {
    const to = new Set<string>();
    const src = readFileSync(join(root, f), 'utf8').replace(/^\s*\/\/.*$/gm, '');
    for (const m of src.matchAll(SPEC)) {
      const target = normalize(join(dirname(f), m[1]));
      if (known.has(target) && target !== f) to.add(target);
    }
    edges.set(f, to);
  }
  return { files, edges };
}

/** Every import circle: the strongly connected components of more than one file (Tarjan). */
export function circles(g: ImportGraph): string[][] {
  let index = 0;
  const idx = new Map<string, number>(),
    low = new Map<string, number>(),
    on = new Set<string>(),
    stack: string[] = [];
  const out: string[][] = [];
  const visit = (v: string) => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    on.add(v);
    for (const w of g.edges.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1) out.push(scc.sort());
    }
  };
  for (const f of g.files) if (!idx.has(f)) visit(f);
  return out;
}

/**
 * The room of a file: its folder below core/, client/, server/ or instruments/ (core/coord,
 * server/outer, …), the file itself for the loose files of core/, server/ and instruments/ (they sit
 * at every height: result.ts at the bottom, cli.ts at the top), else its top folder (shaders, bin).
 */
export function roomOf(file: string): string {
  const parts = file.split('/');
  if (parts.length > 2 && NESTED.includes(parts[0])) return `${parts[0]}/${parts[1]}`;
  if (parts.length === 2 && LOOSE.includes(parts[0])) return file;
  return parts[0];
}

/** The single-process server: every file `createServer` (server/app.ts) reaches. */
export function singleProcessServer(g: ImportGraph): Set<string> {
  const seen = new Set<string>();
  const walk = (f: string) => {
    if (seen.has(f)) return;
    seen.add(f);
    for (const t of g.edges.get(f) ?? []) walk(t);
  };
  walk('server/app.ts');
  return new Set([...seen].filter((f) => f.startsWith('server/')));
}

/** Room → the rooms it imports. */
export function roomGraph(g: ImportGraph): Map<string, Set<string>> {
  const rooms = new Map<string, Set<string>>();
  for (const [f, to] of g.edges) {
    const r = roomOf(f);
    const set = rooms.get(r) ?? new Set<string>();
    rooms.set(r, set);
    for (const t of to) if (roomOf(t) !== r) set.add(roomOf(t));
  }
  return rooms;
}

/** The rooms in rows, importers above what they import (longest path to a room importing nothing). */
function layers(rooms: Map<string, Set<string>>): string[][] {
  const depth = new Map<string, number>();
  const seen = new Set<string>();
  const d = (r: string): number => {
    if (depth.has(r)) return depth.get(r)!;
    if (seen.has(r)) return 0; // a room circle: drawn, in red
    seen.add(r);
    const v = Math.max(-1, ...[...(rooms.get(r) ?? [])].map(d)) + 1;
    depth.set(r, v);
    return v;
  };
  for (const r of rooms.keys()) d(r);
  const rows: string[][] = [];
  for (const [r, v] of depth) (rows[v] ??= []).push(r);
  const ordered = rows.map((row) => (row ?? []).sort()).reverse();
  // fewer crossings: each row (from the second) ordered by the mean place of its importers above
  const place = new Map<string, number>();
  ordered.forEach((row, i) => {
    if (i > 0) {
      const at = (r: string) => {
        const xs = [...rooms]
          .filter(([, tos]) => tos.has(r))
          .map(([from]) => place.get(from))
          .filter((x): x is number => x !== undefined);
        return xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0.5;
      };
      row.sort((a, b) => at(a) - at(b) || (a < b ? -1 : 1));
    }
    row.forEach((r, j) => place.set(r, (j + 0.5) / row.length));
  });
  return ordered;
}

/**
 * docs/structure.svg: the rooms and their arrows; an arrow up a row (a room circle) or from the server into
 * server/cluster is red.
 */
export function drawRooms(g: ImportGraph): string {
  const rooms = roomGraph(g);
  const rows = layers(rooms);
  const W = 150,
    H = 26,
    GX = 12,
    GY = 60,
    M = 20;
  const width = Math.max(...rows.map((r) => r.length)) * (W + GX) + 2 * M;
  const pos = new Map<string, { x: number; y: number; row: number }>();
  rows.forEach((row, i) => {
    const x0 = (width - row.length * (W + GX) + GX) / 2;
    row.forEach((r, j) => pos.set(r, { x: x0 + j * (W + GX), y: M + 40 + i * (H + GY) + (j % 2) * 16, row: i }));
  });
  const height = M + 56 + rows.length * (H + GY);
  const serverRooms = new Set([...singleProcessServer(g)].map(roomOf));
  const lines: string[] = [];
  for (const [from, tos] of [...rooms].sort()) {
    for (const to of [...tos].sort()) {
      const a = pos.get(from)!,
        b = pos.get(to)!;
      const bad = b.row <= a.row || (to === 'server/cluster' && serverRooms.has(from));
      lines.push(
        `<line x1="${a.x + W / 2}" y1="${a.y + H}" x2="${b.x + W / 2}" y2="${b.y}" ` +
          `stroke="${bad ? '#d00' : '#8895a7'}" stroke-width="${bad ? 2 : 1}" ` +
          `marker-end="url(#${bad ? 'bad' : 'arrow'})"/>`,
      );
    }
  }
  const fill = (r: string) =>
    r.startsWith('core')
      ? '#e8f1fb'
      : r.startsWith('server')
        ? '#fbf1e6'
        : r.startsWith('client') || r === 'shaders'
          ? '#eaf6ea'
          : '#f2f2f2';
  const boxes = [...pos].map(
    ([r, p]) =>
      `<g><rect x="${p.x}" y="${p.y}" width="${W}" height="${H}" rx="5" fill="${fill(r)}" stroke="#445"/>` +
      `<text x="${p.x + W / 2}" y="${p.y + 19}" text-anchor="middle">` +
      `${r.replace(/^(core|server|instruments)\/(?=[\w-]+\.ts$)/, '')}</text></g>`,
  );
  const c = circles(g).length;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" ` +
      `font-size="12">`,
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" ' +
      'orient="auto"><path d="M0,0L10,5L0,10z" fill="#8895a7"/></marker>',
    '<marker id="bad" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path ' +
      'd="M0,0L10,5L0,10z" fill="#d00"/></marker></defs>',
    `<text x="${M}" y="${M + 8}" font-size="13">Atoll's rooms and their imports (npm run structure): ${c} import ` +
      `circle${c === 1 ? '' : 's'} between files; an arrow up a row (a circle of rooms) or from the single-process ` +
      `server into server/cluster would be red</text>`,
    `<text x="${M}" y="${M + 26}" font-size="11" fill="#555">blue: core/ · green: client/ and shaders/ · orange: ` +
      `server/ · grey: instruments/, bin/ and the root's config files (a loose file of core/, server/ or ` +
      `instruments/ is its own box)</text>`,
    ...lines,
    ...boxes,
    '</svg>',
    '',
  ].join('\n');
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const root = fileURLToPath(new URL('..', import.meta.url));
  const g = importGraph(root);
  writeFileSync(join(root, 'docs/structure.svg'), drawRooms(g));
  const cs = circles(g);
  console.log(
    `docs/structure.svg: ${g.files.length} files, ${roomGraph(g).size} rooms, ${cs.length} import ` +
      `circle(s)${cs.map((c) => `\n  ${c.join(' ↔ ')}`).join('')}`,
  );
}
