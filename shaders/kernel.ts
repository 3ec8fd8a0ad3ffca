// What a kernel module (shaders/<op>.ts, beside its <op>.wgsl) is made of, read from the
// WGSL itself: the `struct Params` layout (field → byte offsets and type), each entry
// point's bindings (the module-scope variables it reaches, through the functions it calls:
// what `layout: 'auto'` binds), and the source as the device compiles it (the prelude in
// front, templates expanded, every {{NAME}} filled or an error naming the shader).
// Pure: no device calls; client/island/engine/webgpu-kernels.ts compiles and dispatches.

import preludeSrc from './prelude.wgsl?raw';
import subgroupsSrc from './subgroups.wgsl?raw';

/** Values written into a shader's {{NAME}} placeholders. */
export type Defines = Record<string, number | string>;

/**
 * Expands each `// @repeat NAME = "x", "y"` … `// @end` block once per value, with
 * {{NAME}} replaced by it (gpu.cpp's one-template-many-variants, in a few lines).
 */
export function expandTemplate(src: string): string {
  return src.replace(
    /^\/\/ @repeat (\w+) = (.*)\n([\s\S]*?)^\/\/ @end\n/gm,
    (_, name: string, values: string, body: string) =>
      [...values.matchAll(/"([^"]*)"/g)].map(([, v]) => body.replaceAll(`{{${name}}}`, v)).join('\n'),
  );
}

/**
 * {{NAME}}, or {{NAME=default}} where the shader has one; a placeholder with neither a value nor a default throws,
 * naming `file`.
 */
function fill(text: string, d: Defines, file: string): string {
  return text.replace(/\{\{(\w+)(?:=(\w+))?\}\}/g, (_, k: string, dflt?: string) => {
    if (k in d) return String(d[k]);
    if (dflt !== undefined) return dflt;
    throw new Error(`${file}: placeholder {{${k}}} left unfilled`);
  });
}

/** The placeholders of a shader that have no default (each dispatch of it must give them). */
export function requiredDefines(src: string): string[] {
  return [...new Set([...expandTemplate(src).matchAll(/\{\{(\w+)\}\}/g)].map((m) => m[1]))];
}

/**
 * A shader as the device sees it: the shared prelude, then the file with its templates
 * expanded and each {{NAME}} of `defines` written in (e.g. attention's head size, the direct
 * matmul's tile). With `subgroups` the prelude's reductions use subgroup operations.
 */
export function withPrelude(src: string, defines: Defines = {}, subgroups = false, file = 'shader'): string {
  const prelude = fill(preludeSrc, { SUBGROUPS: String(subgroups) }, 'prelude.wgsl');
  const sg = subgroups
    ? subgroupsSrc
    : 'fn sg_reduce2(x: vec2<f32>, lid: u32, n: u32, is_max: bool) -> vec2<f32> { return x; }\nfn sg_seg_sum2(x: ' +
      'vec2<f32>, lid: u32, seg: u32) -> vec2<f32> { return x; }\n';
  // the define ENABLE names an extension the source needs (half.wgsl's native form: f16); directives go first
  const enables = [subgroups ? 'subgroups' : '', defines.ENABLE ? String(defines.ENABLE) : '']
    .filter(Boolean)
    .map((e) => `enable ${e};\n`)
    .join('');
  return `${enables}${prelude}\n${sg}\n${fill(expandTemplate(src), defines, file)}`;
}

/**
 * Every {{NAME=default}} as its default (what the bindings are read from: a define may pick a function, never a
 * binding).
 */
const withDefaults = (src: string) => src.replace(/\{\{\w+=(\w+)\}\}/g, '$1');

// ---------------------------------------------------------------- reading the WGSL

/** A field of `struct Params`: where its scalars go, and as what. */
export interface ParamField {
  type: 'u32' | 'i32' | 'f32';
  /** byte offset of each scalar (one for u32/f32, 4 per vec4, n × 4 for array<vec4, n>) */
  offsets: number[];
}

