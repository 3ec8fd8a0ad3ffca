// The matmul autotuner: at engine start, time the variants of each of the model's
// matmuls on its real shapes (tile sizes and work per thread, with or without workgroup
// memory; vec4 or scalar loads; split-K slices for dW), keep the fastest per shape, and cache the choice by adapter so
// the next start only reads it. Bounded by a time budget, checked before each variant is built and each timing round:
// the variants timed so far are cached too, so every start makes progress (at least one variant) even where one shape's
// variants take longer than the budget (SwiftShader); a shape keeps the default choice until all its variants are
// timed, over one or more starts. No node: imports: the cache is given (localStorage in a browser, a file in Node:
// client/island/engine/tune-cache.ts).

import { type KernelSet, Program } from './webgpu-kernels.ts';
import type { DispatchSpec, Shape } from '../../../shaders/kernel.ts';
import * as op from '../../../shaders/ops.ts';

/** Where choices persist between engine starts. */
export interface TuneCache {
  get(key: string): string | null;
  set(key: string, value: string): void;
}

/** One matmul of the model, as the engine records it. */
export interface MatmulShape {
  pass: 'fwd' | 'dX' | 'dW';
  /** layer dims: inp (rows × C) → out (rows × OC) */
  C: number;
  OC: number;
}

/**
 * A variant: vec4 loads (only where aligned), the tile (absent: op.DEFAULT_TILE) and, for dW, the K slices (1: no
 * split).
 */
export interface MatmulChoice {
  vec4: boolean;
  splitK: number;
  tile?: op.MatmulTile;
}

/**
 * The tiles tried besides the default 64×64 one (4×4 per thread): 8 rows per thread
 * through workgroup memory, and direct tiles of 8 to 32 rows by 4 or 16 columns per thread,
 * which win where barriers and dynamic indexing are dear (SwiftShader, the 15 shapes of
 * bench/results/swiftshader.json's `autotune`: the fastest ×2.8–5.3 over the default, and
 * ×1.6–2.9 over the fastest with 4 columns: 16 columns read each A block once for four).
 */
export const TILE_VARIANTS: op.MatmulTile[] = [
  { bm: 32, bn: 64, tm: 8 },
  { bm: 64, bn: 32, tm: 8, direct: true },
  { bm: 64, bn: 32, tm: 16, direct: true },
  { bm: 128, bn: 32, tm: 16, direct: true },
  { bm: 128, bn: 32, tm: 32, direct: true },
  { bm: 64, bn: 64, tm: 16, tn: 16, direct: true },
  { bm: 128, bn: 64, tm: 32, tn: 16, direct: true },
];

export interface TuneResult {
  /** `${pass}:${C}x${OC}` → the choice */
  choices: Map<string, MatmulChoice>;
  /** per shape: the variants' median ms, and where the choice came from */
  report: Array<{
    shape: string;
    chosen: MatmulChoice;
    from: 'cache' | 'timed' | 'default';
    ms?: Record<string, number>;
  }>;
  ms: number;
}

export const tuneKey = (s: MatmulShape) => `${s.pass}:${s.C}x${s.OC}`;
/** The cache's key of a shape's choice: by adapter and rows (v3: the tile variants with wider columns). */
export const tuneCacheKey = (adapter: string, rows: number, s: MatmulShape) =>
  `atoll.autotune.v3|${adapter}|${rows}|${tuneKey(s)}`;
const tileLabel = (t: op.MatmulTile) =>
  `${t.direct ? 'direct' : 'tile'}${t.bm}x${t.bn}/${t.tm}${t.tn ? `x${t.tn}` : ''}`;
/** e.g. `vec4`, `vec4/direct64x32/16`, `scalar/split4` */
export const choiceLabel = (c: MatmulChoice) =>
  `${c.vec4 ? 'vec4' : 'scalar'}${c.tile ? `/${tileLabel(c.tile)}` : ''}${c.splitK > 1 ? `/split${c.splitK}` : ''}`;

/** Browser cache: localStorage where the page has it (not in a Web Worker). */
export function localStorageCache(): TuneCache | null {
  const ls = (globalThis as { localStorage?: Storage }).localStorage;
  return ls ? { get: (k) => ls.getItem(k), set: (k, v) => ls.setItem(k, v) } : null;
}

const IDB_STORE = 'choices';

/**
 * Browser cache in IndexedDB (a Web Worker has no localStorage): read whole when opened,
 * each new choice written through. Null where IndexedDB is missing or refuses (private
 * modes): the tuner then times again on each start.
 */