export interface ParamsLayout {
  fields: Map<string, ParamField>;
  /** the struct's size in bytes (WGSL layout rules) */
  bytes: number;
}

export interface EntryBindings {
  /** the storage bindings the entry reaches, ascending */
  bindings: number[];
  /** reaches the per-step uniform (`st: Step`, binding 8) */
  step: boolean;
}

interface WgslType {
  scalar: ParamField['type'];
  size: number;
  align: number;
  offsets: number[];
}

function wgslType(t: string, where: string): WgslType {
  t = t.replace(/\s+/g, '');
  if (t === 'u32' || t === 'i32' || t === 'f32') return { scalar: t, size: 4, align: 4, offsets: [0] };
  let m = /^vec([234])<(u32|i32|f32)>$/.exec(t) ?? /^vec([234])([uif])$/.exec(t);
  if (m) {
    const n = Number(m[1]);
    const scalar = (m[2].length === 1 ? `${m[2]}32` : m[2]) as ParamField['type'];
    return { scalar, size: 4 * n, align: n === 2 ? 8 : 16, offsets: Array.from({ length: n }, (_, i) => 4 * i) };
  }
  m = /^array<(.+),(\d+)u?>$/.exec(t);
  if (m) {
    const el = wgslType(m[1], where);
    const stride = Math.ceil(el.size / el.align) * el.align;
    const n = Number(m[2]);
    return {
      scalar: el.scalar,
      size: stride * n,
      align: el.align,
      offsets: Array.from({ length: n }, (_, i) => el.offsets.map((o) => i * stride + o)).flat(),
    };
  }
  throw new Error(`${where}: Params field type ${t} is not one a uniform of the kernels uses`);
}

/** The `struct Params` of a shader: each field's offsets and type, by the WGSL layout rules. */
export function paramsLayout(src: string, file: string): ParamsLayout {
  const body = /struct Params\s*\{([^}]*)\}/.exec(stripComments(src))?.[1];
  if (body === undefined) throw new Error(`${file}: no struct Params`);
  const fields = new Map<string, ParamField>();
  let at = 0,
    align = 4;
  for (const decl of splitTopLevel(body)) {
    const m = /^(\w+)\s*:\s*(.+)$/s.exec(decl.trim());
    if (!m) throw new Error(`${file}: cannot read Params field "${decl.trim()}"`);
    const t = wgslType(m[2], `${file} Params.${m[1]}`);
    at = Math.ceil(at / t.align) * t.align;
    fields.set(m[1], { type: t.scalar, offsets: t.offsets.map((o) => at + o) });
    at += t.size;
    align = Math.max(align, t.align);
  }
  return { fields, bytes: Math.ceil(at / align) * align };
}

/** The comma-separated parts of `s` outside <…>, empty parts dropped. */
function splitTopLevel(s: string): string[] {
  const parts: string[] = [];
  let depth = 0,
    from = 0;
  for (let i = 0; i <= s.length; i++) {
    const c = s[i];
    if (c === '<') depth++;
    else if (c === '>') depth--;
    else if ((c === ',' && depth === 0) || i === s.length) {
      if (s.slice(from, i).trim()) parts.push(s.slice(from, i));
      from = i + 1;
    }
  }
  return parts;
}

/** Every `@group(0) @binding(n) var<…> name` of a shader: name → binding, and whether it is storage. */
function bindingVars(code: string): Map<string, { binding: number; storage: boolean }> {
  const vars = new Map<string, { binding: number; storage: boolean }>();
  for (const m of code.matchAll(/@group\(0\)\s*@binding\((\d+)\)\s*var<(\w+)[^>]*>\s*(\w+)\s*:/g))
    vars.set(m[3], { binding: Number(m[1]), storage: m[2] === 'storage' });
  return vars;
}

/** Storage variable name → binding (aliases of one binding each have their line). */
export function storageVars(src: string): Map<string, number> {
  return new Map(
    [...bindingVars(stripComments(expandTemplate(src)))].filter(([, v]) => v.storage).map(([k, v]) => [k, v.binding]),
  );
}