export async function indexedDbTuneCache(name = 'atoll-autotune'): Promise<TuneCache | null> {
  const idb = (globalThis as { indexedDB?: IDBFactory }).indexedDB;
  if (!idb) return null;
  const done = <T>(req: IDBRequest<T>) =>
    new Promise<T>((resolve, reject) => {
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error);
    });
  try {
    const open = idb.open(name, 1);
    open.onupgradeneeded = () => open.result.createObjectStore(IDB_STORE);
    const db = await done(open);
    const store = db.transaction(IDB_STORE, 'readonly').objectStore(IDB_STORE);
    const [keys, values] = await Promise.all([done(store.getAllKeys()), done(store.getAll())]);
    const entries = new Map<string, string>();
    keys.forEach((k, i) => {
      if (typeof values[i] === 'string') entries.set(String(k), values[i] as string);
    });
    return {
      get: (k) => entries.get(k) ?? null,
      set(k, v) {
        entries.set(k, v);
        try {
          db.transaction(IDB_STORE, 'readwrite').objectStore(IDB_STORE).put(v, k);
        } catch {
          // closed or over quota: the choice still holds for this engine
        }
      },
    };
  } catch {
    return null;
  }
}

/**
 * The default tile with vec4 and scalar loads, then each tile variant with the loads it can have; × the split-K counts
 * for dW.
 */
function candidates(s: MatmulShape, rows: number): MatmulChoice[] {
  const vec4 = s.C % 4 === 0 && s.OC % 4 === 0;
  const splits = s.pass === 'dW' ? [1, 2, 4, 8].filter((k) => k <= op.maxSplitK(rows)) : [1];
  const kinds: Array<Omit<MatmulChoice, 'splitK'>> = [
    { vec4 },
    ...(vec4 ? [{ vec4: false }] : []),
    ...TILE_VARIANTS.map((tile) => ({ vec4, tile })),
  ];
  return kinds.flatMap((k) => splits.map((splitK) => ({ ...k, splitK })));
}

/** The default where nothing was tuned: vec4 where aligned, the split-K heuristic. */
export const defaultChoice = (s: MatmulShape): MatmulChoice => ({ vec4: s.C % 4 === 0 && s.OC % 4 === 0, splitK: 0 });

/**
 * The tuner's split-K scratch, in elements: as the engine's own (webgpu-plan.ts's dwPartials), sized by
 * the largest dW (C·OC, no bias), so it never outgrows the buffer limit the engine's plan requests.
 */
export function tunerPartials(shapes: MatmulShape[], rows: number): number {
  const maxIn = Math.max(...shapes.map((s) => Math.max(s.C, s.OC)));
  return op.partialsScratch(Math.max(...shapes.map((s) => s.C * s.OC)), rows, maxIn);
}

/**
 * Tunes `shapes` at `rows` = maxBatch·maxT (weights at offset 0, a bias where the pass has
 * one). `budgetMs` bounds the whole run, cached shapes cost nothing.
 */