const stripComments = (src: string) => src.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/[^\n]*/g, '');

/** From `i`, the index just past the brace block that starts at the next `{`. */
function blockEnd(src: string, i: number): number {
  let depth = 0;
  for (let j = src.indexOf('{', i); j < src.length; j++) {
    if (src[j] === '{') depth++;
    else if (src[j] === '}' && --depth === 0) return j + 1;
  }
  return src.length;
}

/**
 * Each entry point's bindings: the module-scope variables its body reaches, directly or
 * through the functions it calls (member names after `.` are not references).
 */
export function entryBindings(src: string): Map<string, EntryBindings> {
  const code = withDefaults(stripComments(expandTemplate(src)));
  const vars = bindingVars(code);
  const bodies = new Map<string, string>();
  const entries: string[] = [];
  for (const m of code.matchAll(/(@compute[^\n]*\n\s*)?fn\s+(\w+)\s*\(/g)) {
    bodies.set(m[2], code.slice(m.index + m[0].length, blockEnd(code, m.index)));
    if (m[1]) entries.push(m[2]);
  }
  const out = new Map<string, EntryBindings>();
  for (const entry of entries) {
    const seen = new Set<string>([entry]);
    const reached = new Set<string>();
    const walk = (fn: string) => {
      for (const [, name] of (bodies.get(fn) ?? '').matchAll(/(?<![.\w])([A-Za-z_]\w*)/g)) {
        if (vars.has(name)) reached.add(name);
        else if (bodies.has(name) && !seen.has(name)) {
          seen.add(name);
          walk(name);
        }
      }
    };
    walk(entry);
    const bindings = [...new Set([...reached].filter((n) => vars.get(n)!.storage).map((n) => vars.get(n)!.binding))];
    out.set(entry, { bindings: bindings.sort((a, b) => a - b), step: reached.has('st') });
  }
  return out;
}

// ---------------------------------------------------------------- kernels and dispatches

/** A CPU function (core/model/ops.ts) an entry point is tested against; a list where the entry fuses several. */
export type CpuTwin = ((...args: never[]) => unknown) | ReadonlyArray<(...args: never[]) => unknown>;

/**
 * One .wgsl file as the engine uses it: its source, Params layout, entry points with their bindings, and their CPU
 * twins.
 */
export interface Kernel<E extends string = string> {
  /** `matmul.wgsl` */
  readonly file: string;
  readonly src: string;
  /** the source the device compiles */
  source(defines?: Defines, subgroups?: boolean): string;
  readonly params: ParamsLayout;
  readonly entries: ReadonlyMap<E, EntryBindings>;
  /** storage variable name → binding */
  readonly storage: ReadonlyMap<string, number>;
  readonly twins: Readonly<Record<E, CpuTwin>>;
  /** placeholders every dispatch must fill (those without a default) */
  readonly requiredDefines: readonly string[];
  /** a dispatch of one of this kernel's entry points */
  dispatch(d: Omit<DispatchSpec, 'kernel' | 'entry'> & { entry: E }): DispatchSpec;
}

/**
 * The kernel of `<name>.wgsl`. `twins` names the CPU twin of every entry point; an entry
 * point without one, or a twin for an entry the file lacks, throws here (at import).
 */
export function defineKernel<E extends string>(name: string, src: string, twins: Record<E, CpuTwin>): Kernel<E> {
  const file = `${name}.wgsl`;
  const all = entryBindings(src);
  const missing = [...all.keys()].filter((e) => !(e in twins));
  const extra = Object.keys(twins).filter((e) => !all.has(e));
  if (missing.length || extra.length)
    throw new Error(`${file}: entry points without a CPU twin: [${missing}]; twins of no entry point: [${extra}]`);
  const kernel: Kernel<E> = {
    file,
    src,
    params: paramsLayout(src, file),
    entries: all as Map<E, EntryBindings>,
    storage: storageVars(src),
    twins,
    requiredDefines: requiredDefines(src),
    source: (defines, subgroups) => withPrelude(src, defines, subgroups, file),
    dispatch: (d) => ({ ...d, kernel }),
  };
  return kernel;
}

/** A Params value: a number for a scalar field (written as the field's type), numbers for a vector or array. */
export type ParamValues = Record<string, number | readonly number[]>;

export interface Shape {
  B: number;
  T: number;
  /** Rows the loss is the mean over: the whole batch's B·T where this shape is one of its micro-batches, else B·T. */
  lossRows?: number;
}

export interface DispatchSpec {
  kernel: Kernel;
  entry: string;
  /** Written into the shader's {{NAME}} placeholders (one module and pipeline per distinct set). */
  defines?: Defines;
  /**
   * Storage buffers by the WGSL variable they bind to (any alias of the binding; offsets go in Params): each bound
   * whole, or as its window where `windows` names the variable.
   */
  buffers: Record<string, GPUBuffer>;
  /**
   * Binding windows: for a variable named here only the elements it touches are bound (the window's start aligned
   * down to STORAGE_ALIGN), and its `fields` of Params (element offsets into the buffer) are rebased to the window.
   */
  windows?: Record<string, Window>;
  /** The entry's Params by field name; fields left out are 0. */
  params: (s: Shape) => ParamValues;
  grid: (s: Shape) => [number, number, number];
}

/** The elements [lo, hi) of a buffer one dispatch touches, `elem` bytes each; `fields` are offsets into it. */
export interface Window {
  lo: number;
  hi: number;
  elem: number;
  fields?: readonly string[];
  /** the window must start exactly at lo (the kernel indexes it from 0): lo·elem a multiple of STORAGE_ALIGN */
  exact?: boolean;
  /** the element of the flat array the bound buffer starts at (a part of a split buffer, resolveParts; default 0) */
  base?: number;
}

/** minStorageBufferOffsetAlignment's guaranteed maximum: where a window may start. */
export const STORAGE_ALIGN = 256;

/** A window's bytes in a buffer of `size` bytes: [offset, offset + size), from lo aligned down to hi in vec4s. */
export function windowRange(w: Window, size = Infinity, where = 'window'): { offset: number; size: number } {
  const base = w.base ?? 0;
  const lo = (w.lo - base) * w.elem;
  const offset = Math.floor(lo / STORAGE_ALIGN) * STORAGE_ALIGN;
  if (w.exact && offset !== lo) throw new Error(`${where}: window at byte ${lo} is not ${STORAGE_ALIGN}-aligned`);
  if (offset % w.elem !== 0) throw new Error(`${where}: window offset ${offset} is not a whole element`);
  const end = Math.min(size, Math.ceil(((w.hi - base) * w.elem) / 16) * 16);
  return { offset, size: Math.max(16, end - offset) };
}

/** The union of element ranges [lo, hi) as one window (the ranges need not touch). */
export function span(ranges: Array<[number, number]>, elem: number, fields: readonly string[]): Window {
  return {
    lo: Math.min(...ranges.map((r) => r[0])),
    hi: Math.max(...ranges.map((r) => r[1])),
    elem,
    fields,
  };
}

/** Elements per piece of a flat buffer: a multiple of 128 (f32 and half windows start STORAGE_ALIGN-aligned). */
export const PIECE_QUANTUM = 128;

/**
 * [lo, hi) pieces of a flat array held in `parts` (its buffers' element ranges: [[0, N]] for one buffer) whose f32
 * windows fit `maxBytes`, none across a part's end (a part in one piece where it fits): what the whole-θ ops (AdamW,
 * the grad norm, Δ, the f16 pack) dispatch once each.
 */
export function flatPieces(
  parts: ReadonlyArray<readonly [number, number]>,
  maxBytes = Infinity,
): Array<[number, number]> {
  const per = Math.max(1, Math.floor(maxBytes / 4 / PIECE_QUANTUM)) * PIECE_QUANTUM;
  return parts.flatMap(([lo, hi]): Array<[number, number]> => {
    if (Math.ceil(((hi - lo) * 4) / 16) * 16 <= maxBytes) return [[lo, hi]];
    const n = Math.ceil((hi - lo) / per);
    return Array.from({ length: n }, (_, i): [number, number] => [lo + i * per, Math.min(hi, lo + (i + 1) * per)]);
  });
}

/** The exact window of a piece [lo, hi) of a flat buffer of `elem`-byte elements (the kernel indexes it from 0). */
export const pieceWindow = (piece: [number, number], elem: number): Window => ({
  lo: piece[0],
  hi: piece[1],
  elem,
  exact: true,
});

/**
 * A flat op's piece [lo, hi) of N elements (all N without one): its length, and `windows` binding each named variable
 * (4-byte f32s or 2-byte halves) to the piece's exact window, or nothing without a piece (whole buffers).
 */
export function flatPiece(N: number, piece?: [number, number]) {
  const p = piece ?? [0, N];
  return {
    n: p[1] - p[0],
    windows: (vars: Record<string, 2 | 4>): Pick<DispatchSpec, 'windows'> =>
      piece ? { windows: Object.fromEntries(Object.entries(vars).map(([k, e]) => [k, pieceWindow(p, e)])) } : {},
  };
}

/** One GPUBuffer of a flat array split over several: the array's elements [lo, hi), from the buffer's byte 0. */
export interface FlatPart {
  lo: number;
  hi: number;
  buffer: GPUBuffer;
}

/**
 * A flat array held in several GPUBuffers, as the dispatches name it: a stand-in never bound itself (it has no device
 * buffer); `resolveParts` binds each window in the part that holds it.
 */
export function splitBuffer(label: string, parts: FlatPart[]): GPUBuffer {
  const size = parts.reduce((n, p) => n + p.buffer.size, 0);
  return { label, size, parts } as unknown as GPUBuffer;
}

/** The parts of a splitBuffer stand-in (undefined: a GPUBuffer of its own). */
export const partsOf = (b: GPUBuffer): readonly FlatPart[] | undefined => (b as { parts?: FlatPart[] }).parts;

/**
 * The spec with each split buffer it names replaced by the part that holds that variable's window (the window's
 * `base` the part's first element); a split buffer bound without a window, or a window across parts, throws.
 */
export function resolveParts(spec: DispatchSpec): DispatchSpec {
  const split = Object.entries(spec.buffers).filter(([, b]) => partsOf(b));
  if (!split.length) return spec;
  const buffers = { ...spec.buffers },
    windows = { ...spec.windows };
  for (const [name, b] of split) {
    const w = spec.windows?.[name],
      where = `${spec.kernel.file} ${spec.entry}: ${name}`;
    if (!w) throw new Error(`${where} binds all of ${b.label}, which is split over several buffers`);
    const part = partsOf(b)!.find((p) => p.lo <= w.lo && w.hi <= p.hi);
    if (!part) throw new Error(`${where}'s window [${w.lo}, ${w.hi}) crosses a buffer of ${b.label}`);
    buffers[name] = part.buffer;
    windows[name] = { ...w, base: part.lo };
  }
  return { ...spec, buffers, windows };
}

/** Each storage binding of the spec with its bytes: its window, or the whole buffer. */
export function bindWindows(spec: DispatchSpec): Array<[number, { buffer: GPUBuffer; offset: number; size: number }]> {
  const where = `${spec.kernel.file} ${spec.entry}`;
  bindStorage(spec); // checks the bindings
  const out: Array<[number, { buffer: GPUBuffer; offset: number; size: number }]> = [];
  for (const [name, buffer] of Object.entries(spec.buffers)) {
    const w = spec.windows?.[name];
    const range = w ? windowRange(w, buffer.size, where) : { offset: 0, size: buffer.size };
    out.push([spec.kernel.storage.get(name)!, { buffer, ...range }]);
  }
  return out.sort((a, b) => a[0] - b[0]);
}

/** The spec's Params for a shape, every windowed offset field rebased to its window. */
export function windowedParams(spec: DispatchSpec, s: Shape): ParamValues {
  const v = spec.params(s);
  if (!spec.windows) return v;
  const out: Record<string, number | readonly number[]> = { ...v };
  for (const w of Object.values(spec.windows)) {
    const shift = (w.base ?? 0) + windowRange(w).offset / w.elem;
    for (const f of w.fields ?? []) {
      const x = out[f];
      if (typeof x !== 'number') throw new Error(`${spec.kernel.file} ${spec.entry}: window field ${f} is not set`);
      if (x < shift) throw new Error(`${spec.kernel.file} ${spec.entry}: ${f} = ${x} lies before its window`);
      out[f] = x - shift;
    }
  }
  return out;
}

/** The spec's buffers as [binding, buffer], checked against the bindings its entry point reaches. */
export function bindStorage(spec: DispatchSpec): Array<[number, GPUBuffer]> {
  const where = `${spec.kernel.file} ${spec.entry}`;
  const info = spec.kernel.entries.get(spec.entry);
  if (!info) throw new Error(`${where}: no such entry point`);
  const out: Array<[number, GPUBuffer]> = [];
  for (const [name, buf] of Object.entries(spec.buffers)) {
    const binding = spec.kernel.storage.get(name);
    if (binding === undefined) throw new Error(`${where}: ${spec.kernel.file} has no storage variable ${name}`);
    if (out.some(([b]) => b === binding)) throw new Error(`${where}: binding ${binding} given twice`);
    out.push([binding, buf]);
  }
  const given = out.map(([b]) => b).sort((a, b) => a - b);
  if (given.join() !== info.bindings.join())
    throw new Error(`${where}: buffers for bindings [${given}] given, the entry binds [${info.bindings}]`);
  return out.sort((a, b) => a[0] - b[0]);
}

/** Writes `values` into `dv` at byte `at` by the Params layout; an unknown field or a wrong arity throws. */
export function writeParams(layout: ParamsLayout, values: ParamValues, dv: DataView, at: number, where: string): void {
  for (const [name, v] of Object.entries(values)) {
    const f = layout.fields.get(name);
    if (!f) throw new Error(`${where}: Params has no field ${name}`);
    const xs = typeof v === 'number' ? [v] : v;
    if (xs.length !== f.offsets.length)
      throw new Error(`${where}: Params.${name} takes ${f.offsets.length} values, got ${xs.length}`);
    for (let i = 0; i < xs.length; i++) {
      const o = at + f.offsets[i];
      if (f.type === 'f32') dv.setFloat32(o, xs[i], true);
      else if (f.type === 'i32') dv.setInt32(o, xs[i], true);
      else dv.setUint32(o, xs[i], true);
    }
  }
}

// ---------------------------------------------------------------- shared by the op modules

export const MAX_GROUPS_PER_DIM = 65535;

/** Workgroups for `n` items at `perGroup` each, split into 2-D past 65535 (kernels use wid.y·nwg.x + wid.x). */
export function grid1(n: number, perGroup: number): [number, number, number] {
  const groups = Math.max(1, Math.ceil(n / perGroup));
  if (groups <= MAX_GROUPS_PER_DIM) return [groups, 1, 1];
  const y = Math.ceil(groups / MAX_GROUPS_PER_DIM);
  return [Math.ceil(groups / y), y, 1];
}

/** Rows of activations: B·T. */
export const rows = (s: Shape) => s.B * s.T;
/** Rows of the batch whose mean loss this shape's rows add to (micro-batches: the whole batch's). */
export const lossRows = (s: Shape) => s.lossRows ?? rows(s);
/** The `accumulate` Params flag: the kernels add into gradient outputs (as the twins do) when 1. */
export const acc = (a: boolean | undefined) => (a ? 1 : 0);