export async function autotuneMatmuls(
  device: GPUDevice,
  kernels: KernelSet,
  shapes: MatmulShape[],
  rows: number,
  o: { adapter: string; cache: TuneCache | null; budgetMs: number },
): Promise<TuneResult> {
  const t0 = performance.now();
  const result: TuneResult = { choices: new Map(), report: [], ms: 0 };
  const maxIn = Math.max(...shapes.map((s) => Math.max(s.C, s.OC)));
  const maxW = Math.max(...shapes.map((s) => s.C * s.OC + s.OC));
  const S = GPUBufferUsage.STORAGE;
  const partialsSize = tunerPartials(shapes, rows);
  const buf = (n: number) => device.createBuffer({ size: Math.max(16, n * 4), usage: S });
  const a = buf(rows * maxIn),
    b = buf(rows * maxIn),
    w = buf(maxW),
    g = buf(maxW),
    partials = buf(partialsSize);
  const shape: Shape = { B: 1, T: rows };
  // past the budget, once this start has timed something (each start makes progress)
  let timedAny = false;
  const outOfTime = () => timedAny && performance.now() - t0 > o.budgetMs;
  try {
    for (const s of shapes) {
      const key = tuneCacheKey(o.adapter, rows, s);
      const cached = o.cache?.get(key);
      if (cached) {
        const chosen = JSON.parse(cached) as MatmulChoice;
        result.choices.set(tuneKey(s), chosen);
        result.report.push({ shape: tuneKey(s), chosen, from: 'cache' });
        continue;
      }
      if (outOfTime()) {
        result.report.push({ shape: tuneKey(s), chosen: defaultChoice(s), from: 'default' });
        continue;
      }
      const cands = candidates(s, rows);
      const variantKey = (c: MatmulChoice) => `${key}|${choiceLabel(c)}`;
      // variant times cached by earlier starts that ran out of time on this shape
      const ms: Record<string, number> = {};
      for (const c of cands) {
        const t = Number(o.cache?.get(variantKey(c)));
        if (t > 0) ms[choiceLabel(c)] = t;
      }
      const todo: MatmulChoice[] = [];
      const programs: Program[] = [];
      try {
        for (const c of cands) {
          if (ms[choiceLabel(c)] !== undefined) continue;
          if (outOfTime()) break; // the rest on a later start
          todo.push(c);
          timedAny = true;
          const d = {
            C: s.C,
            OC: s.OC,
            wOff: 0,
            biasOff: s.pass === 'dX' ? null : s.C * s.OC,
            vec4: c.vec4,
            dwVec4: c.vec4,
            tile: c.tile,
            dwTile: c.tile,
            partials,
            splitK: c.splitK,
          };
          const specs: DispatchSpec[] =
            s.pass === 'fwd'
              ? [op.matmulForward(b, a, w, d)]
              : s.pass === 'dX'
                ? [op.matmulBackward(b, g, a, b, w, d)[0]]
                : op.matmulBackward(null, g, a, b, w, { ...d, biasOff: null });
          programs.push(await Program.build(kernels, specs, shape, undefined, 'autotune'));
        }
        (await timeInterleaved(device, programs, shape, outOfTime)).forEach((t, i) => {
          if (t === undefined) return; // not run: out of time
          ms[choiceLabel(todo[i])] = t;
          o.cache?.set(variantKey(todo[i]), String(t));
        });
      } finally {
        for (const p of programs) p.destroy();
      }
      if (cands.some((c) => ms[choiceLabel(c)] === undefined)) {
        result.report.push({ shape: tuneKey(s), chosen: defaultChoice(s), from: 'default', ms });
        continue;
      }
      let best = cands[0],
        bestMs = Infinity;
      for (const c of cands) {
        const t = ms[choiceLabel(c)];
        if (t < bestMs) {
          bestMs = t;
          best = c;
        }
      }
      result.choices.set(tuneKey(s), best);
      result.report.push({ shape: tuneKey(s), chosen: best, from: 'timed', ms });
      o.cache?.set(key, JSON.stringify(best));
    }
  } finally {
    for (const x of [a, b, w, g, partials]) x.destroy();
  }
  result.ms = performance.now() - t0;
  return result;
}

/**
 * Each program's median ms over three rounds after a warm-up run, the programs taking
 * turns within a round (load from elsewhere falls on all alike). A program over twice as
 * slow as the fastest in the warm-up is not timed again (its warm-up time stands). Once
 * `outOfTime`, the rounds run so far stand, and programs without a warm-up run (the first
 * always has one) get undefined.
 */
async function timeInterleaved(
  device: GPUDevice,
  programs: Program[],
  shape: Shape,
  outOfTime: () => boolean,
): Promise<Array<number | undefined>> {
  const warm: number[] = [];
  const times: number[][] = programs.map(() => []);
  for (let round = 0; round < 4; round++) {
    if (round > 0 && outOfTime()) break;
    for (let i = 0; i < programs.length; i++) {
      if (round === 0 && i > 0 && outOfTime()) break;
      if (round > 0 && (i >= warm.length || warm[i] > 2 * Math.min(...warm))) continue;
      programs[i].setShape(shape);
      const t = performance.now();
      const enc = device.createCommandEncoder();
      const pass = enc.beginComputePass();
      programs[i].encode(pass, shape);
      pass.end();
      device.queue.submit([enc.finish()]);
      await device.queue.onSubmittedWorkDone();
      (round > 0 ? times[i] : warm).push(performance.now() - t);
    }
  }
  return times.map((t, i) => (t.length ? t.sort((x, y) => x - y)[Math.floor(t.length / 2)] : warm[i]));
}

/** The model's matmuls (layer dims), each with its three passes; the head's at its chunk width `Vc` (headChunk). */
export function modelMatmuls(C: number, Vc: number): MatmulShape[] {
  const layers: Array<[number, number]> = [
    [C, 3 * C],
    [C, C],
    [C, 4 * C],
    [4 * C, C],
    [C, Vc],
  ];
  return layers.flatMap(([c, oc]) => (['fwd', 'dX', 'dW'] as const).map((pass) => ({ pass, C: c, OC: oc })));
}

/** The dims to add for this layer under `choices`: `fwd` to matmulForward, `bwd` to matmulBackward. */
export function tunedDims(choices: Map<string, MatmulChoice>, C: number, OC: number) {
  const get = (pass: MatmulShape['pass']) => choices.get(tuneKey({ pass, C, OC }));
  return {
    fwd: { vec4: get('fwd')?.vec4, tile: get('fwd')?.tile },
    bwd: {
      vec4: get('dX')?.vec4,
      tile: get('dX')?.tile,
      dwVec4: get('dW')?.vec4,
      dwTile: get('dW')?.tile,
      splitK: get('dW')?.splitK,
    },
  };
}
